"""The report on reports produced by the runtime itself: a straggler planted in the demo is
flagged and nothing else; durations agree with the NVTX ranges read straight from the sqlite;
a truncated and a missing report are named precisely while the rest is summarised."""

from __future__ import annotations

import os
import shutil
import sqlite3

import pytest
from rich.console import Console

from tests.helpers import local_ray_cluster, require_nsys
from tests.integration.runtime_helpers import run_case
from tests.png_content import check_timeline_png
from verlprof.backends.nsys.cli import export_sqlite
from verlprof.report import summarize
from verlprof.report.timeline import build_timeline

pytestmark = pytest.mark.integration

PLANTED = "+demo.stragglers=[{group: critic, rank: 1, phase: update_critic, seconds: 0.6}]"


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    require_nsys()
    out = str(tmp_path_factory.mktemp("report_demo"))
    with local_ray_cluster(num_cpus=2):  # and no agent of the run left behind
        plan, result = run_case(out, [
            "trainer.total_training_steps=2", "trainer.profile_steps=[1,2]",
            "trainer.controller_nsight_options=null", "actor_rollout_ref.actor.profile_ranks=[0]",
            "actor_rollout_ref.rollout.profile_ranks=[]", "critic.profile_ranks_all=true",
            "reward_model.profile_ranks=[]", PLANTED])
    return out, result["manifest"]


def _sqlite_durations(report_path):
    """(phase name → [durations ns]) straight from the export, independent of verlprof.report."""
    db = sqlite3.connect(str(export_sqlite(report_path)))
    try:
        rows = db.execute(
            "SELECT coalesce(e.text, s.value), e.end - e.start FROM NVTX_EVENTS e LEFT JOIN "
            "StringIds s ON e.textId = s.id WHERE e.eventType IN (59, 60) AND e.end IS NOT NULL"
        ).fetchall()
    finally:
        db.close()
    out = {}
    for name, duration in rows:
        out.setdefault(name, []).append(duration)
    return out


def test_planted_straggler_is_flagged_and_nothing_else(demo_run):
    out, _ = demo_run
    summary = summarize(out, min_excess_ms=100, console=Console(quiet=True))
    flagged = {(s.step, s.group, s.rank, s.phase) for s in summary.stragglers}
    assert flagged == {(1, "critic", 1, "update_critic"), (2, "critic", 1, "update_critic")}
    assert not summary.missing
    assert os.path.getsize(summary.paths["timeline.png"]) > 10_000
    # the picture shows it: rank 1's update_critic bars outlined in red, every bar in its lane
    data = build_timeline(summary.records, summary.steps, summary.windows, summary.stragglers,
                          summary.t0_ns)
    outlined = {(b.lane, b.phase) for b in data.bars if b.straggler}
    assert outlined == {(data.lanes.index("critic r1"), "update_critic")}
    assert check_timeline_png(summary.paths["timeline.png"], data)["outline"] >= 2 * 4


def test_durations_agree_with_the_sqlite(demo_run):
    out, manifest = demo_run
    summary = summarize(out, console=Console(quiet=True), picture=False)
    checked = 0
    for entry in manifest["reports"]:
        if entry["group"] == "controller":
            continue
        direct = _sqlite_durations(os.path.join(out, entry["path"]))
        rows = [r for r in summary.rows if r.group == entry["group"] and r.rank == entry["rank"]
                and r.step == entry["steps"][0]]
        assert rows, entry["path"]
        for row in rows:
            assert [row.duration_ns] == direct[f"{row.role}/{row.phase}"], (entry["path"], row)
            checked += 1
    assert checked == 2 * (4 + 2 * 2)  # steps × (arr rank 0: 4 phases + critic 2 ranks × 2)


def test_truncated_and_missing_reports_are_named_and_the_rest_summarised(demo_run, tmp_path):
    src, manifest = demo_run
    out = str(tmp_path / "copy")
    shutil.copytree(src, out, ignore=shutil.ignore_patterns("*.sqlite", "summary"))
    workers = [e for e in manifest["reports"] if e["group"] != "controller"]
    truncated, deleted = workers[0]["path"], workers[1]["path"]
    with open(os.path.join(out, truncated), "r+b") as handle:
        handle.truncate(os.path.getsize(os.path.join(out, truncated)) // 3)
    os.remove(os.path.join(out, deleted))
    summary = summarize(out, console=Console(quiet=True), picture=False)
    problems = {p.path: p for p in summary.missing}
    assert set(problems) == {truncated, deleted}
    assert problems[truncated].kind == "unreadable"
    assert problems[deleted].kind == "missing" and "not there" in problems[deleted].reason
    summarised = {(r.group, r.rank, r.step) for r in summary.rows if r.group != "controller"}
    assert len(summarised) == len(workers) - 2
    with open(os.path.join(out, "summary", "summary.md")) as handle:
        text = handle.read()
    assert truncated in text and deleted in text


def test_the_whole_run_as_one_trace(demo_run):
    """``verlprof trace`` on the demo: one process track per profiled process, each with its
    phases in step order on the controller's clock, the clocks measured over Ray."""
    from tests.helpers import trace_main
    from tests.trace_reader import decode
    from verlprof.manifest import read_manifest

    out, _ = demo_run
    manifest = read_manifest(out)
    assert all(p.clock_error_ns is not None and p.clock_error_ns < 10**9
               for p in manifest.processes)
    assert trace_main([out]) == 0
    trace = decode(os.path.join(out, "summary", "trace.pftrace"))
    names = sorted(n.split(" (")[0] for n in trace.processes.values())
    assert names == ["actor_rollout_ref rank 0", "controller", "critic rank 0", "critic rank 1"]
    for process, name in trace.processes.items():
        if name.startswith("controller"):
            continue
        phases = [s.name for s in trace.slices_of_process(process) if "/" in s.name
                  and not s.name.startswith("step/")]
        steps = [s.name for s in trace.slices_of_process(process) if s.name.startswith("step/")]
        want = (["rollout/generate_sequences", "actor/compute_log_prob",
                 "ref/compute_ref_log_prob", "actor/update_actor"] if "actor" in name
                else ["critic/compute_values", "critic/update_critic"])
        assert phases == want * 2, (name, phases)
        assert steps in ([], ["step/1", "step/2"]), steps
    top = trace.track_named(None, "verlprof steps")
    assert [s.name for s in sorted(trace.slices[top], key=lambda s: s.start)] == \
        ["step 1", "step 2"]
