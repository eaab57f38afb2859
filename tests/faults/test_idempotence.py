"""Fault 7: idempotence. Double start, stop without start, start after the last step, a step
that goes backwards (a retry, a checkpoint resume), finalize twice, steps after finalize:
defined behaviour, each a no-op or "at most once", never a second capture of a window.

The rule: a planned window opens at most once per controller (and per worker process);
a step outside the open window closes it first; steps after the last window, and any step
after :meth:`finalize`, do nothing."""

from __future__ import annotations

import pytest
import ray

from tests.faults import harness, light
from tests.integration.runtime_helpers import nvtx_names

pytestmark = pytest.mark.integration


def test_repeated_backwards_and_late_steps_real_nsys(ray_cluster, tmp_path):
    out = str(tmp_path)
    plan = light.make_plan(out, [
        "trainer.total_training_steps=9", "trainer.profile_steps=[2,3]",
        "trainer.controller_nsight_options=null", "trainer.n_gpus_per_node=1",
        "actor_rollout_ref.actor.profile_ranks=[0]", "actor_rollout_ref.rollout.profile_ranks=[]",
        "critic.enable=false", "reward_model.enable=false"])
    controller = light.controller_for(plan)
    actors = light.start_group(plan)
    controller.register_group("actor_rollout_ref", actors)
    harness.COUNTS["light_runs"] += 1
    worker = actors[0]

    def opened():
        return light.statuses(actors)[0].opened

    def run(step):
        with controller.step(step):
            light.step_work(actors)

    try:
        controller.stop_all()  # stop without start: nothing happens
        assert ray.get(worker.verlprof_stop.remote()).outcome == "not-started"
        run(1)  # not planned
        assert opened() == 0
        with controller.step(2):
            light.step_work(actors)
            assert ray.get(worker.verlprof_start.remote((2,))) == "already-started"
        assert opened() == 1 and light.statuses(actors)[0].open_window is None
        run(2)  # the same step again (a retry): not recaptured
        assert ray.get(worker.verlprof_start.remote((2,))) == "not-planned"
        run(3)
        run(2)  # a checkpoint resume: backwards
        run(3)
        run(9)  # after the last window
        assert opened() == 2
        assert ray.get(worker.verlprof_stop.remote((3,))).outcome == "not-started"
        first = controller.finalize()
        assert controller.finalize() is first  # twice: the same manifest
        run(3)  # after finalize: nothing (no RPC at all)
        assert ray.get(worker.verlprof_start.remote((3,))) == "finalized"
        assert light.statuses(actors)[0].opened == 2
    finally:
        light.shutdown(controller, actors)
    manifest = first.to_dict()
    assert [(tuple(e["steps"]), e["status"]) for e in manifest["reports"]] == [
        ((2,), "ok"), ((3,), "ok")]
    assert harness.check_reports(out, manifest["reports"]) == 2
    for entry in manifest["reports"]:  # each report holds its step exactly once
        names = nvtx_names(f"{out}/{entry['path']}")
        assert names == {"rollout/generate_sequences": 1, "actor/update_actor": 1}, names


def test_jumps_and_backward_steps_open_exactly_the_window_meant(ray_cluster, tmp_path):
    """Consecutive windows are started without an argument (the worker opens its next one),
    a jump or a step backwards names its window: each step captures its own window."""
    out = str(tmp_path)
    plan = light.make_plan(out, [
        "trainer.profiler.tool=torch", "trainer.total_training_steps=9",
        "trainer.profile_steps=[2,3,5,6]", "trainer.n_gpus_per_node=2",
        "actor_rollout_ref.actor.profile_ranks_all=true",
        "actor_rollout_ref.rollout.profile_ranks=[]", "critic.enable=false",
        "reward_model.enable=false"])
    controller = light.controller_for(plan)
    actors = light.start_group(plan)
    controller.register_group("actor_rollout_ref", actors)
    seen = []
    try:
        for step in (1, 2, 5, 3, 4, 6, 5, 2):
            with controller.step(step):
                light.step_work(actors)
                seen.append((step, [s.open_window and s.open_window.split("/")[0]
                                    for s in light.statuses(actors)]))
        manifest = controller.finalize()
    finally:
        light.shutdown(controller, actors)
    assert seen == [(1, [None, None]), (2, ["step0002"] * 2), (5, ["step0005"] * 2),
                    (3, ["step0003"] * 2), (4, [None, None]), (6, ["step0006"] * 2),
                    (5, [None, None]), (2, [None, None])]
    assert sorted((e["rank"], tuple(e["steps"]), e["status"]) for e in
                  manifest.to_dict()["reports"]) == [
        (rank, (step,), "ok") for rank in (0, 1) for step in (2, 3, 5, 6)]
