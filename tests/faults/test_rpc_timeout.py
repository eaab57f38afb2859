"""Fault 3: a start/stop RPC that times out because the rank is stuck in a long phase.

The wait is bounded by ``rpc_timeout_s``; the error is one line naming the rank
(:class:`~verlprof.errors.ProfilingRuntimeError` with ``.group``/``.rank`` under
``on_rank_failure="raise"``, a warning otherwise); nothing deadlocks: the late rank runs its
queued start and stop in order once free, so it is never left capturing, and a rank that never
answers only costs ``finalize``'s own bound."""

from __future__ import annotations

import time

import pytest
import ray

from tests.faults import harness, light
from verlprof.errors import ProfilingRuntimeError

pytestmark = pytest.mark.integration

PLAN = ["trainer.total_training_steps=2", "trainer.profile_steps=[1,2]",
        "trainer.controller_nsight_options=null",
        "actor_rollout_ref.actor.profile_ranks=[0,1]", "actor_rollout_ref.rollout.profile_ranks=[]",
        "critic.enable=false", "reward_model.enable=false"]
TIMEOUT = 5.0
"""Above what a start or stop takes on a loaded 2-core machine (nsys blocks ~1 s in each)."""
LATE = (f"actor_rollout_ref rank 1: verlprof_start did not answer within {TIMEOUT:g}s "
        "(busy in a long call, or hung)")


def _setup(tmp_path, **kwargs):
    plan = light.make_plan(str(tmp_path / "out"), PLAN)
    controller = light.controller_for(plan, rpc_timeout_s=TIMEOUT, **kwargs)
    actors = light.start_group(plan)
    controller.register_group("actor_rollout_ref", actors)
    harness.COUNTS["light_runs"] += 1
    return controller, actors


def _stuck(actor, release, method="generate_sequences"):
    """``actor`` busy in a long phase until ``release`` exists (at most 120 s)."""
    ref = getattr(actor, method).remote(120.0, str(release))
    time.sleep(0.5)
    return ref


def test_start_times_out_raise_policy(ray_cluster, tmp_path):
    controller, actors = _setup(tmp_path, on_rank_failure="raise")
    release = tmp_path / "release"
    try:
        busy = _stuck(actors[1], release)
        started = time.monotonic()
        with pytest.raises(ProfilingRuntimeError) as info, controller.step(1):
            pytest.fail("the step ran although a rank did not start")
        elapsed = time.monotonic() - started
        err = info.value
        assert (err.group, err.rank) == ("actor_rollout_ref", 1)
        assert str(err) == LATE
        # bounded: the start wait, then the stop of the others (rank 1 not waited twice)
        assert elapsed < 2 * TIMEOUT + 5, elapsed
        release.touch()
        ray.get(busy)
        # once free, rank 1 ran its queued start and stop in order: not capturing
        assert [s.open_window for s in light.statuses(actors)] == [None, None]
        assert [s.opened for s in light.statuses(actors)] == [1, 1]
        manifest = controller.finalize().to_dict()
    finally:
        release.touch()
        light.shutdown(controller, actors)
    ok = sorted((e["rank"], tuple(e["steps"])) for e in harness.by_status(manifest)["ok"])
    assert ok == [(0, (1,)), (1, (1,))]
    harness.check_reports(str(tmp_path / "out"), manifest["reports"])


def test_stuck_rank_continue_policy_and_bounded_finalize(ray_cluster, tmp_path):
    controller, actors = _setup(tmp_path, finalize_timeout_s=2.0)
    release = tmp_path / "release"
    try:
        busy = _stuck(actors[1], release)
        started = time.monotonic()
        with controller.step(1):
            assert time.monotonic() - started < TIMEOUT + 5  # bounded; training goes on
            release.touch()
            light.step_work(actors)  # the trainer itself waits for rank 1 here
        ray.get(busy)
        with controller.step(2):
            light.step_work(actors)
        named = [w for w in controller.context.warnings if "did not answer" in w]
        assert named == [LATE]
        # now rank 1 hangs through the end of the run: finalize is bounded and names it
        release.unlink()
        _stuck(actors[1], release, "update_actor")
        started = time.monotonic()
        manifest = controller.finalize().to_dict()
        assert time.monotonic() - started < 2.0 + 5.2 + 10
    finally:
        release.touch()
        light.shutdown(controller, actors)
    status = harness.by_status(manifest)
    assert sorted((e["rank"], tuple(e["steps"])) for e in status["ok"]) == [(0, (1,)), (0, (2,))]
    reasons = {e["reason"] for e in status["missing"] if e["rank"] == 1}
    assert reasons == {"verlprof_finalize did not answer within 7.2s (busy in a long call, "
                       "or hung); 2 uncollected file(s) left in .raw/actor_rollout_ref/rank1"}
    assert harness.check_reports(str(tmp_path / "out"), manifest["reports"]) == 2
