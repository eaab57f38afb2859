"""The report over many steps and many ranks, on synthetic inputs.

Many steps: reports written as torch traces and read by ``summarize`` (the real pipeline,
loader included); the console has one table across steps whose length does not grow with the
steps. Many ranks: 1,024 ranks x 8 components x 3 steps of records (as the loader would return
them from 24,576 reports) through ``analyse`` and every output; tables and picture show
distributions, the slowest ranks and the stragglers, and the pictures are checked pixel by
pixel (tests/png_content.py).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re

import pytest
from rich.console import Console

from benchmarks.report_scale import SLOW_NODE, SLOW_RANK, scale_load
from tests.helpers import require_node
from tests.png_content import check_steps_png, check_timeline_png
from verlprof.manifest import Manifest, ReportEntry, write_manifest
from verlprof.report import summarize
from verlprof.report.across_steps import across_table
from verlprof.report.console import print_summary
from verlprof.report.matrix import per_rank_fits, step_tables
from verlprof.report.summary import analyse, write_outputs
from verlprof.report.timeline import build_timeline

T0_NS = 1_790_000_000 * 10**9
PHASES = (("actor_rollout_ref", "rollout", "generate_sequences", 300),
          ("actor_rollout_ref", "actor", "update_actor", 200),
          ("critic", "critic", "update_critic", 150))
"""(group, role, phase, ms) of each synthetic step."""


def _trace(path, ranges):
    events = [{"ph": "X", "cat": "user_annotation", "name": n, "pid": 1, "tid": 1,
               "ts": s, "dur": d} for n, s, d in ranges]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with gzip.open(path, "wt") as handle:
        json.dump({"baseTimeNanoseconds": T0_NS, "traceEvents": events}, handle)


def many_steps(out, steps: int, ranks: int = 2, phases=PHASES):
    """A torch run of ``steps`` profiled steps (every second training step), ``ranks`` ranks
    per group, each running ``phases`` ((group, role, phase, ms), ...): critic rank 1
    straggles in every profiled step, actor rank 0 once (step 14)."""
    entries = []
    for n in range(steps):
        step = 2 * (n + 1)
        begin_us = n * 5_000_000  # 5 s between profiled steps: the phases are ~0.7 s
        for group in ("actor_rollout_ref", "critic"):
            for rank in range(ranks):
                ranges, t = [], begin_us
                for g, role, phase, ms in phases:
                    if g != group:
                        continue
                    dur = (ms + 2 * rank + n % 3) * 1000
                    if (group, rank) == ("critic", 1) or (step, phase, rank) == \
                            (14, "update_actor", 0):
                        dur *= 3
                    ranges.append((f"{role}/{phase}", float(t), float(dur)))
                    t += dur + 10_000
                rel = f"step{step:04d}/{group}/rank{rank}/r{rank}.pt.trace.json.gz"
                _trace(os.path.join(out, rel), ranges)
                entries.append(ReportEntry(steps=(step,), group=group, rank=rank,
                                           component=group, backend="torch", path=rel,
                                           status="ok", host=f"node{rank}"))
    write_manifest(Manifest(tool="torch", output_dir=str(out),
                            step_windows=tuple((e.steps[0],) for e in entries[::2 * ranks]),
                            reports=tuple(entries)), str(out))


def _console_of(out, **kw):
    console = Console(file=io.StringIO(), width=160)
    summary = summarize(str(out), console=console, jobs=1, **kw)
    text = console.file.getvalue()
    # the paths printed differ between the directories: everything else must not
    return summary, text.replace(str(out), "OUT")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = {}
    for steps in (20, 40):
        directory = tmp_path_factory.mktemp(f"steps{steps}")
        many_steps(directory, steps)
        out[steps] = (directory,) + _console_of(directory)
    return out


def test_console_over_many_steps_has_one_table_that_does_not_grow(runs):
    lines = {}
    for steps, (_, summary, text) in runs.items():
        assert len({r.step for r in summary.rows}) == steps
        assert text.count(f"across {steps} profiled steps") == 1
        assert "step 2:" not in text and "--per-step" in text  # no per-step tables
        # critic rank 1 straggles in every step: one line, not one per step
        assert f"critic critic/update_critic: rank 1 on node1 in {steps} step(s)" in text
        assert "actor_rollout_ref actor/update_actor: rank 0 on node0 in 1 step(s) (14)" in text
        lines[steps] = text.count("\n")
    assert lines[20] == lines[40]
    assert lines[40] < 45  # a per-step view of 40 steps is several hundred lines
    _, summary, text = runs[40]
    row = [line for line in text.splitlines() if "update_critic" in line and "│" in line][0]
    assert "40 in 40 steps" in row and "s" in row and "r1!" in row


def test_per_step_flag_adds_the_per_step_tables_and_summary_md_has_both(runs):
    directory, _, _ = runs[20]
    with open(os.path.join(directory, "summary", "summary.md")) as handle:
        md = handle.read()
    assert md.count("## Phases across steps") == 1 and md.count("### step ") == 20
    assert "![phases by step](timeline_steps.png)" in md
    _, text = _console_of(directory, picture=False, per_step=True)
    assert text.count("across 20 profiled steps") == 1
    assert sum(1 for line in text.splitlines() if line.startswith("step ")) == 20


def test_two_steps_read_as_before(tmp_path):
    many_steps(tmp_path, 2)
    _, text = _console_of(tmp_path, picture=False)
    assert "across" not in text and "step 2:" in text and "step 4:" in text
    assert "  step 2 critic critic/update_critic: rank 1 on node1" in text


def test_the_steps_picture_shows_each_phase_across_steps(runs):
    directory, summary, _ = runs[20]
    colours = build_timeline(summary.records, summary.steps, summary.windows,
                             summary.stragglers, summary.t0_ns).colours
    path = os.path.join(directory, "summary", "timeline_steps.png")
    assert summary.paths["timeline_steps.png"] == path
    assert check_steps_png(path, summary.spreads, summary.stragglers, colours) == 20 * 3
    assert len({(s.step, s.phase) for s in summary.stragglers}) == 20 + 1


@pytest.fixture(scope="module")
def scale(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("scale"))
    summary = analyse(out, Manifest(tool="nsys", output_dir=out, step_windows=(), reports=()),
                      scale_load(1024, 3))
    write_outputs(summary)
    return summary


def test_scale_stragglers_are_every_slow_rank(scale):
    flagged = {(s.step, s.group, s.rank) for s in scale.stragglers}
    slow_group, slow_ranks, slow_step, _ = SLOW_NODE
    expected = {(slow_step, slow_group, r) for r in slow_ranks} | \
        {(step, SLOW_RANK[0], SLOW_RANK[1]) for step in (1, 2, 3)}
    assert flagged == expected


def test_scale_tables_show_distributions_not_ranks(scale):
    assert not per_rank_fits(scale.rows)
    tables = step_tables(scale.rows, scale.spreads, scale.stragglers, scale.steps,
                         per_rank=False)
    assert len(tables) == 3
    header = tables[1].header
    assert header[2:] == ("ranks", "min", "median", "p95", "max", "stragglers", "slowest")
    cells = {line[1].text: [c.text for c in line] for line in tables[1].rows}
    critic = cells["critic/update_critic"]
    assert critic[2] == "1024" and critic[7] == "8"
    assert all(name.endswith("!") and int(name[1:-1]) in SLOW_NODE[1]
               for name in critic[8].split())
    assert cells["actor/update_actor"][8].startswith("r517! ")
    console = Console(file=io.StringIO(), width=150)
    print_summary(scale, console)
    text = console.file.getvalue()
    assert "r1023" not in text and "1024" in text and max(map(len, text.splitlines())) <= 150
    across = across_table(scale.rows, scale.stragglers)
    assert len(across.rows) == 8 + 8  # the controller's 8 phases and the 8 components


def test_scale_picture_has_bands_and_outlier_lanes(scale):
    data = build_timeline(scale.records, scale.steps, scale.windows, scale.stragglers,
                          scale.t0_ns)
    assert data.lanes[0] == "controller" and len(data.lanes) == 1 + 8 + 1 + 4
    assert "actor_train: 1024 ranks, 1 straggler" in data.lanes
    assert "actor_train r517" in data.lanes and "rollout: 1024 ranks" in data.lanes
    assert "critic_train: 1024 ranks, 8 stragglers" in data.lanes  # 4 of them get a lane
    outliers = [lane for lane in data.lanes if lane.startswith("critic_train r")]
    assert len(outliers) == 4 and all(int(x.split("r")[-1]) in SLOW_NODE[1] for x in outliers)
    assert len(data.bands) == 8 * 3 and len(data.bars) == 3 * (8 + 1 + 4)
    checked = check_timeline_png(scale.paths["timeline.png"], data)
    assert checked["lane"] == len(data.lanes) and checked["outline"] >= 4 * 4
    assert checked["bar"] > 1000
    band = next(b for b in data.bands if b.phase == "update_critic" and b.stragglers)
    assert band.stragglers == 8 and band.ranks == 1024


def test_scale_html_lists_bands_not_ranks(scale):
    with open(scale.paths["timeline.html"]) as handle:
        html = handle.read()
    assert '"bands":[[' in html and "critic_train r1023" not in html
    assert os.path.getsize(scale.paths["timeline.html"]) < 200_000


def test_scale_html_script_draws_bands_and_outliers(scale, tmp_path):
    """The page's JavaScript under node (tests/unit/test_report_outputs.py's DOM stub)."""
    import subprocess

    from tests.unit.test_report_outputs import NODE_DOM_STUB

    node = require_node()
    out = subprocess.run([node, "-e", NODE_DOM_STUB, scale.paths["timeline.html"]],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    drawn = json.loads(out.stdout)
    # 39 bars (controller, r517, 4 critic_train outliers) + 3 rects per band (8 x 3 steps)
    assert drawn["bars"] == 3 * (8 + 1 + 4) + 3 * 8 * 3
    assert drawn["stragglers"] == 3 + 4 and drawn["zero"] == 0 and drawn["steps"] == 3



NARROW_PHASES = (("actor_rollout_ref", "rollout", "generate_sequences", 300),
                 ("actor_rollout_ref", "actor", "compute_log_prob", 100),
                 ("actor_rollout_ref", "ref", "compute_ref_log_prob", 100),
                 ("critic", "critic", "compute_values", 100),
                 ("critic", "critic", "update_critic", 150),
                 ("actor_rollout_ref", "actor", "update_actor", 200))
"""Phases whose names share a prefix (``comp…`` would be four of them)."""


@pytest.mark.parametrize("width", [80, 100, 200])
def test_console_at_80_columns_keeps_every_phase_distinguishable(tmp_path, width):
    """The across-steps table needs ~130 columns. Narrower, each row's group and phase become
    a number and a legend names them whole (never ``comp…`` for compute_log_prob and
    compute_values alike) and no column is dropped; wider, the names stay in the table."""
    from verlprof.report.console import print_findings

    many_steps(tmp_path, 5, phases=NARROW_PHASES)
    summary = summarize(str(tmp_path), console=Console(quiet=True), jobs=1, picture=False)
    console = Console(file=io.StringIO(), width=width)
    print_findings(summary, console)
    text = console.file.getvalue()
    table = text.split("per step and rank")[0].splitlines()
    assert max(len(line) for line in table) <= width and "…" not in "".join(table)
    header = next(line for line in table if "median" in line)
    for column in ("steps", "median", "p5", "p95", "max", "first", "last", "slowest",
                   "stragglers"):
        assert re.search(rf"\b{column}\b", header), (column, header)
    wanted = [f"{role}/{phase}" for _, role, phase, _ in NARROW_PHASES
              if role not in ("critic",)] + ["compute_values", "update_critic"]
    for name in wanted:  # each phase whole, on exactly one line of the table or legend
        assert sum(1 for line in table if re.search(rf"(^|[ │]){re.escape(name)}( |$)",
                                                     line)) == 1, (name, text)
    assert "5 in 5 steps" in text  # the stragglers column, with critic rank 1's count
    if width >= 200:
        assert any("compute_values" in line and "│" in line for line in table)


def test_the_page_is_the_same_under_any_hash_seed(tmp_path):
    """Band lanes came from sets of group names: the page's window list followed Python's hash
    seed, so two reports of one run differed. Two interpreters with other seeds, one page."""
    import subprocess
    import sys

    script = ("import sys\n"
              "from benchmarks.report_scale import scale_load\n"
              "from verlprof.manifest import Manifest\n"
              "from verlprof.report.summary import analyse, write_outputs\n"
              "out = sys.argv[1]\n"
              "summary = analyse(out, Manifest(tool='nsys', output_dir=out, step_windows=(),"
              " reports=()), scale_load(40, 2))\n"
              "write_outputs(summary)\n"
              "print(summary.paths['timeline.html'])\n")
    import shutil

    pages, out = [], tmp_path / "run"  # the page's title names the directory
    for seed in ("1", "2", "3"):
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        done = subprocess.run([sys.executable, "-c", script, str(out)], capture_output=True,
                              text=True, env={**os.environ, "PYTHONHASHSEED": seed},
                              cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                                  os.path.abspath(__file__)))), check=True)
        with open(done.stdout.strip().splitlines()[-1]) as handle:
            pages.append(handle.read())
    assert '"bands":[[' in pages[0] and pages[0] == pages[1] == pages[2]
