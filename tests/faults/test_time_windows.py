"""Time bounds inside a window, with real nsys and Ray (issue 13.3): a window opens
``window_delay_s`` into its step and closes after ``window_duration_s``, so the report of a
long step holds only that span; a step that ends before the delay captures nothing and says
so; the manifest records the bounds that took effect."""

from __future__ import annotations

import os

import pytest

from tests.faults import harness, light
from verlprof.backends.nsys.read import read_nsys_report

pytestmark = pytest.mark.integration

DELAY_S, DURATION_S, STEP_S = 0.3, 0.5, 2.0


def test_a_long_step_gives_a_report_bounded_in_time(ray_cluster, tmp_path):
    out = str(tmp_path)
    plan = light.make_plan(out, [
        "trainer.total_training_steps=2", "trainer.profile_steps=[1,2]",
        "trainer.controller_nsight_options=null", "trainer.n_gpus_per_node=1",
        "actor_rollout_ref.actor.profile_ranks=[0]", "actor_rollout_ref.rollout.profile_ranks=[]",
        "critic.enable=false", "reward_model.enable=false",
        f"trainer.profiler.window_delay_s={DELAY_S}",
        f"trainer.profiler.window_duration_s={DURATION_S}"])
    assert all(p.window_time.duration_s == DURATION_S for p in plan.processes)
    controller = light.controller_for(plan)
    actors = light.start_group(plan)
    controller.register_group("actor_rollout_ref", actors)
    harness.COUNTS["light_runs"] += 1
    try:
        with controller.step(1):  # 2 s of work: the window covers 0.3 s to 0.8 s of it
            light.step_work(actors, STEP_S / 2)
        with controller.step(2):  # over before the delay: nothing captured
            light.step_work(actors, 0.0)
        manifest = controller.finalize().to_dict()
    finally:
        light.shutdown(controller, actors)
    first, second = manifest["reports"]
    assert first["status"] == "ok", first
    span_s = (first["window_end_ns"] - first["window_start_ns"]) / 1e9
    assert DURATION_S <= span_s < STEP_S / 2, span_s  # the effective bounds, not the step's
    data = read_nsys_report(os.path.join(out, first["path"]))
    captured_s = (data.window[1] - data.window[0]) / 1e9  # the capture range in the report
    assert captured_s < STEP_S / 2, captured_s
    assert abs(data.window[0] - first["window_start_ns"]) < 0.2e9  # opened when recorded
    assert second["status"] == "missing"
    assert "before trainer.profiler.window_delay_s=0.3: nothing captured" in second["reason"]
    assert harness.check_reports(out, [first]) == 1
