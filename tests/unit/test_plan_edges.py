"""The plan's edges that the main plan tests leave open (found by the mutation check,
docs/reliability.md): a served model's replicas, a plan that profiles nothing, the finish
hook's targets, and each refusal's whole line (key and message), not only its start."""

from __future__ import annotations

import dataclasses

import pytest

from verlprof.config.schema import (
    ComponentConfig,
    ComponentsConfig,
    FinishHookConfig,
    NsysConfig,
    OnDemandConfig,
    ProfilingConfig,
)
from verlprof.config.topology import GroupTopology, Topology
from verlprof.errors import ConfigError
from verlprof.plan import build_plan
from verlprof.plan_model import ControllerPlan, TokenWindow, WindowTime

# a hybrid group of actor and ref, and a served rollout of two replicas of two GPUs each
SERVED = Topology((GroupTopology("actor_rollout_ref", ("actor", "ref"), 2),
                   GroupTopology("rollout", ("rollout",), 2, rank_span=2, engine="vllm")),
                  cuda=False)


def comp(ranks=(), discrete=False, key="actor_rollout_ref.actor", all_ranks=False):
    return ComponentConfig(tuple(ranks), all_ranks, discrete,
                           key and f"{key}.profile_ranks", key and f"{key}.profile_discrete")


def config(tool="torch", steps=(1, 2), **kwargs):
    components = {k: kwargs.pop(k) for k in list(kwargs) if k in ("actor", "rollout", "ref",
                                                                   "critic", "rm")}
    return ProfilingConfig(steps=tuple(steps), tool=tool, output_dir="/out",
                           components=ComponentsConfig(**components), **kwargs)


def refusal(cfg, topology) -> str:
    with pytest.raises(ConfigError) as err:
        build_plan(cfg, topology)
    return str(err.value)


@pytest.mark.parametrize("global_ranks, replicas", [((3,), [1]), ((1,), [0]), ((0, 2), [0, 1])])
def test_a_served_replica_is_selected_by_any_gpu_it_owns_and_runs_whole_steps(global_ranks,
                                                                              replicas):
    cfg = config(actor=comp([0], discrete=True),
                 rollout=comp(global_ranks, discrete=True, key="actor_rollout_ref.rollout"))
    plan = build_plan(cfg, SERVED)
    served = [p for p in plan.processes if p.group == "rollout"]
    assert [p.rank for p in served] == replicas
    # discrete asked for, but a server has no annotated phase: whole steps, all its threads
    assert {p.mode for p in served} == {"whole"}
    assert all(p.capture_options.all_threads is True for p in served)
    (actor,) = [p for p in plan.processes if p.group == "actor_rollout_ref"]
    assert actor.mode == "discrete" and not actor.capture_options.all_threads


def test_a_served_group_with_one_gpu_per_replica_selects_by_replica():
    topology = Topology((GroupTopology("rollout", ("rollout",), 3, rank_span=1,
                                       engine="sglang"),), cuda=False)
    plan = build_plan(config(rollout=comp([2], key="r")), topology)
    assert [(p.group, p.rank) for p in plan.processes] == [("rollout", 2)]


def test_the_finish_hook_on_every_rank_runs_on_worker_ranks_not_on_servers():
    cfg = config(actor=comp([0]), rollout=comp([0], key="r"),
                 finish_hook=FinishHookConfig(cmd="true", all_ranks=True))
    plan = build_plan(cfg, SERVED)
    assert {p.group for p in plan.processes} == {"actor_rollout_ref", "rollout"}
    assert plan.finish_hook is not None
    assert plan.finish_hook.targets == (("actor_rollout_ref", 0),)
    assert plan.finish_hook.key == "trainer.profiler.finish_hook.cmd"


def test_the_finish_hook_on_named_ranks_targets_those_and_names_the_missing_ones():
    topology = Topology.of({"actor_rollout_ref": 4}, cuda=False)
    cfg = config(actor=comp([0, 1, 2]), finish_hook=FinishHookConfig(cmd="true", ranks=(1, 3)))
    plan = build_plan(cfg, topology)
    assert plan.finish_hook is not None and plan.finish_hook.targets == (
        ("actor_rollout_ref", 1),)
    assert plan.warnings == ("trainer.profiler.finish_hook.cmd: rank(s) [3] named for the "
                             "finish hook have no profiled process; the hook runs where "
                             "verlprof profiles",)
    nowhere = build_plan(config(actor=comp([0]), finish_hook=FinishHookConfig(
        cmd="true", ranks=(3,), key="global_profiler.finish_hook_cmd")), topology)
    assert nowhere.finish_hook is not None and nowhere.finish_hook.targets == ()
    assert nowhere.warnings == ("global_profiler.finish_hook_cmd: rank(s) [3] named for the "
                                "finish hook have no profiled process; the hook runs where "
                                "verlprof profiles: on the controller's host",)


def test_a_plan_that_profiles_nothing_still_carries_complete_records():
    off = build_plan(config(steps=()), Topology.of({"actor_rollout_ref": 2}, cuda=False))
    assert not off.enabled and off.processes == ()
    assert off.controller == ControllerPlan()
    assert off.window_time == WindowTime(delay_s=0.0, duration_s=None)
    assert off.finish_hook is None
    on = build_plan(config(actor=comp([0])), Topology.of({"actor_rollout_ref": 2}, cuda=False))
    assert on.enabled and on.disabled_reason == ""


def test_a_discrete_rank_without_phases_is_left_out_with_a_warning_a_whole_one_is_kept():
    topology = Topology.of({"actor_rollout_ref": 2}, cuda=False)
    discrete = build_plan(config(actor=comp([0], discrete=True), phases={"actor": ()}),
                          topology)
    assert discrete.processes == ()
    assert discrete.warnings == (
        "actor_rollout_ref.actor.profile_ranks: actor_rollout_ref rank 0 is selected in "
        "discrete mode, but no method of actor opens a window (no annotated "
        "phase; set trainer.profiler.phases), so it is not profiled",)
    unnamed = build_plan(config(actor=comp([0], discrete=True, key=""), phases={"actor": ()}),
                         topology)
    assert unnamed.warnings[0].startswith("actor: actor_rollout_ref rank 0 is selected")
    whole = build_plan(config(actor=comp([0]), phases={"actor": ()}), topology)
    assert [(p.rank, p.mode) for p in whole.processes] == [(0, "whole")]


def test_rocprof_sys_windows_all_name_the_one_output_of_their_process():
    plan = build_plan(config(tool="rocprof_sys", steps=(1, 2, 3), actor=comp([0])),
                      Topology.of({"actor_rollout_ref": 2}, cuda=False))
    (process,) = plan.processes
    paths = {w.report.path for w in process.windows}
    assert len(process.windows) == 3 and len(paths) == 1, paths


def test_the_controller_capture_names_its_report_glob():
    plan = build_plan(ProfilingConfig(
        steps=(1,), tool="nsys", output_dir="/out",
        components=ComponentsConfig(actor=comp([0])),
        nsys=NsysConfig(worker_options={"trace": "nvtx"}, controller_options={"trace": "nvtx"})),
        Topology.of({"actor_rollout_ref": 1}, cuda=False))
    assert plan.controller.output_glob == "controller/controller_*.nsys-rep"


def test_a_role_not_deployed_is_warned_of_and_the_next_roles_are_still_checked():
    topology = Topology.of({"critic": 2}, cuda=False, hybrid_engine=False)
    assert refusal(config(actor=comp([0]), critic=comp([5], key="critic")), topology) == (
        "critic.profile_ranks: rank 5 is outside world size 2")
    plan = build_plan(config(actor=comp([0]), critic=comp([1], key="critic")), topology)
    assert plan.warnings[0] == ("actor_rollout_ref.actor.profile_ranks: the actor role is not "
                                "deployed in this run, so nothing of it is profiled")
    # a component built without its key (an API caller) is named by its role
    assert refusal(config(critic=comp([5], key="")), topology) == (
        "critic.profile_ranks: rank 5 is outside world size 2")


def test_disagreeing_colocated_roles_are_refused_in_one_whole_line():
    topology = Topology.of({"actor_rollout_ref": 2}, cuda=False)
    assert refusal(config(actor=comp([0], discrete=True),
                          ref=comp([0], discrete=False, key="actor_rollout_ref.ref")),
                   topology) == (
        "actor_rollout_ref.ref.profile_discrete: false, but "
        "actor_rollout_ref.actor.profile_discrete is true; roles colocated in "
        "actor_rollout_ref share one process and one capture, so they must agree")
    assert refusal(config(actor=comp([0], discrete=True),
                          ref=comp([0], discrete=False, key="")),
                   topology).startswith("profile_discrete: false, but ")


def test_a_time_bound_on_a_tool_without_one_is_refused_in_one_whole_line():
    topology = Topology.of({"actor_rollout_ref": 2}, cuda=False)
    for key, bound in (("window_delay_s", {"window_delay_s": 1.0}),
                       ("window_duration_s", {"window_duration_s": 1.0})):
        assert refusal(config(tool="rocprof_sys", actor=comp([0]), **bound), topology) == (
            f"trainer.profiler.{key}: rocprof_sys cannot bound a window in time; leave it "
            "out for this tool")


def test_every_armed_rank_is_launched_under_nsys_after_a_planned_one():
    topology = Topology.of({"actor_rollout_ref": 2, "critic": 1}, cuda=False)
    cfg = config(tool="nsys", actor=comp([0]), nsys=NsysConfig(worker_options={"trace": "nvtx"}),
                 on_demand=OnDemandConfig(enabled=True,
                                          nsys_ranks={"actor_rollout_ref": (0, 1)}))
    plan = build_plan(cfg, topology)
    assert [(p.rank, p.backend, p.mode, len(p.windows)) for p in plan.processes] == [
        (0, "nsys", "whole", 2), (1, "nsys", "whole", 0)]
    # a group that is not there is named with every group that is
    wrong = config(actor=comp([0]), on_demand=OnDemandConfig(enabled=True,
                                                             nsys_ranks={"rm": (0,)}))
    assert refusal(wrong, topology) == ("trainer.profiler.on_demand.nsys_ranks.rm: not a "
                                        "worker group of this run (groups: actor_rollout_ref, "
                                        "critic)")


def test_the_finish_hook_on_the_controllers_host_targets_no_rank():
    plan = build_plan(config(actor=comp([0]), finish_hook=FinishHookConfig(cmd="true")),
                      Topology.of({"actor_rollout_ref": 2}, cuda=False))
    assert plan.finish_hook is not None and plan.finish_hook.targets == ()


def test_colocated_roles_without_phases_are_all_named_in_the_warning():
    cfg = config(actor=comp([0], discrete=True),
                 ref=comp([0], discrete=True, key="actor_rollout_ref.ref"),
                 phases={"actor": (), "ref": ()})
    plan = build_plan(cfg, Topology.of({"actor_rollout_ref": 2}, cuda=False))
    assert plan.processes == ()
    assert plan.warnings == (
        "actor_rollout_ref.actor.profile_ranks, actor_rollout_ref.ref.profile_ranks: "
        "actor_rollout_ref rank 0 is selected in discrete mode, but no method of actor, ref "
        "opens a window (no annotated phase; set trainer.profiler.phases), so it is not "
        "profiled",)


def test_discrete_ranks_capture_each_roles_phases_in_the_order_a_ppo_step_runs_them():
    """What a discrete rank captures, as the report paths name it: verl's phases per role, in
    PPO order, also for phases a config lists out of order (``trainer.profiler.phases``)."""
    discrete = ComponentConfig(ranks=(0,), discrete=True)
    config = ProfilingConfig(steps=(1,), components=ComponentsConfig(
        actor=discrete, rollout=discrete, ref=discrete, critic=discrete, rm=discrete))
    topology = Topology.of({"actor_rollout_ref": 1, "critic": 1, "rm": 1}, cuda=False)
    phases = {p.group: [(w.role, w.phase) for w in p.windows]
              for p in build_plan(config, topology).processes}
    assert phases == {
        "actor_rollout_ref": [("rollout", "generate_sequences"), ("actor", "compute_log_prob"),
                              ("ref", "compute_ref_log_prob"), ("actor", "update_actor")],
        "critic": [("critic", "compute_values"), ("critic", "update_critic")],
        "rm": [("rm", "compute_rm_score")]}
    in_order = ("generate_sequences", "compute_log_prob", "compute_ref_log_prob",
                "compute_values", "compute_rm_score", "update_critic", "train_batch",
                "update_actor", "my_phase")
    listed = dataclasses.replace(config, phases={"critic": tuple(reversed(in_order))})
    (critic,) = [p for p in build_plan(listed, topology).processes if p.group == "critic"]
    assert tuple(w.phase for w in critic.windows) == in_order


def test_a_window_without_time_bounds_opens_and_closes_with_its_step():
    """The default bounds, which a plan written before the time keys existed reads back as."""
    assert not WindowTime().bounded
    assert WindowTime().describe() == "opens when its step starts, closes at the step's end"
    assert WindowTime(delay_s=0.5).describe() == ("opens 0.5 s into its step, closes at the "
                                                  "step's end")


@pytest.mark.parametrize("tokens, said", [
    (TokenWindow(), "every engine iteration"),
    (TokenWindow(start=0, end=20), "engine iterations 0 to 20"),
    (TokenWindow(start=10), "engine iterations 10 to the end"),
    (TokenWindow(start=10, end=20), "engine iterations 10 to 20"),
])
def test_the_engine_token_window_as_verlprof_plan_prints_it(tokens, said):
    assert tokens.describe() == said


def test_a_plan_written_as_json_is_indented_and_reads_back_equal():
    """``plan.json`` is for people too (two-space indent), and reads back as the same plan:
    its tuples are tuples again (JSON has lists), every field checked strictly."""
    import json

    import dacite

    from verlprof.plan_model import ProfilePlan

    plan = dataclasses.replace(build_plan(config(actor=comp([0])), SERVED), built_from=None)
    text = plan.to_json()
    assert text.splitlines()[1].startswith('  "') and not text.splitlines()[1].startswith('   ')
    again = ProfilePlan.from_dict(json.loads(text))
    assert again == plan and isinstance(again.step_windows[0], tuple)
    with pytest.raises(dacite.UnexpectedDataError):  # strict: an unknown key is refused
        ProfilePlan.from_dict({**json.loads(text), "not_a_field": 1})


def test_a_plan_equals_the_same_plan_built_from_other_inputs():
    """The inputs a plan keeps to be rebuilt elsewhere are not compared: a config that
    differs only where the plan does not look gives an equal plan. Its steps and reports are
    what its windows and processes say."""
    one = build_plan(config(actor=comp([0])), SERVED)
    other = build_plan(config(actor=comp([0]), disabled_reason="never shown while active"),
                       SERVED)
    assert one.built_from != other.built_from and one == other
    assert one == dataclasses.replace(one, built_from=None)
    assert one.steps == (1, 2)
    assert one.reports == tuple(r for p in one.processes for r in p.reports) and one.reports
