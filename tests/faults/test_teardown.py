"""Fault 5, teardown: consecutive runs lose no report to the ``ray.shutdown()`` race (Ray
#60904: shutting Ray down while nsys still writes kills it mid-write and orphans its agent).

Each run is a job of its own on the session's Ray head, ended the way ``verlprof demo`` ends:
``run_trainer`` connects, runs the controller actor under nsys with one profiled worker under
nsys, finalises, lets the worker exit, waits for its profiler, lets the controller exit, waits
for its profiler, then calls ``ray.shutdown()``. The worker is the light one (the smallest real
configuration, see light.py); the demo trainer's own runs in the other fault modules end the
same way and are checked the same way."""

from __future__ import annotations

import os
import time

import pytest

from tests.faults import harness
from tests.faults.light import LightTaskRunner

pytestmark = pytest.mark.integration

RUNS = int(os.environ.get("VERLPROF_FAULTS_TEARDOWN_RUNS", "10"))  # more: set it (each ~10 s)


@pytest.mark.timeout(60 * RUNS)  # each run takes ~10 s on an idle 2-core machine
def test_consecutive_runs_lose_no_report(ray_head, tmp_path):
    import ray

    from verlprof.demo.run import plan_demo, run_trainer

    if ray.is_initialized():
        ray.shutdown()
    problems = []
    started = time.monotonic()
    for i in range(RUNS):
        out = str(tmp_path / f"run{i:02d}")
        loaded, plan, _ = plan_demo(harness.CONFIG, [f"trainer.profiler.output_dir={out}",
                                                      *harness.SMALLEST])
        assert plan.controller.launch_argv and len(plan.processes) == 1
        t0 = time.monotonic()
        result = run_trainer(loaded, plan, ray_address=ray_head.address,
                             runner_class=LightTaskRunner)
        t1 = time.monotonic()
        harness.COUNTS["light_runs"] += 1
        assert not ray.is_initialized()  # the run ended with ray.shutdown()
        on_disk = harness.read_manifest(out)
        statuses = [(e["group"], e["status"], e.get("reason")) for e in on_disk["reports"]]
        if [s for _, s, _ in statuses] != ["ok", "ok"]:
            problems.append(f"run {i}: {statuses}")
            continue
        assert [e["path"] for e in result["manifest"]["reports"]] == \
            [e["path"] for e in on_disk["reports"]]
        harness.check_reports(out, on_disk["reports"])
        if harness.raw_leftovers(out):
            problems.append(f"run {i}: left in .raw: {harness.raw_leftovers(out)}")
        # teardown already waited for every profiler: nothing of ours may still run
        agents = harness.wait_until_gone(harness.our_agents, 5.0)
        print(f"run {i}: {t1 - t0:.1f}s run, {time.monotonic() - t1:.1f}s checks")
        if agents:
            problems.append(f"run {i}: nsys agents still running after the run: {agents}")
    elapsed = time.monotonic() - started
    print(f"teardown: {RUNS} consecutive runs, {2 * RUNS} reports, {elapsed:.0f}s")
    assert not problems, "\n".join(problems)
    harness.COUNTS["teardown_runs"] += RUNS  # proven: reported in the summary
    harness.COUNTS["teardown_s"] += round(elapsed)
    harness.assert_no_leftovers()
