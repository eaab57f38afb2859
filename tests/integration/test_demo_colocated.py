"""The demo trainer colocated as verl runs: a verl-layout config gives verl's resource pool
(actor, rollout and critic in one process per rank), and the demo fuses their worker classes
into one actor per rank, as verl's ``create_colocated_worker_cls`` does."""

from __future__ import annotations

import os

import pytest

from tests.integration.runtime_helpers import processes_by_target
from verlprof.demo.run import plan_demo, run_trainer

pytestmark = pytest.mark.integration

VERL_LAYOUT = os.path.join(os.path.dirname(__file__), "..", "..", "trainer_configs",
                           "verl_ppo_trainer.yaml")


def test_demo_runs_a_fused_pool_with_one_report_per_process(ray_cluster, tmp_path):
    loaded, plan, _ = plan_demo(VERL_LAYOUT, [
        "global_profiler.tool=torch", "trainer.total_training_steps=2",
        "global_profiler.steps=[2]", f"global_profiler.save_path={tmp_path}"])
    assert [(g.name, g.roles) for g in plan.groups] == [
        ("global_pool", ("actor", "rollout", "critic"))]
    result = run_trainer(loaded, plan)
    reports = [r for r in result["manifest"]["reports"] if r["group"] != "controller"]
    assert sorted((r["rank"], r["status"]) for r in reports) == [(0, "ok"), (1, "ok")]
    from rich.console import Console

    from verlprof.report import summarize

    summary = summarize(str(tmp_path), console=Console(quiet=True), picture=False)
    for rank in (0, 1):
        phases = {(r.role, r.phase) for r in summary.rows if r.rank == rank}
        # one process hosts both the actor's and the critic's phases
        assert {("actor", "update_actor"), ("critic", "update_critic")} <= phases
    assert set(processes_by_target(result)) == {("global_pool", 0), ("global_pool", 1)}
