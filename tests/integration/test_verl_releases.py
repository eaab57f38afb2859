"""Every verl release's own trainer configs, planned: components, ranks, windows and file names
checked against what that release's keys ask for.

For each release (0.4.1 to 0.9.1; wheels from PyPI, see tests/verl_wheels.py) and each of its
config roots (Hydra-composed ``ppo_trainer`` and ``ppo_megatron_trainer``, and the generated
``_generated_ppo_trainer.yaml`` from 0.5.0 on), one set of overrides selects actor rank 0 and
critic rank 1 in that release's own keys, and turns KL on (so verl has a reference policy). The
whole-step and discrete plans, with nsys and with the torch profiler, must then be:

* one group, ``global_pool`` (verl fuses every role of the pool into one process per GPU), of
  ``trainer.nnodes * trainer.n_gpus_per_node`` = 8 ranks, hosting actor, rollout, ref, critic;
* rank 0 selected by actor and rollout (and ref where that release profiles the fused reference
  policy with the actor's block, or selects it with the same block: 0.5.0, 0.8.0+), rank 1 by
  the critic; no other process wrapped;
* discrete windows: exactly the methods that release's workers annotate and its trainer calls.

The Hydra-composed roots go through :func:`load_config` with the overrides, as a user runs
``verlprof plan``; the variants of one root are applied to the composed tree with verlprof's own
override parser (composition is the slow part: about 0.6 s a root). Marked ``integration``: it
downloads from PyPI the first time, and plans about 80 configs (30 s on 2 cores).
"""

from __future__ import annotations

import copy
import functools
import os
from typing import Dict, List, Sequence, Tuple

import pytest
from omegaconf import DictConfig, OmegaConf

from tests.verl_wheels import RELEASES, config_dir
from verlprof.config import ConfigError, config_from_dict, load_config
from verlprof.config import overrides as ov
from verlprof.config.build import LoadedConfig
from verlprof.plan import build_plan
from verlprof.plan_model import ProfilePlan

pytestmark = pytest.mark.integration

ROOTS = ("ppo_trainer", "ppo_megatron_trainer", "_generated_ppo_trainer")
OLD = ("0.4.1", "0.5.0")
"""Releases of ``trainer.profile_steps`` and ``profiler: {discrete, all_ranks, ranks}``."""
ENGINE = ("0.8.0", "0.9.0", "0.9.1")
"""Releases of the engine workers (``reward.reward_model``, ref fused into the actor)."""

CASES = [(r, root) for r in RELEASES for root in ROOTS
         if not (r == "0.4.1" and root.startswith("_generated"))]


def selection(release: str) -> List[str]:
    """Actor rank 0, critic rank 1, KL on, in the release's own keys."""
    if release == "0.4.1":
        return ["trainer.profile_steps=[1,2]", "actor_rollout_ref.actor.profiler.ranks=[0]",
                "actor_rollout_ref.rollout.profiler.ranks=[0]", "critic.profiler.ranks=[1]",
                "actor_rollout_ref.actor.use_kl_loss=true"]
    if release == "0.5.0":
        return ["trainer.profile_steps=[1,2]", "actor_rollout_ref.profiler.ranks=[0]",
                "critic.profiler.ranks=[1]", "actor_rollout_ref.actor.use_kl_loss=true"]
    return ["global_profiler.tool=nsys", "global_profiler.steps=[1,2]",
            "actor_rollout_ref.actor.profiler.enable=true",
            "actor_rollout_ref.actor.profiler.ranks=[0]", "critic.profiler.enable=true",
            "critic.profiler.ranks=[1]", "actor_rollout_ref.actor.use_kl_loss=true"]


def torch_tool(release: str) -> List[str]:
    if release in OLD:  # no tool key in verl: verlprof's own block picks it
        return ["+trainer.profiler.tool=torch"]
    return ["global_profiler.tool=torch"]


def discrete(release: str, tool: str) -> List[str]:
    if release == "0.4.1":
        return [f"{r}.profiler.discrete=true" for r in (
            "actor_rollout_ref.actor", "actor_rollout_ref.rollout", "actor_rollout_ref.ref",
            "critic")]
    if release == "0.5.0":
        return ["actor_rollout_ref.profiler.discrete=true", "critic.profiler.discrete=true"]
    if tool == "torch":  # per role in verl; the rollout's follows the actor's
        return ["actor_rollout_ref.actor.profiler.tool_config.torch.discrete=true",
                "actor_rollout_ref.ref.profiler.tool_config.torch.discrete=true",
                "critic.profiler.tool_config.torch.discrete=true"]
    return ["global_profiler.global_tool_config.nsys.discrete=true"]


def rank0_roles(release: str) -> Tuple[str, ...]:
    """0.5.0's one block selects actor, rollout and ref; 0.8.0+ profile the fused reference
    policy with the actor's block; 0.4.1 and 0.6/0.7 read the ref's own (unset) block."""
    if release == "0.5.0" or release in ENGINE:
        return ("actor", "rollout", "ref")
    return ("actor", "rollout")


def discrete_phases(release: str) -> Dict[int, List[Tuple[str, str]]]:
    """(role, phase) windows per step of ranks 0 and 1, in the order a PPO step runs them."""
    rank0: List[Tuple[str, str]] = []
    if release in ("0.4.1", "0.5.0", "0.6.0"):  # rollout.mode sync: the trainer calls it
        rank0.append(("rollout", "generate_sequences"))
    rank0.append(("actor", "compute_log_prob"))
    if "ref" in rank0_roles(release):
        rank0.append(("ref", "compute_ref_log_prob"))
    rank0.append(("actor", "update_actor"))
    critic = [("critic", "train_batch")] if release in ENGINE else [
        ("critic", "compute_values"), ("critic", "update_critic")]
    return {0: rank0, 1: critic}


@functools.cache
def composed(release: str, root: str) -> DictConfig:
    """The root as verl composes it (or the generated file as it is), before any override."""
    folder = str(config_dir(release))
    if root.startswith("_generated"):
        return OmegaConf.load(os.path.join(folder, f"{root}.yaml"))
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=folder, version_base=None):
            return compose(config_name=root)
    finally:
        GlobalHydra.instance().clear()


def load(release: str, root: str, overrides: Sequence[str]) -> LoadedConfig:
    cfg = copy.deepcopy(composed(release, root))
    OmegaConf.set_struct(cfg, False)
    ov.apply(cfg, ov.parse(list(overrides)))
    return config_from_dict(cfg, env={})


def plan_of(loaded: LoadedConfig) -> ProfilePlan:
    return build_plan(loaded.profiling, loaded.topology)


SERVED = ("0.7.0", "0.8.0", "0.9.0", "0.9.1")
"""Releases whose rollout is served by replicas (verl's ``RolloutReplica``)."""


def workers(items):
    """The worker groups of a topology, or the processes of a plan, less a served model's
    replicas (tests/unit/test_verl_replicas.py checks those)."""
    served = ("rollout_replicas", "reward_replicas")
    return [x for x in items if getattr(x, "group", getattr(x, "name", None)) not in served]


@pytest.mark.parametrize(("release", "root"), CASES, ids=[f"{r}-{root}" for r, root in CASES])
def test_composed_config_with_the_release_keys_plans_what_they_ask(release, root):
    if root.startswith("_generated"):
        loaded = load(release, root, selection(release))
    else:  # exactly as a user runs it: verlprof plan --config <root>.yaml <overrides>
        loaded = load_config(str(config_dir(release) / f"{root}.yaml"), selection(release),
                             env={})
    prof = loaded.profiling
    assert prof.verl_release == release
    assert prof.source == ("verl_profiler" if release in OLD else "verl_global_profiler")
    assert [(g.name, g.roles, g.world_size) for g in workers(loaded.topology.groups)] == [
        ("global_pool", ("actor", "rollout", "ref", "critic"), 8)]
    # generation is served from 0.7.0 on: the rollout's replicas are a group of their own
    assert [g.name for g in loaded.topology.groups if g.served] == (
        ["rollout_replicas"] if release in SERVED else [])
    assert loaded.topology.unprofiled == ()
    plan = plan_of(loaded)
    assert [(p.group, p.rank, p.selected_roles, p.mode) for p in workers(plan.processes)] == [
        ("global_pool", 0, rank0_roles(release), "whole"),
        ("global_pool", 1, ("critic",), "whole")]
    for proc in workers(plan.processes):
        assert [w.report.path for w in proc.windows] == [
            f"step000{s}/global_pool/rank{proc.rank}/global_pool_step{s}_rank{proc.rank}"
            f"_{{host}}_{{pid}}.nsys-rep" for s in (1, 2)]
        assert "--capture-range-end=repeat:2" in proc.launch_argv
    assert plan.controller.launch_argv  # verl's controller_nsight_options are set
    assert plan.finish_hook is None


@pytest.mark.parametrize("tool", ["nsys", "torch"])
@pytest.mark.parametrize(("release", "root"), CASES, ids=[f"{r}-{root}" for r, root in CASES])
def test_discrete_windows_are_the_methods_the_release_annotates(release, root, tool):
    if tool == "torch" and release in ("0.6.0", "0.7.0"):
        # verl 0.6/0.7 role blocks have no torch discrete key (step_start/step_end instead)
        extra = torch_tool(release) + ["++actor_rollout_ref.actor.profiler.tool_config.torch."
                                       "discrete=true", "++critic.profiler.tool_config.torch."
                                       "discrete=true"]
    else:
        extra = (torch_tool(release) if tool == "torch" else []) + discrete(release, tool)
    plan = plan_of(load(release, root, selection(release) + extra))
    suffix = ".nsys-rep" if tool == "nsys" else ".pt.trace.json.gz"
    expected = discrete_phases(release)
    for proc in workers(plan.processes):
        assert proc.mode == "discrete" and proc.backend == tool
        calls = [(role, phase) for role, phase in expected[proc.rank]]
        assert [(w.steps, w.role, w.phase) for w in proc.windows] == [
            ((s,), role, phase) for s in (1, 2) for role, phase in calls]
        first = proc.windows[0].report.path
        role, phase = calls[0]
        assert first == (f"step0001/{role}.{phase}/rank{proc.rank}/{role}.{phase}_step1_rank"
                         f"{proc.rank}_{{host}}_{{pid}}{suffix}")
        if tool == "nsys":
            assert f"--capture-range-end=repeat:{len(proc.windows)}" in proc.launch_argv
    assert {p.rank for p in workers(plan.processes)} == {0, 1}
    # a replica has no annotated phase of its own: its windows stay steps
    assert {p.mode for p in plan.processes if p.group == "rollout_replicas"} <= {"whole"}


@pytest.mark.parametrize(("release", "root"), CASES, ids=[f"{r}-{root}" for r, root in CASES])
def test_torch_whole_step_plans_trace_files(release, root):
    extra = torch_tool(release)
    if release in ENGINE:
        extra.append("actor_rollout_ref.actor.profiler.tool_config.torch.contents=[cuda,shapes]")
    loaded = load(release, root, selection(release) + extra)
    plan = plan_of(loaded)
    assert [(p.rank, p.backend, p.launch_argv) for p in workers(plan.processes)] == [
        (0, "torch", ()), (1, "torch", ())]
    assert workers(plan.processes)[1].windows[1].report.path == (
        "step0002/global_pool/rank1/global_pool_step2_rank1_{host}_{pid}.pt.trace.json.gz")
    if release in ENGINE:  # verl's contents: the actor's [cuda, shapes], the critic's []
        assert plan.processes[0].capture_options.record_shapes is True
        assert plan.processes[0].capture_options.cuda is True
        assert any(w.startswith("torch contents differ between roles") for w in
                   loaded.warnings)
    if release in ("0.6.0", "0.7.0"):
        assert any(w.startswith(f"global_profiler.tool: torch: verl {release}'s own "
                                "start_profile raises TypeError") for w in loaded.warnings)


@pytest.mark.parametrize("release", ["0.6.0", "0.7.0"])
def test_reward_pool_of_060_and_070(release):
    pool = ["reward_model.enable=true", "reward_model.enable_resource_pool=true",
            "reward_model.nnodes=1", "reward_model.n_gpus_per_node=2"]
    loaded = load(release, "ppo_trainer", selection(release) + pool)
    # 0.7.0 serves it through its reward loop by default: replicas, not a worker pool
    rm = ("reward_pool", ("rm",), 2) if release == "0.6.0" else ("reward_replicas", ("rm",), 2)
    assert [(g.name, g.roles, g.world_size) for g in loaded.topology.groups
            if g.name != "rollout_replicas"] == [
        ("global_pool", ("actor", "rollout", "ref", "critic"), 8), rm]
    colocated = load(release, "ppo_trainer", selection(release) + ["reward_model.enable=true"])
    roles = colocated.topology.groups[0].roles
    # 0.7.0 serves the reward model through its reward loop by default: no verl worker of it
    assert ("rm" in roles) == (release == "0.6.0")


@pytest.mark.parametrize("release", ENGINE)
def test_reward_pool_and_teacher_of_080_and_later(release):
    extra = ["reward.reward_model.enable=true", "reward.reward_model.enable_resource_pool=true",
             "reward.reward_model.nnodes=1", "distillation.enabled=true",
             "distillation.nnodes=1"]
    loaded = load(release, "ppo_trainer", selection(release) + extra)
    # the reward model is served: its replicas (tensor parallel 2 by default) on its own pool
    assert [(g.name, g.roles, g.world_size) for g in loaded.topology.groups] == [
        ("global_pool", ("actor", "rollout", "ref", "critic"), 8),
        ("rollout_replicas", ("rollout",), 4), ("reward_replicas", ("rm",), 4),
        ("teacher_replicas", ("teacher",), 4)]  # the teacher's default tensor parallel is 2
    assert loaded.topology.unprofiled == ()
    plan = plan_of(loaded)
    assert {p.group for p in plan.processes} == {"global_pool", "rollout_replicas"}
    with pytest.raises(ConfigError, match="^reward_model.nnodes: is 1 but "
                                          "reward.reward_model.nnodes is 2; set only"):
        load(release, "ppo_trainer", selection(release) + [
            "reward.reward_model.enable=true", "reward.reward_model.enable_resource_pool=true",
            "reward.reward_model.nnodes=2", "reward_model.nnodes=1"])


def test_verl_091_own_ppo_trainer_with_the_briefs_overrides():
    """The overrides a verl 0.9.1 user types on a CPU machine (NVTX trigger): global_pool hosts
    actor, rollout, ref and critic; rank 0 is the critic's, rank 1 the actor's."""
    overrides = [
        "trainer.device=cpu", "global_profiler.tool=nsys", "global_profiler.steps=[1,2]",
        "actor_rollout_ref.actor.profiler.enable=true",
        "actor_rollout_ref.actor.profiler.ranks=[1]", "critic.profiler.enable=true",
        "critic.profiler.ranks=[0]", "global_profiler.save_path=/tmp/x",
        "global_profiler.global_tool_config.nsys.worker_nsight_options.capture-range=nvtx",
        "global_profiler.global_tool_config.nsys.worker_nsight_options.trace='nvtx,osrt'",
        "global_profiler.global_tool_config.nsys.controller_nsight_options.trace='nvtx,osrt'",
        "actor_rollout_ref.actor.use_kl_loss=true"]
    loaded = load_config(str(config_dir("0.9.1") / "ppo_trainer.yaml"), overrides, env={})
    plan = plan_of(loaded)
    assert [(g.name, g.roles) for g in plan.groups] == [
        ("global_pool", ("actor", "rollout", "ref", "critic")),
        ("rollout_replicas", ("rollout",))]
    assert [(p.group, p.rank, p.selected_roles) for p in plan.processes] == [
        ("global_pool", 0, ("critic",)), ("global_pool", 1, ("actor", "rollout", "ref")),
        ("rollout_replicas", 0, ("rollout",))]  # the replica owning global rank 1
    assert all("--capture-range=nvtx" in p.launch_argv for p in plan.processes)
    assert plan.output_dir == "/tmp/x" and loaded.warnings == ()
