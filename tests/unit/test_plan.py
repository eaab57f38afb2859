"""The plan: a pure function of (config, topology), checked decision by decision."""

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from verlprof.config.schema import (
    ComponentConfig,
    ComponentsConfig,
    NsysConfig,
    ProfilingConfig,
    RocprofSysConfig,
    TorchProfilerConfig,
)
from verlprof.config.topology import Topology
from verlprof.errors import ConfigError
from verlprof.plan import ProfilePlan, build_plan, group_step_windows
from verlprof.plan_model import TorchCapture

CPU = Topology.of({"actor_rollout_ref": 2, "critic": 2, "rm": 1}, cuda=False)
GPU4 = Topology.of({"actor_rollout_ref": 4, "critic": 4, "rm": 1}, cuda=True)


def comp(ranks=(), all_ranks=False, discrete=False, key="actor_rollout_ref.actor"):
    return ComponentConfig(tuple(ranks), all_ranks, discrete, f"{key}.profile_ranks",
                           f"{key}.profile_discrete")


def config(steps=(1, 2), continuous=False, tool="nsys", **components):
    return ProfilingConfig(
        steps=tuple(steps), continuous_steps=continuous, tool=tool, output_dir="/out",
        components=ComponentsConfig(**components),
        nsys=NsysConfig(worker_options={"trace": "nvtx,osrt"}))


def test_whole_step_one_window_per_step_and_exact_repeat():
    plan = build_plan(config((1, 2, 5), actor=comp([0, 1])), CPU)
    assert [(p.group, p.rank) for p in plan.processes] == [("actor_rollout_ref", 0),
                                                           ("actor_rollout_ref", 1)]
    proc = plan.process("actor_rollout_ref", 1)
    assert proc.mode == "whole" and [w.steps for w in proc.windows] == [(1,), (2,), (5,)]
    assert "--capture-range-end=repeat:3" in proc.launch_argv
    assert proc.launch_argv[-1] == ("--output=/out/.raw/actor_rollout_ref/rank1/"
                                    "actor_rollout_ref_rank1_%p")
    assert proc.reports[2].path == ("step0005/actor_rollout_ref/rank1/"
                                    "actor_rollout_ref_step5_rank1_{host}_{pid}.nsys-rep")
    # the output directory marks the run's nsys (and its agents) as its own (teardown)
    assert proc.launch_env == {"NSYS_NVTX_PROFILER_REGISTER_ONLY": "0",
                               "VERLPROF_NSYS_OWNER": "/out"}


def test_window_after_follows_the_order_of_step_windows():
    plan = build_plan(config((1, 2, 5), continuous=True, actor=comp([0])), CPU)
    assert plan.window_after((1, 2)) == (5,)
    assert plan.window_after((5,)) is None and plan.window_after((3,)) is None


def test_unselected_ranks_and_groups_are_not_wrapped():
    plan = build_plan(config(actor=comp([1]), critic=comp([0], key="critic")), CPU)
    assert plan.process("actor_rollout_ref", 0) is None
    assert plan.process("critic", 1) is None and plan.process("rm", 0) is None
    assert {(p.group, p.rank) for p in plan.processes} == {("actor_rollout_ref", 1), ("critic", 0)}


def test_continuous_steps_share_windows():
    plan = build_plan(config((1, 2, 5), continuous=True, critic=comp(all_ranks=True,
                                                                      key="critic")), CPU)
    assert plan.step_windows == ((1, 2), (5,))
    proc = plan.process("critic", 1)
    assert "--capture-range-end=repeat:2" in proc.launch_argv
    assert proc.reports[0].path.startswith("step0001-0002/critic/rank1/critic_step1-2_rank1_")


def test_discrete_opens_one_window_per_phase_of_selected_roles_only():
    plan = build_plan(config((1, 2), actor=comp([0], discrete=True),
                             ref=comp([], discrete=True, key="actor_rollout_ref.ref")), CPU)
    proc = plan.process("actor_rollout_ref", 0)
    assert proc.mode == "discrete" and proc.selected_roles == ("actor",)
    assert [(w.steps, w.phase) for w in proc.windows] == [
        ((1,), "compute_log_prob"), ((1,), "update_actor"),
        ((2,), "compute_log_prob"), ((2,), "update_actor")]
    assert "--capture-range-end=repeat:4" in proc.launch_argv
    assert proc.reports[1].path.startswith("step0001/actor.update_actor/rank0/actor.update_actor_")


def test_hybrid_process_selected_when_any_colocated_role_selects_it():
    plan = build_plan(config((3,), actor=comp([0]), rollout=comp([1], key="r")), CPU)
    assert plan.process("actor_rollout_ref", 0).selected_roles == ("actor",)
    assert plan.process("actor_rollout_ref", 1).selected_roles == ("rollout",)


def test_hybrid_discrete_roles_in_same_step_are_ordered_like_ppo():
    plan = build_plan(config((1,), actor=comp([0], discrete=True),
                             rollout=comp([0], discrete=True, key="r"),
                             ref=comp([0], discrete=True, key="f")), CPU)
    phases = [w.phase for w in plan.process("actor_rollout_ref", 0).windows]
    assert phases == ["generate_sequences", "compute_log_prob", "compute_ref_log_prob",
                      "update_actor"]


def test_without_hybrid_engine_each_role_is_its_own_group():
    topo = Topology.of({"actor": 2, "rollout": 2, "ref": 1, "critic": 1}, cuda=False,
                       hybrid_engine=False)
    plan = build_plan(config((1,), rollout=comp([1], key="r"), ref=comp([0], key="f")), topo)
    assert {(p.group, p.rank) for p in plan.processes} == {("rollout", 1), ("ref", 0)}


def test_rank_outside_world_size_names_the_key():
    with pytest.raises(ConfigError) as err:
        build_plan(config(actor=comp([0, 4])), GPU4)
    assert str(err.value) == ("actor_rollout_ref.actor.profile_ranks: rank 4 is outside "
                              "world size 4")


def test_colocated_roles_must_agree_on_discrete():
    with pytest.raises(ConfigError) as err:
        build_plan(config(actor=comp([0], discrete=True),
                          rollout=comp([0], discrete=False, key="actor_rollout_ref.rollout")),
                   CPU)
    assert str(err.value).startswith("actor_rollout_ref.rollout.profile_discrete: false, but "
                                     "actor_rollout_ref.actor.profile_discrete is true")


def test_colocated_role_without_ranks_does_not_constrain_discrete():
    plan = build_plan(config(actor=comp([0], discrete=True),
                             rollout=comp([], discrete=False, key="r")), CPU)
    assert plan.process("actor_rollout_ref", 0).mode == "discrete"


def test_cuda_trigger_without_cuda_is_an_error():
    cfg = dataclasses.replace(config(actor=comp([0])), nsys=NsysConfig(
        worker_options={"trace": "nvtx", "capture-range": "cudaProfilerApi"}))
    with pytest.raises(ConfigError) as err:
        build_plan(cfg, CPU)
    assert str(err.value).startswith("trainer.worker_nsight_options.capture-range:")


def test_gpu_defaults_to_cuda_trigger_without_cpu_workarounds():
    plan = build_plan(config(actor=comp([0])), GPU4)
    argv = plan.process("actor_rollout_ref", 0).launch_argv
    assert "--capture-range=cudaProfilerApi" in argv and "--sample=none" not in argv
    assert plan.process("actor_rollout_ref", 0).launch_env == {"VERLPROF_NSYS_OWNER": "/out"}


def test_trace_without_nvtx_is_an_error():
    cfg = dataclasses.replace(config(actor=comp([0])),
                              nsys=NsysConfig(worker_options={"t": "osrt"}))
    with pytest.raises(ConfigError) as err:
        build_plan(cfg, CPU)
    assert str(err.value).startswith("trainer.worker_nsight_options.t: must include nvtx")


def test_user_capture_range_end_and_output_are_replaced_with_a_warning():
    cfg = dataclasses.replace(config(actor=comp([0])), nsys=NsysConfig(worker_options={
        "trace": "nvtx", "capture-range-end": "repeat-shutdown:6", "o": "/elsewhere"}))
    plan = build_plan(cfg, CPU)
    argv = plan.process("actor_rollout_ref", 0).launch_argv
    assert "--capture-range-end=repeat:2" in argv and "/elsewhere" not in " ".join(argv)
    assert any("capture-range-end: ignored" in w for w in plan.warnings)
    assert any(".o: ignored" in w for w in plan.warnings)


def test_controller_window_is_bounded_to_profiled_steps():
    cfg = dataclasses.replace(config((2, 3, 7), continuous=True, actor=comp([0])),
                              nsys=NsysConfig(worker_options={"trace": "nvtx"},
                                              controller_options={"trace": "nvtx,osrt"}))
    plan = build_plan(cfg, CPU)
    assert plan.controller.windows == ((2, 3), (7,))
    assert "--capture-range-end=repeat:2" in plan.controller.launch_argv
    assert plan.controller.launch_argv[-1] == "--output=/out/controller/controller_%h_%p"


def test_no_controller_capture_without_controller_options():
    assert build_plan(config(actor=comp([0])), CPU).controller.launch_argv == ()


def test_torch_backend_wraps_nothing():
    plan = build_plan(config(tool="torch", actor=comp([0])), CPU)
    proc = plan.process("actor_rollout_ref", 0)
    assert proc.launch_argv == () and proc.reports[0].path.endswith(".pt.trace.json.gz")


def test_rocprof_argv_and_env_user_env_wins():
    cfg = dataclasses.replace(config(tool="rocprof_sys", critic=comp([1], key="critic")),
                              rocprof_sys=RocprofSysConfig(args={"trace": True, "T": "x"},
                                                           env={"ROCPROFSYS_USE_PID": "false"}))
    proc = build_plan(cfg, CPU).process("critic", 1)
    assert proc.launch_argv == ("rocprof-sys-python", "--trace=true", "-T", "x", "--")
    assert proc.launch_env["ROCPROFSYS_OUTPUT_PATH"] == "/out/.raw/critic/rank1"
    assert proc.launch_env["ROCPROFSYS_USE_PID"] == "false"


def test_rocprof_output_dir_with_a_dollar_is_refused_naming_the_key():
    cfg = dataclasses.replace(config(tool="rocprof_sys", critic=comp([1], key="critic")),
                              output_dir="/out/$USER")
    with pytest.raises(ConfigError, match=r"^trainer\.profiler\.output_dir: .* contains '\$'"):
        build_plan(cfg, CPU)


def test_off_when_no_steps_or_disabled_or_nothing_selected():
    assert not build_plan(config((), actor=comp([0])), CPU).enabled
    assert not build_plan(dataclasses.replace(config(actor=comp([0])), enabled=False),
                          CPU).enabled
    assert not build_plan(config((1,)), CPU).enabled


def test_role_not_deployed_warns():
    topo = Topology.of({"actor_rollout_ref": 2}, cuda=False)
    plan = build_plan(config(critic=comp([0], key="critic"), actor=comp([0])), topo)
    assert any(w.startswith("critic.profile_ranks: the critic role is not deployed")
               for w in plan.warnings)


def test_plan_json_round_trips_and_is_deterministic():
    cfg = config((1, 2, 5), continuous=True, actor=comp([0, 1]),
                 critic=comp(all_ranks=True, key="critic"))
    plan = build_plan(cfg, CPU)
    assert ProfilePlan.from_dict(plan.to_dict()) == plan
    assert build_plan(cfg, CPU) == plan


@given(st.lists(st.integers(1, 60), unique=True, max_size=12), st.booleans())
def test_step_windows_partition_the_steps(steps, continuous):
    windows = group_step_windows(tuple(steps), continuous)
    assert [s for w in windows for s in w] == sorted(steps)
    for w in windows:
        assert list(w) == list(range(w[0], w[-1] + 1))
        assert continuous or len(w) == 1
    if continuous:
        for a, b in zip(windows, windows[1:]):
            assert b[0] > a[-1] + 1


def test_torch_settings_reach_the_process_plan():
    cfg = dataclasses.replace(config(tool="torch", actor=comp([0])),
                              torch=TorchProfilerConfig(record_shapes=True, with_stack=True))
    options = build_plan(cfg, CPU).process("actor_rollout_ref", 0).capture_options
    assert options == TorchCapture(record_shapes=True, with_stack=True)  # a typed record


def test_messages_name_the_key_the_options_came_from():
    key = "global_profiler.global_tool_config.nsys.worker_nsight_options"
    cfg = dataclasses.replace(config(actor=comp([0])), nsys=NsysConfig(
        worker_options={"t": "osrt"}, worker_options_key=key))
    with pytest.raises(ConfigError) as err:
        build_plan(cfg, CPU)
    assert str(err.value).startswith(key + ".t: must include nvtx")
