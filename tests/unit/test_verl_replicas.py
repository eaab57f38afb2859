"""verl's served models as groups of the plan: rollout replicas, the served reward model and
the distillation teacher, selected the way verl maps ``profiler.ranks`` (global GPU ranks -> the
replica owning them), on verl 0.9.1's own Hydra-composed config (no Ray)."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from tests.helpers import require_verl
from verlprof.bridges.verl import plan_of

require_verl()

NSYS = "global_profiler.global_tool_config.nsys"
BASE = ["trainer.device=cpu", "global_profiler.tool=nsys", "global_profiler.steps=[1,2]",
        "trainer.n_gpus_per_node=4", "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
        f"{NSYS}.worker_nsight_options.capture-range=nvtx",
        "global_profiler.save_path=/tmp/verlprof-replica-plan"]


@pytest.fixture(scope="module")
def compose():
    from verlprof.bridges.verl.launch import compose_verl_config

    def plan(*overrides):
        config = compose_verl_config([*BASE, *overrides])
        return plan_of(OmegaConf.to_container(config, resolve=True))

    return plan


def _replicas(plan, group="rollout_replicas"):
    return [p.rank for p in plan.processes if p.group == group]


@pytest.mark.parametrize("ranks, replicas", [("[2]", [1]), ("[0,1]", [0]), ("[1,3]", [0, 1]),
                                             ("[3]", [1])])
def test_global_ranks_select_the_replica_that_owns_them(compose, ranks, replicas):
    plan = compose("actor_rollout_ref.actor.profiler.enable=true",
                   f"actor_rollout_ref.actor.profiler.ranks={ranks}")
    group = next(g for g in plan.groups if g.name == "rollout_replicas")
    assert (group.world_size, group.rank_span, group.engine) == (2, 2, "vllm")
    assert _replicas(plan) == replicas
    for process in plan.processes:
        if process.group == "rollout_replicas":
            assert process.mode == "whole" and process.launch_argv[0] == "nsys"
            assert [w.report.path for w in process.windows] == [
                f"step000{s}/rollout_replicas/rank{process.rank}/"
                f"rollout_replicas_step{s}_rank{process.rank}_{{host}}_{{pid}}.nsys-rep"
                for s in (1, 2)]


def test_all_ranks_select_every_replica_and_discrete_stays_per_step(compose):
    plan = compose("actor_rollout_ref.actor.profiler.enable=true",
                   "actor_rollout_ref.actor.profiler.all_ranks=true", f"{NSYS}.discrete=true")
    assert _replicas(plan) == [0, 1]
    assert {p.mode for p in plan.processes if p.group == "rollout_replicas"} == {"whole"}


def test_standalone_replicas_are_sized_by_the_rollouts_own_pool(compose):
    plan = compose("actor_rollout_ref.hybrid_engine=false", "actor_rollout_ref.rollout.nnodes=2",
                   "actor_rollout_ref.rollout.n_gpus_per_node=4",
                   "actor_rollout_ref.actor.profiler.enable=true",
                   "actor_rollout_ref.actor.profiler.ranks=[3]")
    group = next(g for g in plan.groups if g.name == "rollout_replicas")
    assert group.world_size == 4 and _replicas(plan) == [1]  # 8 GPUs of its own, 2 each


def test_a_replica_wider_than_a_node_is_one_server_per_node(compose):
    """tensor parallel 4 on nodes of 2 GPUs: verl starts two servers per replica, one per node;
    a global rank selects every server of its replica, each with reports of its own, and the
    plan's table says which replica's node each is."""
    from rich.console import Console

    from verlprof.plan.render import render_plan

    plan = compose("trainer.nnodes=4", "trainer.n_gpus_per_node=2",
                   "actor_rollout_ref.rollout.tensor_model_parallel_size=4",
                   "actor_rollout_ref.actor.profiler.enable=true",
                   "actor_rollout_ref.actor.profiler.ranks=[5]")
    group = next(g for g in plan.groups if g.name == "rollout_replicas")
    assert (group.world_size, group.rank_span, group.servers_per_replica,
            group.replica_span) == (4, 2, 2, 4)
    assert _replicas(plan) == [2, 3]  # GPU 5 is replica 1's: both of its servers
    paths = {w.report.path for p in plan.processes if p.group == "rollout_replicas"
             for w in p.windows}
    assert "step0001/rollout_replicas/rank3/rollout_replicas_step1_rank3_{host}_{pid}" \
           ".nsys-rep" in paths
    console = Console(width=200, record=True)
    render_plan(plan, console)
    text = console.export_text()
    assert "rollout_replicas (vllm replicas of 4 GPU(s), 2 servers each)" in text
    assert "2 (replica 1 server 0, GPUs 4-5), 3 (replica 1 server 1, GPUs 6-7)" in text


def test_a_pd_disaggregated_replica_is_its_prefill_server_then_its_decode_servers(compose):
    """verl's PD replica (vLLMPDReplica, SGLangPDReplica): one prefill and ``decode_replicas``
    decode servers of tensor parallel GPUs each, on one node; a GPU of the replica selects all
    of them."""
    pd = "actor_rollout_ref.rollout.disaggregation"
    plan = compose("trainer.n_gpus_per_node=6", "actor_rollout_ref.rollout.n_gpus_per_node=6",
                   "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
                   f"{pd}.enabled=true", f"{pd}.decode_replicas=2",
                   "actor_rollout_ref.actor.profiler.enable=true",
                   "actor_rollout_ref.actor.profiler.ranks=[4]")
    group = next(g for g in plan.groups if g.name == "rollout_replicas")
    assert (group.world_size, group.rank_span, group.servers_per_replica) == (6, 1, 3)
    assert _replicas(plan) == [3, 4, 5]  # GPU 4 is replica 1's: its prefill and 2 decodes
    from verlprof.bridges.verl.launch import compose_verl_config
    from verlprof.config.loader import config_from_dict

    uneven = config_from_dict(OmegaConf.to_container(compose_verl_config([
        *BASE, "trainer.n_gpus_per_node=6", f"{pd}.enabled=true",
        f"{pd}.decode_tensor_model_parallel_size=1"]), resolve=True))
    assert uneven.topology.group("rollout_replicas") is None
    [said] = [w for w in uneven.warnings if "decode_tensor_model_parallel_size" in w]
    assert said.startswith(f"{pd}.decode_tensor_model_parallel_size: 1 GPUs per decode server "
                           "against the prefill's 2")


def test_a_replica_that_does_not_split_over_its_nodes_is_one_line(compose):
    from verlprof.errors import ConfigError

    with pytest.raises(ConfigError) as error:
        compose("trainer.n_gpus_per_node=4", "actor_rollout_ref.rollout.n_gpus_per_node=3",
                "actor_rollout_ref.rollout.tensor_model_parallel_size=4")
    assert str(error.value).startswith("actor_rollout_ref.rollout.n_gpus_per_node: 3 GPUs per "
                                       "node do not divide a replica's 4 GPUs")


def test_the_served_reward_model_is_a_group_of_replicas(compose):
    """verl 0.8+ serves the reward model: selecting it profiles its replicas (it was refused)."""
    plan = compose("reward.reward_model.enable=true", "reward.reward_model.rollout.name=sglang",
                   "reward.reward_model.rollout.tensor_model_parallel_size=1",
                   "+reward_model.profiler.enable=true", "+reward_model.profiler.ranks=[3]",
                   "+reward_model.profiler.tool=nsys")
    group = next(g for g in plan.groups if g.name == "reward_replicas")
    assert (group.roles, group.world_size, group.engine) == (("rm",), 4, "sglang")
    assert _replicas(plan, "reward_replicas") == [3]
    assert not [u for u in plan.unprofiled if u.name == "reward_model"]


def test_the_plan_lists_replicas_with_their_gpus(compose, capsys):
    from rich.console import Console

    from verlprof.plan.render import render_plan

    plan = compose("actor_rollout_ref.actor.profiler.enable=true",
                   "actor_rollout_ref.actor.profiler.ranks=[2]")
    render_plan(plan, console=Console(width=200, force_terminal=False))
    out = capsys.readouterr().out
    assert "rollout_replicas (vllm replicas of 2 GPU(s))" in out
    assert "1 (GPUs 2-3)" in out
    assert "step0001/rollout_replicas/rank1/" in out


def test_torch_follows_every_thread_of_verls_processes_and_only_the_plans_own(compose,
                                                                              tmp_path):
    """verl's workers are async Ray actors and its servers answer on an event loop: the
    phases run on another thread than the window's calls, so the torch profiler of every
    process of a verl plan follows all threads; a seed-layout plan's stay on their own."""
    from tests.unit.test_controller import plan_of as seed_plan

    plan = compose("global_profiler.tool=torch", "actor_rollout_ref.actor.profiler.enable=true",
                   "actor_rollout_ref.actor.profiler.ranks=[0]")
    assert {p.group for p in plan.processes} == {"global_pool", "rollout_replicas"}
    assert all(p.capture_options.all_threads for p in plan.processes)
    assert not any(p.capture_options.all_threads
                   for p in seed_plan(tmp_path, [1]).processes)


def test_a_rollout_block_set_apart_selects_the_replicas(compose):
    """verl's servers read the rollout's own block (it interpolates the actor's unless set
    apart): ranks there pick the replicas, while the training processes follow the actor."""
    plan = compose("actor_rollout_ref.actor.profiler.enable=true",
                   "actor_rollout_ref.actor.profiler.ranks=[0]",
                   "actor_rollout_ref.rollout.profiler.ranks=[3]")
    assert _replicas(plan) == [1]  # GPU 3 is replica 1's (tensor parallel 2)
    assert [(p.group, p.rank) for p in plan.processes if p.group == "global_pool"] == [
        ("global_pool", 0)]
    off = compose("actor_rollout_ref.actor.profiler.enable=true",
                  "actor_rollout_ref.actor.profiler.ranks=[0]",
                  "actor_rollout_ref.rollout.profiler.enable=false")
    assert _replicas(off) == [] and [p.group for p in off.processes] == ["global_pool"]


def test_a_replica_rank_outside_the_replicas_is_one_line_naming_the_key(compose):
    from verlprof.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        compose("actor_rollout_ref.actor.profiler.enable=true",
                "actor_rollout_ref.rollout.profiler.ranks=[9]")
    assert str(err.value) == ("actor_rollout_ref.rollout.profiler.ranks: rank 9 is outside "
                              "the rollout replicas' 4 GPUs")


TEACHER = "distillation.teacher_models.teacher_model.inference"
DISTILL = ["distillation.enabled=true", "distillation.nnodes=1",
           "distillation.n_gpus_per_node=4"]


def test_the_distillation_teacher_is_a_group_selected_by_its_inference_profiler(compose,
                                                                              capsys):
    """verl 0.9.1's teacher (its default entry, tensor parallel 2 on a pool of 4 GPUs: two
    replicas): its inference block's profiler, which verl never reads, selects the replica
    owning each GPU rank of the teacher's pool; the plan lists it with its reports."""
    from rich.console import Console

    from verlprof.plan.render import render_plan

    plan = compose(*DISTILL, f"+{TEACHER}.profiler._target_=verl.utils.profiler.ProfilerConfig",
                   f"+{TEACHER}.profiler.enable=true", f"+{TEACHER}.profiler.ranks=[2]")
    group = next(g for g in plan.groups if g.name == "teacher_replicas")
    assert (group.roles, group.world_size, group.rank_span, group.engine) == (
        ("teacher",), 2, 2, "vllm")
    assert [(p.group, p.rank) for p in plan.processes] == [("teacher_replicas", 1)]
    teacher = plan.processes[0]
    assert teacher.mode == "whole" and teacher.launch_argv[0] == "nsys"
    assert [w.report.path for w in teacher.windows] == [
        f"step000{s}/teacher_replicas/rank1/teacher_replicas_step{s}_rank1_{{host}}_{{pid}}"
        ".nsys-rep" for s in (1, 2)]
    assert not plan.unprofiled and not plan.warnings
    render_plan(plan, console=Console(width=200, force_terminal=False))
    out = capsys.readouterr().out
    assert "teacher_replicas (vllm replicas of 2 GPU(s))" in out and "1 (GPUs 2-3)" in out
    unselected = compose(*DISTILL, "actor_rollout_ref.actor.profiler.enable=true")
    assert "teacher_replicas" not in {p.group for p in unselected.processes}
    every = compose(*DISTILL, f"+{TEACHER}.profiler.all_ranks=true")
    assert _replicas(every, "teacher_replicas") == [0, 1]
    off = compose(f"+{TEACHER}.profiler.ranks=[0]")
    assert "teacher_replicas" not in {g.name for g in off.groups}


def test_a_teacher_rank_outside_its_pool_is_one_line_naming_the_key(compose):
    from verlprof.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        compose(*DISTILL, f"+{TEACHER}.profiler.ranks=[4]")
    assert str(err.value) == (f"{TEACHER}.profiler.ranks: rank 4 is outside the teacher "
                              "replicas' 4 GPUs")


def test_a_teacher_block_without_target_is_one_warning():
    """verl's vLLM and SGLang servers read ``profiler.tool`` of the block they get: a block
    added without its ``_target_`` reaches them as a plain dict."""
    from verlprof.bridges.verl.launch import compose_verl_config
    from verlprof.config.build import config_from_dict

    config = compose_verl_config([*BASE, *DISTILL, f"+{TEACHER}.profiler.ranks=[0]"])
    loaded = config_from_dict(OmegaConf.to_container(config, resolve=True), env={})
    assert f"{TEACHER}.profiler has no _target_: verl's rollout servers read it as a plain " \
           f"dict and fail; add {TEACHER}.profiler._target_=verl.utils.profiler.ProfilerConfig" \
        in loaded.warnings


def test_a_teacher_selection_with_distillation_off_is_one_warning():
    """No teacher runs while ``distillation.enabled`` is not true: a selection in a teacher's
    block then selects nothing, and says so instead of nothing."""
    from verlprof.bridges.verl.launch import compose_verl_config
    from verlprof.config.build import config_from_dict

    config = compose_verl_config([*BASE, f"+{TEACHER}.profiler.ranks=[0]"])
    loaded = config_from_dict(OmegaConf.to_container(config, resolve=True), env={})
    assert loaded.topology.group("teacher_replicas") is None
    assert f"{TEACHER}.profiler: distillation.enabled is not true, so no teacher runs and " \
           "this block selects nothing" in loaded.warnings
    quiet = compose_verl_config([*BASE])
    assert not [w for w in config_from_dict(OmegaConf.to_container(quiet, resolve=True),
                                            env={}).warnings if "teacher" in w]
