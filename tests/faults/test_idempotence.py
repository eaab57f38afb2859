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
from verlprof.records import ProcessIdentity, SessionStatus

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
        assert ray.get(worker.verlprof_stop.remote()) == "not-started"
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
        assert ray.get(worker.verlprof_stop.remote((3,))) == "not-started"
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


class _Recorder:
    """A stand-in worker for the controller's own bookkeeping: records the RPCs it gets."""

    def __init__(self, calls, rank, next_window=None):
        self.calls, self.rank, self.next_window = calls, rank, next_window

    def __getattr__(self, method):
        recorder = self

        class _Method:
            @staticmethod
            def remote(*args):
                recorder.calls.append((recorder.rank, method, *args))
                value = SessionStatus(
                    identity=ProcessIdentity(host="", pid=0), configured=True,
                    next=tuple(recorder.next_window) if recorder.next_window else None) \
                    if method == "verlprof_configure" else (
                    [] if method == "verlprof_finalize" else "ok")
                return ray.put(value)

        return _Method


def _controller(tmp_path, steps, continuous=False, next_window=None):
    plan = light.make_plan(str(tmp_path), [
        f"trainer.profile_steps={steps}",
        f"trainer.profile_continuous_steps={str(continuous).lower()}",
        "trainer.controller_nsight_options=null", "trainer.n_gpus_per_node=1",
        "actor_rollout_ref.actor.profile_ranks=[0]", "actor_rollout_ref.rollout.profile_ranks=[]",
        "critic.enable=false", "reward_model.enable=false", "trainer.profiler.tool=torch"])
    calls = []
    controller = light.controller_for(plan)
    controller.register_group("actor_rollout_ref", [_Recorder(calls, 0, next_window)])
    calls.clear()
    return controller, calls


def _rpcs(calls):
    return [(method, *args) for _, method, *args in calls]


def test_a_step_outside_the_open_window_closes_it(ray_cluster, tmp_path):
    """Continuous window [1-3]: a jump from step 1 to step 5 closes it first; resuming at
    step 2 (inside it) does not reopen it; a window opens only at its first step."""
    controller, calls = _controller(tmp_path, "[1,2,3,5]", continuous=True)
    with controller.step(1):
        pass
    assert _rpcs(calls) == [("verlprof_start", (1, 2, 3))]
    with controller.step(5):
        pass
    assert _rpcs(calls) == [("verlprof_start", (1, 2, 3)), ("verlprof_stop",),
                            ("verlprof_start",), ("verlprof_stop",)]  # (5,) follows (1, 2, 3)
    calls.clear()
    for step in (2, 3, 1, 5):  # backwards after a resume: nothing reopens
        with controller.step(step):
            pass
    assert calls == []


def test_consecutive_windows_are_started_without_an_argument(ray_cluster, tmp_path):
    """A worker whose next window is the one meant gets ``verlprof_start()`` (Ray serialises
    every argument: benchmarks/p2_fanout.py); after a jump the window is named."""
    controller, calls = _controller(tmp_path, "[1,2,5,6]", next_window=[1])
    for step in (1, 2, 3, 6, 5):
        with controller.step(step):
            pass
    assert _rpcs(calls) == [("verlprof_start",), ("verlprof_stop",), ("verlprof_start",),
                            ("verlprof_stop",), ("verlprof_start", (6,)), ("verlprof_stop",),
                            ("verlprof_start", (5,)), ("verlprof_stop",)]


def test_steps_going_backwards_inside_an_open_window(ray_cluster, tmp_path):
    controller, calls = _controller(tmp_path, "[1,2,3]", continuous=True)
    for step in (1, 2, 1, 2, 3):  # still inside [1-3]: the window stays open until step 3
        with controller.step(step):
            pass
    assert _rpcs(calls) == [("verlprof_start", (1, 2, 3)), ("verlprof_stop",)]


def test_exception_then_retry_of_the_same_step(ray_cluster, tmp_path):
    controller, calls = _controller(tmp_path, "[2]")
    with pytest.raises(ValueError), controller.step(2):
        raise ValueError("the step failed")
    with controller.step(2):  # the retry records nothing new
        pass
    assert _rpcs(calls) == [("verlprof_start", (2,)), ("verlprof_stop",)]
    controller.finalize()
    with controller.step(2):
        pass
    assert _rpcs(calls)[-1] == ("verlprof_finalize", 30.0)
