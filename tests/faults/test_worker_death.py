"""Fault 1: a worker SIGKILLed while its capture window is open.

The controller names the rank (one line, in the log, the manifest's warnings and
``failed_ranks``), the other ranks' reports are complete and open with ``nsys export``, the dead
rank's window cut by its death is placed ``incomplete`` (what nsys captured until then), the
later ones are ``missing`` with the reason, and training continues
(``on_rank_failure="continue"``, the default) or stops with
:class:`~verlprof.errors.ProfilingRuntimeError` naming the rank (``"raise"``)."""

from __future__ import annotations

import pytest

from tests.faults import harness, light
from verlprof.errors import ProfilingRuntimeError

pytestmark = pytest.mark.integration


def test_demo_rank_killed_in_open_window_training_continues(ray_cluster, tmp_path):
    """The demo trainer with ``demo.on_worker_death: continue``: rank 1 kills itself
    (SIGKILL) in compute_log_prob of step 1, inside its open window."""
    out = str(tmp_path)
    plan, result = harness.plan_and_run(out, [
        "trainer.total_training_steps=2", "trainer.profile_steps=[1,2]",
        "trainer.controller_nsight_options=null",
        "actor_rollout_ref.actor.profile_ranks=[0,1]", "actor_rollout_ref.rollout.profile_ranks=[]",
        "critic.enable=false", "reward_model.enable=false",
        "+demo.on_worker_death=continue",
        "+demo.faults=[{group:actor_rollout_ref,rank:1,phase:compute_log_prob,step:1,"
        "action:kill}]"])
    assert len(result["history"]) == 2  # training went on after the death
    manifest = result["manifest"]
    status = harness.by_status(manifest)
    ok = {(e["rank"], tuple(e["steps"])) for e in status["ok"]}
    missing = {(e["rank"], tuple(e["steps"])): e["reason"] for e in status["missing"]}
    assert ok == {(0, (1,)), (0, (2,))}
    assert set(missing) == {(1, (2,))}
    died = missing[(1, (2,))]
    assert died.startswith("worker process died (ActorDiedError") and "\n" not in died, died
    # nsys wrote what it had captured when the app died: placed, marked incomplete, and it
    # opens with nsys export; nothing is left in .raw
    [cut] = status["incomplete"]
    assert (cut["rank"], tuple(cut["steps"]), cut["reason"]) == (1, (1,), (
        f"{died} in this window; the report holds what was captured until then"))
    assert harness.check_reports(out, manifest["reports"]) == 2
    assert harness.check_reports(out, [dict(cut, status="ok")]) == 1
    assert not harness.raw_leftovers(out)
    assert result["failed_ranks"] == [["actor_rollout_ref", 1, died]]
    named = [w for w in manifest["warnings"] if w.startswith("actor_rollout_ref rank 1: ")]
    assert named and all("\n" not in w for w in named)
    assert not [w for w in manifest["warnings"] if w.startswith("actor_rollout_ref rank 0")]
    harness.assert_no_leftovers()


def test_rank_killed_with_raise_policy_stops_training_naming_rank(ray_cluster, tmp_path):
    """``on_rank_failure="raise"``: the step that saw the death raises a one-line
    ProfilingRuntimeError naming the rank, after every other window was stopped; finalize
    still collects everything that exists."""
    plan = light.make_plan(str(tmp_path), [
        "trainer.total_training_steps=2", "trainer.profile_steps=[1,2]",
        "trainer.controller_nsight_options=null",
        "actor_rollout_ref.actor.profile_ranks=[0,1]", "actor_rollout_ref.rollout.profile_ranks=[]",
        "critic.enable=false", "reward_model.enable=false"])
    controller = light.controller_for(plan, on_rank_failure="raise")
    actors = light.start_group(plan)
    controller.register_group("actor_rollout_ref", actors)
    harness.COUNTS["light_runs"] += 1
    try:
        with pytest.raises(ProfilingRuntimeError) as info, controller.step(1):
            actors[1].die.remote()
            light.step_work(actors[:1])  # rank 0 keeps training inside the open window
            import ray

            ray.wait([actors[1].ready.remote()], timeout=30)  # until the death is known
        err = info.value
        assert (err.group, err.rank) == ("actor_rollout_ref", 1)
        assert str(err).startswith("actor_rollout_ref rank 1: verlprof_stop failed: worker "
                                   "process died")
        assert "\n" not in str(err)
        assert controller.failed_ranks.keys() == {("actor_rollout_ref", 1)}
        assert light.statuses(actors[:1])[0].open_window is None  # rank 0 not capturing
        manifest = controller.finalize().to_dict()
    finally:
        light.shutdown(controller, actors)
    status = harness.by_status(manifest)
    assert [(e["rank"], tuple(e["steps"])) for e in status["ok"]] == [(0, (1,))]
    reasons = {(e["rank"], tuple(e["steps"])): e["reason"] for e in status["missing"]}
    assert reasons[(0, (2,))].startswith("window never opened")
    assert reasons[(1, (2,))].startswith("worker process died")
    [cut] = status["incomplete"]  # what nsys captured of step 1 until the death
    assert (cut["rank"], tuple(cut["steps"])) == (1, (1,)) and \
        cut["reason"].startswith("worker process died"), cut
    assert harness.check_reports(str(tmp_path), manifest["reports"]) == 1
