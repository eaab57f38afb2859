"""A bridged verl run never ends with nothing said: pools verl built that the config did not
predict are planned again, a phase without a window is named, a run that wrote no report of its
selection says why, and the launcher's errors are one line (no Ray here; verl's Hydra config)."""

from __future__ import annotations

import pytest

from tests.helpers import require_verl
from verlprof.bridges.verl.driver_side import BuiltGroup, GroupMap, new_group_name
from verlprof.bridges.verl.messages import (
    close_keys,
    hydra_error_line,
    nothing_profiled,
    verlprof_error,
)
from verlprof.config.schema import ComponentConfig, ComponentsConfig, ProfilingConfig
from verlprof.config.topology import GroupTopology, Topology
from verlprof.errors import ConfigError
from verlprof.manifest import Manifest, ReportEntry
from verlprof.plan import build_plan
from verlprof.worker import ProfilingWorkerMixin, annotate


class FakePlan:
    def __init__(self, *groups):
        self.groups = groups


def test_group_map_takes_the_best_match_and_asks_to_replan_when_roles_differ():
    plan = FakePlan(GroupTopology("global_pool", ("actor", "rollout"), 2),
                    GroupTopology("reward_pool", ("rm",), 1))
    asked = []

    def replan(built, name, predicted):
        asked.append((built.roles, name if predicted else None))
        return plan

    groups = GroupMap(plan, replan)
    # verl deploys a reference policy the config did not show: same pool, replanned
    assert groups.group_of(BuiltGroup("ab", ("actor", "rollout", "ref"), 2)) == "global_pool"
    assert groups.group_of(BuiltGroup("ab", ("actor", "rollout", "ref"), 2)) == "global_pool"
    # as predicted: nothing asked
    assert groups.group_of(BuiltGroup("cd", ("rm",), 1)) == "reward_pool"
    # a worker group with no profiler role (a rollout server's workers): not a plan group
    assert groups.group_of(BuiltGroup("ef", (), 4)) is None
    # a pool the config did not predict at all: a group of its own
    assert groups.group_of(BuiltGroup("gh", ("critic",), 2)) == "critic_pool"
    # a second reward pool: a new name clashing with none, the one planned and the one mapped
    assert groups.group_of(BuiltGroup("ij", ("rm",), 1)) == "reward_pool2"
    assert asked == [(("actor", "rollout", "ref"), "global_pool"), (("critic",), None),
                     (("rm",), None)]


def test_a_pool_of_another_size_is_planned_again():
    plan = FakePlan(GroupTopology("global_pool", ("actor", "rollout"), 8))
    asked = []
    groups = GroupMap(plan, lambda built, name, predicted: asked.append(name) or plan)
    assert groups.group_of(BuiltGroup("ab", ("actor", "rollout"), 4)) == "global_pool"
    assert asked == ["global_pool"]


def test_new_group_names_follow_verls_pools_and_never_clash():
    assert new_group_name(("rm",), []) == "reward_pool"
    assert new_group_name(("critic",), ["critic_pool"]) == "critic_pool2"


def _entry(status, group="global_pool", reason=None):
    return ReportEntry(steps=(1,), group=group, rank=0, component=group, backend="nsys",
                       path=f"step0001/{group}/rank0/x.nsys-rep", status=status, reason=reason)


def _manifest(*entries, warnings=()):
    return Manifest(tool="nsys", output_dir="/tmp/x", step_windows=((1,),),
                    reports=tuple(entries), warnings=tuple(warnings))


def test_nothing_profiled_says_why_only_when_the_selection_wrote_nothing():
    selected = ["global_pool rank 0"]
    assert nothing_profiled(_manifest(_entry("ok")), selected) is None
    assert nothing_profiled(_manifest(), []) is None  # nothing selected: nothing expected
    why = nothing_profiled(_manifest(_entry("missing", reason="nsys wrote no file")),
                           selected)
    assert why is not None and "global_pool rank 0" in why and "nsys wrote no file" in why
    why = nothing_profiled(_manifest(_entry("ok", group="controller"),
                                     warnings=["verl built reward_pool ..."]), selected)
    assert why is not None and "verl built reward_pool" in why


def test_verlprof_errors_are_found_behind_rays_wrapper():
    class RayTaskErrorLike(Exception):  # Ray's task errors carry the original as .cause
        def __init__(self, cause):
            super().__init__("Traceback (most recent call last): ...")
            self.cause = cause

    ours = ConfigError("actor_rollout_ref.actor.profiler.ranks", "rank 4 is outside ...")
    assert verlprof_error(RayTaskErrorLike(ours)) is ours
    try:
        raise RuntimeError("wrapped") from ours
    except RuntimeError as err:
        assert verlprof_error(err) is ours
    assert verlprof_error(ValueError("not ours")) is None


def test_close_keys_name_the_misspelt_part():
    config = {"actor_rollout_ref": {"actor": {"profiler": {"enable": False}}}}
    assert close_keys("actor_rollout_ref.actor.profile", config) == [
        "actor_rollout_ref.actor.profiler"]
    assert close_keys("actor_rollout_ref.actr.profiler", config) == ["actor_rollout_ref.actor"]
    assert close_keys("actor_rollout_ref.actor.zzz", config) == []


class Worker(ProfilingWorkerMixin):
    @annotate("actor")
    def update_actor(self, x):
        return x

    @annotate("actor")
    def compute_entropy(self, x):  # annotated, but no phase of the plan
        return x

    @annotate("ref")
    def compute_ref_log_prob(self, x):  # a colocated role that selects nothing here
        return x


def test_a_phase_without_a_window_is_named_once_with_the_key(tmp_path):
    config = ProfilingConfig(steps=(1, 2), tool="torch", output_dir=str(tmp_path),
                             components=ComponentsConfig(actor=ComponentConfig((0,), False,
                                                                               True)))
    plan = build_plan(config, Topology.of({"actor_rollout_ref": 1}, cuda=False))
    worker = Worker()
    worker.verlprof_configure(plan.process("actor_rollout_ref", 0))
    for step in (1, 2):
        worker.verlprof_start((step,))
        worker.update_actor(1)
        worker.compute_entropy(1)
        worker.compute_ref_log_prob(1)
        worker.verlprof_stop((step,))
    worker.compute_entropy(1)  # outside a profiled step: nothing to say
    reports = worker.verlprof_finalize(timeout_s=10)
    notes = [n for r in reports for n in r.notes]
    assert len(notes) == 1, notes
    assert "actor/compute_entropy" in notes[0]
    assert "trainer.profiler.phases.actor=[compute_entropy,compute_log_prob,update_actor]" \
        in notes[0]  # the role's planned phases and this one


# -- with verl's own config ----------------------------------------------------------------


@pytest.fixture(scope="module")
def verl_config():
    require_verl()
    from verlprof.bridges.verl.launch import compose_verl_config

    return compose_verl_config


def test_hydra_refusals_become_one_line_with_did_you_mean_first(verl_config):
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException) as info:
        verl_config(["actor_rollout_ref.actor.profile_ranks=[0]"])
    line = hydra_error_line(info.value, verl_config([]))
    assert "\n" not in line
    assert line.startswith("actor_rollout_ref.actor.profile_ranks: no such key")
    assert "did you mean actor_rollout_ref.actor.profiler" in line and "+" not in line
    with pytest.raises(ConfigCompositionException) as info:
        verl_config(["actor_rollout_ref.actor.zzzzz=1"])
    line = hydra_error_line(info.value, verl_config([]))
    assert line.endswith("write +actor_rollout_ref.actor.zzzzz=...")


def test_a_pool_verl_built_with_a_reference_policy_is_planned_again(verl_config, tmp_path):
    """verl's default (use_kl_loss: false) plans global_pool without ref; verl's fused worker
    group holds ref anyway: the bridge plans again on it, and says so in the manifest."""
    from verlprof.bridges.verl import attach
    from verlprof.bridges.verl.driver_side import active_bridge, set_active_bridge

    config = verl_config([
        "trainer.device=cpu", "global_profiler.tool=torch", "global_profiler.steps=[1]",
        f"global_profiler.save_path={tmp_path}", "trainer.n_gpus_per_node=2",
        "actor_rollout_ref.actor.profiler.enable=true",
        "actor_rollout_ref.actor.profiler.ranks=[1]",
        "global_profiler.global_tool_config.nsys.discrete=false"])
    bridge = attach(config, preflight=False, echo=False)
    try:
        predicted = ("actor", "rollout", "critic")  # gae: a critic; no use_kl_loss: no ref
        built = ("actor", "rollout", "ref", "critic")
        assert bridge.plan.groups[0].roles == predicted
        name = bridge.groups.group_of(BuiltGroup("xyz", built, 2))
        assert name == "global_pool"
        process = bridge.plan.process("global_pool", 1)
        assert process is not None and process.roles == built
        assert bridge.controller.plan is bridge.plan
        assert all(w.report.roles == built for w in process.windows)
        warned = [w for w in bridge.controller.context.warnings if w.startswith("verl built")]
        assert warned == ["verl built global_pool with roles actor/rollout/ref/critic on 2 "
                          "rank(s); the config predicted actor/rollout/critic on 2: planned "
                          "again on the pools verl built (2 process(es) profiled)"]  # and replica 0
        # a pool the config did not predict, selecting nothing: a group of the plan, unplanned
        assert bridge.groups.group_of(BuiltGroup("uvw", ("rm",), 1)) == "reward_pool"
        assert [p.group for p in bridge.plan.processes] == ["global_pool", "rollout_replicas"]
        # a pool too small for the selected rank: one line naming the key
        with pytest.raises(ConfigError, match=r"actor_rollout_ref.actor.profiler.ranks"):
            bridge._replan(BuiltGroup("q", built, 1), "global_pool", True)
    finally:
        bridge.controller.run.release()
        if active_bridge() is bridge:
            set_active_bridge(None)
