"""Summary outputs on synthetic data: the 8 ranks × 7 phases × 3 steps picture, CSV, Markdown,
HTML, the facade on a torch-only directory, and the CLI's exit codes."""

from __future__ import annotations

import csv
import gzip
import io
import json
import os

import pytest
from rich.console import Console

from benchmarks.report_scale import MS, T0, synthetic_load
from tests.helpers import report_main, require_node
from tests.png_content import check_steps_png, check_timeline_png
from verlprof.manifest import Manifest, ReportEntry, write_manifest
from verlprof.report import summarize
from verlprof.report.model import Problem
from verlprof.report.summary import analyse, write_outputs
from verlprof.report.timeline import build_timeline

# (group, role, phase, ms) in the order a PPO step runs them
PPO = (("actor_rollout_ref", "rollout", "generate_sequences", 300),
       ("actor_rollout_ref", "actor", "compute_log_prob", 80),
       ("actor_rollout_ref", "ref", "compute_ref_log_prob", 70),
       ("critic", "critic", "compute_values", 60),
       ("rm", "rm", "compute_rm_score", 50),
       ("critic", "critic", "update_critic", 150),
       ("actor_rollout_ref", "actor", "update_actor", 200))


def _read(path, mode="r"):
    with open(path, mode) as handle:
        return handle.read()


def synthetic(ranks=8, steps=3, straggler=(2, "critic", 5, "update_critic")):
    def duration(step, group, rank, phase, ms):
        return 3 * ms * MS if (step, group, rank, phase) == straggler else (ms + 3 * rank) * MS

    return synthetic_load(PPO, ranks, steps, duration, controller_extra_ms=40, gap_ms=8,
                          step_gap_ms=400, ranks_per_node=4,
                          problems=(Problem("missing", (3,), "rm", 7, "rm", "step0003/rm/rank7/r",
                                            "process died"),))


def fake_manifest(out):
    return Manifest(tool="nsys", output_dir=str(out), step_windows=((1,), (2,), (3,)),
                    reports=())


def test_big_picture_and_files(tmp_path):
    summary = analyse(str(tmp_path), fake_manifest(tmp_path), synthetic())
    assert [(s.step, s.group, s.phase, s.rank) for s in summary.stragglers] == \
        [(2, "critic", "update_critic", 5)]
    written = write_outputs(summary)
    png = _read(written["timeline.png"], "rb")
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert width >= 1500 and height >= 900  # 25 lanes: the figure grows with the lanes
    # what it shows: every lane labelled, every bar in its lane, colour and x range, the
    # straggler outlined (tests/png_content.py)
    data = build_timeline(summary.records, summary.steps, summary.windows, summary.stragglers,
                          summary.t0_ns)
    assert len(data.lanes) == 25 and not data.bands  # 8 ranks: one lane each, no band
    checked = check_timeline_png(written["timeline.png"], data)
    assert checked["lane"] == 25 and checked["outline"] == 4 and checked["bar"] > 5000
    assert check_steps_png(written["timeline_steps.png"], summary.spreads, summary.stragglers,
                           data.colours) == 3 * (7 + 7)
    html = _read(written["timeline.html"])
    assert html.count("critic r") >= 8 and "compute_rm_score" in html and "</script>" in html
    with open(written["summary.csv"]) as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 3 * (7 + 7 * 8)
    flagged = [(r["step"], r["group"], r["rank"], r["phase"]) for r in rows
               if r["straggler"] == "1"]
    assert flagged == [("2", "critic", "5", "update_critic")]
    first = rows[0]
    assert first["group"] == "controller" and first["start_s"] == "0.000000"
    md = _read(written["summary.md"])
    assert md.count("### step ") == 3 and "| 2 | critic | critic/update_critic | 5 | node1 |" in md
    assert "| missing | 3 | rm | 7 |" in md and "process died" in md
    assert "**450.0!**" in md


def test_small_picture_is_small(tmp_path):
    summary = analyse(str(tmp_path), fake_manifest(tmp_path), synthetic(ranks=1, steps=1))
    from verlprof.report.timeline import build_timeline
    from verlprof.report.timeline_png import write_png

    data = build_timeline(summary.records, summary.steps, summary.windows, [], summary.t0_ns)
    assert data.lanes == ("controller", "actor_rollout_ref r0", "critic r0", "rm r0")
    png = _read(write_png(data, str(tmp_path / "t.png")), "rb")
    assert 300 <= int.from_bytes(png[20:24], "big") <= 500


def _trace(path, base, phases):
    events = [{"ph": "X", "cat": "user_annotation", "name": n, "pid": 1, "tid": 1,
               "ts": s, "dur": d} for n, s, d in phases]
    with gzip.open(path, "wt") as handle:
        json.dump({"baseTimeNanoseconds": base, "traceEvents": events}, handle)


def test_summarize_torch_dir_with_missing_and_corrupt(tmp_path):
    entries = []
    for rank, slow in ((0, 100.0), (1, 100.0), (2, 900.0), (3, 110.0)):
        rel = f"step0001/actor_rollout_ref/rank{rank}/r{rank}.pt.trace.json.gz"
        os.makedirs(tmp_path / os.path.dirname(rel))
        _trace(tmp_path / rel, T0, [("actor/update_actor", 0.0, slow * 1000),
                                    ("rollout/generate_sequences", 200_000.0, 50_000.0)])
        entries.append(ReportEntry(steps=(1,), group="actor_rollout_ref", rank=rank,
                                   component="actor_rollout_ref", backend="torch", path=rel,
                                   status="incomplete" if rank == 3 else "ok",
                                   reason="window still open at shutdown" if rank == 3
                                   else None))
    (tmp_path / "corrupt.pt.trace.json.gz").write_bytes(b"\x1f\x8b garbage")
    entries.append(ReportEntry(steps=(1,), group="critic", rank=0, component="critic",
                               backend="torch", path="corrupt.pt.trace.json.gz", status="ok"))
    entries.append(ReportEntry(steps=(1,), group="critic", rank=1, component="critic",
                               backend="torch", path="nothere.pt.trace.json.gz",
                               status="missing", reason="worker crashed"))
    entries.append(ReportEntry(steps=(1,), group="rm", rank=0, component="rm",
                               backend="rocprof_sys", path="rm.rocprof-sys", status="ok"))
    write_manifest(Manifest(tool="torch", output_dir=str(tmp_path), step_windows=((1,),),
                            reports=tuple(entries)), str(tmp_path))
    console = Console(file=io.StringIO(), width=120)
    summary = summarize(str(tmp_path), console=console, picture=False)
    assert [(s.rank, s.phase) for s in summary.stragglers] == [(2, "update_actor")]
    assert len(summary.rows) == 8  # the incomplete but readable report is summarised too
    assert {(p.kind, p.group, p.rank) for p in summary.missing} == {
        ("unreadable", "critic", 0), ("missing", "critic", 1), ("skipped", "rm", 0),
        ("incomplete", "actor_rollout_ref", 3)}
    assert set(summary.paths) == {"summary.csv", "summary.md"}
    text = console.file.getvalue()
    assert "900.0!" in text and "worker crashed" in text and "rocprof_sys" in text


def test_nothing_readable_still_writes_everything(tmp_path):
    entry = ReportEntry(steps=(1,), group="critic", rank=0, component="critic", backend="nsys",
                        path="x.nsys-rep", status="missing", reason="never started")
    write_manifest(Manifest(tool="nsys", output_dir=str(tmp_path), step_windows=((1,),),
                            reports=(entry,)), str(tmp_path))
    summary = summarize(str(tmp_path), console=Console(file=io.StringIO()))
    assert not summary.records and len(summary.missing) == 1
    assert set(summary.paths) == {"summary.csv", "summary.md", "timeline.png", "timeline.html",
                                  "timeline_steps.png"}
    assert all(os.path.getsize(p) > 0 for p in summary.paths.values())


def test_summarize_rejects_bad_settings_and_dirs(tmp_path):
    with pytest.raises(ValueError, match="no manifest"):
        summarize(str(tmp_path), console=Console(file=io.StringIO()))
    with pytest.raises(ValueError, match="threshold"):
        summarize(str(tmp_path), threshold=0)
    with pytest.raises(ValueError, match="nope: no such directory"):
        summarize(str(tmp_path / "nope"))
    (tmp_path / "afile").write_text("")
    with pytest.raises(ValueError, match="afile: not a directory"):
        summarize(str(tmp_path / "afile"))


def test_cli_exit_codes(tmp_path, capsys):
    assert report_main([str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such directory" in err
    (tmp_path / "manifest.json").write_text("{broken")
    assert report_main([str(tmp_path)]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    write_manifest(Manifest(tool="nsys", output_dir=str(tmp_path), step_windows=(),
                            reports=()), str(tmp_path))
    assert report_main([str(tmp_path), "--no-picture", "--jobs", "1"]) == 0
    assert "summary.md" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        report_main([str(tmp_path), "--threshold", "-1"])
    assert exit_info.value.code == 2


NODE_DOM_STUB = r"""
const html = require("fs").readFileSync(process.argv[1], "utf8");
const script = html.split("<script>")[1].split("</script>")[0];
function mk(tag) {
  return {tag, attrs: {}, children: [], style: {}, textContent: "", value: "1",
    clientWidth: 1200, setAttribute(k, v) { this.attrs[k] = v; },
    appendChild(c) { this.children.push(c); }, addEventListener() {}};
}
const els = {};
global.document = {createElementNS: (ns, tag) => mk(tag), createElement: mk,
  createTextNode: text => ({text}),
  getElementById: id => els[id] || (els[id] = mk(id))};
global.window = {addEventListener() {}};
eval(script);
const kids = els.tl.children, bars = kids.filter(c => c.attrs.class === "bar");
console.log(JSON.stringify({bars: bars.length,
  windows: kids.filter(c => c.tag === "rect" && c.attrs.fill === "#dce6f2").length,
  zero: kids.filter(c => c.tag === "rect" && !(parseFloat(c.attrs.width) > 0)).length,
  stragglers: bars.filter(b => b.attrs.stroke === "#d00000").length,
  steps: kids.filter(c => c.tag === "text" && c.textContent.startsWith("step ")).length}));
"""


def test_html_script_draws_every_bar(tmp_path):
    """Run the page's JavaScript under node with a tiny DOM stub (tests/helpers.py's
    require_node: skipped without node, a failure under CI=true)."""
    import subprocess

    node = require_node()
    summary = analyse(str(tmp_path), fake_manifest(tmp_path), synthetic())
    from verlprof.report.timeline import build_timeline
    from verlprof.report.timeline_html import write_html

    data = build_timeline(summary.records, summary.steps, summary.windows, summary.stragglers,
                          summary.t0_ns)
    page = write_html(data, str(tmp_path / "t.html"))
    out = subprocess.run([node, "-e", NODE_DOM_STUB, page], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"bars": 3 * (7 + 7 * 8), "windows": 3 * 3 * 8, "zero": 0,
                                      "stragglers": 1, "steps": 3}


def test_an_unreadable_report_of_another_size_than_placed_says_so(tmp_path):
    """A report cut short or replaced after it was placed: its reason adds the two sizes
    beside the reader's own message; one of the placed size adds nothing."""
    for name, data in (("cut.nsys-rep", b"not a report"), ("same.nsys-rep", b"not either")):
        (tmp_path / name).write_bytes(data)
    entries = tuple(
        ReportEntry(steps=(1,), group="critic", rank=rank, component="critic", backend="nsys",
                    path=name, status="ok", bytes=placed)
        for rank, (name, placed) in enumerate((("cut.nsys-rep", 4096),
                                               ("same.nsys-rep", len(b"not either")))))
    write_manifest(Manifest(tool="nsys", output_dir=str(tmp_path), step_windows=((1,),),
                            reports=entries), str(tmp_path))
    summary = summarize(str(tmp_path), console=Console(file=io.StringIO()), write=False,
                        progress=False, jobs=1)
    reasons = {p.path: p.reason for p in summary.missing}
    assert {p.kind for p in summary.missing} == {"unreadable"}
    assert reasons["cut.nsys-rep"].endswith(
        " (the file holds 12 bytes where the manifest says 4,096: cut short or replaced "
        "since it was placed)")
    assert "manifest says" not in reasons["same.nsys-rep"]
