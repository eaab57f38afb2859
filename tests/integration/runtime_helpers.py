"""Running the demo trainer on a live Ray cluster and checking its reports against the plan."""

from __future__ import annotations

import collections
import os
from typing import Dict, List, Sequence, Tuple

from verlprof import paths
from verlprof.demo.run import plan_demo, run_trainer
from verlprof.plan import ProfilePlan

CONFIG = os.path.join(os.path.dirname(__file__), "..", "..", "trainer_configs",
                      "ppo_trainer.yaml")

PHASES_OF_GROUP = {
    "actor_rollout_ref": ["rollout/generate_sequences", "actor/compute_log_prob",
                          "ref/compute_ref_log_prob", "actor/update_actor"],
    "critic": ["critic/compute_values", "critic/update_critic"],
    "rm": ["rm/compute_rm_score"],
}
"""Phases each group's process runs once per demo step."""


def run_case(output_dir: str, overrides: Sequence[str]) -> Tuple[ProfilePlan, dict]:
    """Plan and run the demo trainer (Ray must already be initialised). Its reports are not
    summarised in finalize unless ``overrides`` name ``trainer.profiler.summarise``: these tests
    do not read them, and the exports would be most of a run's time here
    (tests/integration/test_multinode.py runs the default, ``at_end``)."""
    loaded, plan, _ = plan_demo(CONFIG, [f"trainer.profiler.output_dir={output_dir}",
                                         *without_summaries(overrides)])
    return plan, run_trainer(loaded, plan)


SUMMARISE_KEY = "trainer.profiler.summarise"


def without_summaries(overrides: Sequence[str]) -> List[str]:
    """``overrides`` with ``trainer.profiler.summarise=off`` unless they set it."""
    if any(o.lstrip("+").startswith(SUMMARISE_KEY + "=") for o in overrides):
        return list(overrides)
    return [*overrides, SUMMARISE_KEY + "=off"]


def files_on_disk(output_dir: str) -> List[str]:
    """Reports under output_dir (relative), excluding manifest, summary, caches and staging."""
    out = []
    for root, dirs, files in os.walk(output_dir):
        dirs[:] = [d for d in dirs if d not in (paths.RAW_DIR, paths.SUMMARY_DIR)]
        for name in files:
            if name.endswith((".nsys-rep", ".pt.trace.json.gz")):
                out.append(os.path.relpath(os.path.join(root, name), output_dir))
    return sorted(out)


def planned_files(plan: ProfilePlan, manifest: dict) -> List[str]:
    """The plan's worker reports with each process's host and pid filled in."""
    who = {(p["group"], p["rank"]): p for p in manifest["processes"]}
    return sorted(paths.resolve_relpath(r.path, who[(r.group, r.rank)]["host"],
                                        who[(r.group, r.rank)]["pid"]) for r in plan.reports)


def nvtx_names(report: str) -> Dict[str, int]:
    """Ranges in domain verlprof, by name, read straight from the sqlite export."""
    import sqlite3

    from verlprof.backends.nsys.cli import export_sqlite
    from verlprof.backends.nsys.nvtx import CAPTURE_RANGE

    db = sqlite3.connect(str(export_sqlite(report, timeout_s=120)))
    try:
        domain_ids = [row[0] for row in db.execute(
            "SELECT domainId FROM NVTX_EVENTS WHERE eventType = 75 AND text = 'verlprof'")]
        rows = db.execute(
            "SELECT coalesce(e.text, s.value) FROM NVTX_EVENTS e LEFT JOIN StringIds s "
            "ON e.textId = s.id WHERE e.eventType IN (59, 60) AND e.end IS NOT NULL "
            f"AND e.domainId IN ({','.join('?' * len(domain_ids))})", domain_ids).fetchall()
    finally:
        db.close()
    return dict(collections.Counter(r[0] for r in rows if r[0] != CAPTURE_RANGE))


def processes_by_target(result: dict) -> Dict[Tuple[str, int], dict]:
    return {(p["group"], p["rank"]): p for p in result["processes"]}
