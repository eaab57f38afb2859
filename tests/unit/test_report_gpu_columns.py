"""The GPU columns of the report carry the real totals (issue 30): ``kernel ms`` and
``kernels`` of the console and summary.md step tables (median across ranks), and
``kernel_ms``, ``kernel_count``, ``memcpy_ms`` of summary.csv (per rank).

Three ranks read synthetic ``nsys export`` files of 20k, 40k and 60k kernels
(benchmarks/p4_gpu.py: every row from a closed formula, two steps, the same phases on two
threads plus one nested phase). The expected values come from ``p4_gpu.reference`` (numpy over
the formulas, no SQL, no verlprof) and Python's own median: a column replaced by a constant, a
mean, another rank's value or the memcpy total fails here. The pictures draw phase bars only
(no GPU value); they are checked pixel by pixel on this GPU run as well.
"""

from __future__ import annotations

import csv
import io
import os
import statistics
from typing import Dict, List, Tuple

import pytest
from rich.console import Console

from benchmarks import p4_gpu
from tests.png_content import check_steps_png, check_timeline_png
from verlprof.manifest import Manifest, ReportEntry, write_manifest
from verlprof.report import summarize
from verlprof.report.matrix import step_tables
from verlprof.report.timeline import build_timeline

KERNELS_BY_RANK = (20_000, 40_000, 60_000)
GROUP = "actor_rollout_ref"

Key = Tuple[int, str, int]
"""(step, "role/phase", rank)"""


def expected() -> Dict[Key, Tuple[int, int, int]]:
    """(kernel ns, kernel count, memcpy ns) per step, phase and rank, from the formulas: the
    reference lists each phase's ranges in ``p4_gpu.phases`` order (per step: T1 then T2 for
    the four phases, one range of the nested phase); a row sums a step's ranges of a phase."""
    out: Dict[Key, Tuple[int, int, int]] = {}
    for rank, n in enumerate(KERNELS_BY_RANK):
        for name, ranges in p4_gpu.reference(n).items():
            per_step = len(ranges) // 2
            for step in (1, 2):
                mine = ranges[(step - 1) * per_step: step * per_step]
                out[(step, name, rank)] = (sum(k for k, _, _ in mine),
                                           sum(c for _, c, _ in mine),
                                           sum(m for _, _, m in mine))
    return out


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory):
    """The report of three ranks, each one nsys report whose export is cached beside it."""
    out = str(tmp_path_factory.mktemp("gpu_run"))
    entries = []
    for rank, n in enumerate(KERNELS_BY_RANK):
        rel = f"step0001-0002/{GROUP}/rank{rank}/{GROUP}_rank{rank}.nsys-rep"
        os.makedirs(os.path.join(out, os.path.dirname(rel)))
        with open(os.path.join(out, rel), "wb") as handle:
            handle.write(b"x")
        # written after the report: the export is up to date, the reader takes it as is
        p4_gpu.build(os.path.join(out, rel[:-len(".nsys-rep")] + ".sqlite"), n)
        entries.append(ReportEntry(steps=(1, 2), group=GROUP, rank=rank, component=GROUP,
                                   backend="nsys", path=rel, status="ok"))
    write_manifest(Manifest(tool="nsys", output_dir=out, step_windows=((1, 2),),
                            reports=tuple(entries)), out)
    console = Console(file=io.StringIO(), width=200)
    summary = summarize(out, console=console, jobs=1)
    return summary, console.file.getvalue()


def _ms(ns: float, digits: int) -> str:
    return f"{ns / 1e6:.{digits}f}"


def _medians(step: int, name: str) -> Tuple[str, str]:
    """The step table's (kernel ms, kernels) cells: medians across the ranks."""
    want = expected()
    kernel = statistics.median(want[(step, name, r)][0] for r in range(len(KERNELS_BY_RANK)))
    count = statistics.median(want[(step, name, r)][1] for r in range(len(KERNELS_BY_RANK)))
    return _ms(kernel, 1), str(int(count))


def _table_rows(text: str, bar: str) -> Dict[int, Dict[str, List[str]]]:
    """Per step, the cells of each phase row of the step tables in ``text`` (console or
    Markdown), keyed by the phase label."""
    out: Dict[int, Dict[str, List[str]]] = {}
    step = 0
    for line in text.splitlines():
        words = line.replace("#", "").split()
        if words[:1] == ["step"] and words[1].rstrip(":").isdigit():
            step = int(words[1].rstrip(":"))
            continue
        cells = [c.strip() for c in line.strip().strip(bar).split(bar)]
        if step and len(cells) > 2 and "/" in cells[1]:
            out.setdefault(step, {})[cells[1]] = cells
    return out


def test_the_reader_gives_the_reference_totals(gpu_run):
    summary, _ = gpu_run
    got = {(r.step, f"{r.role}/{r.phase}", r.rank): (r.kernel_ns, r.kernel_count, r.memcpy_ns)
           for r in summary.rows}
    assert got == expected()
    assert len({v for v in got.values()}) > len(got) // 2  # the values differ: no constant


def test_console_step_tables_show_the_median_kernel_time_and_count(gpu_run):
    summary, text = gpu_run
    tables = _table_rows(text, "│")
    names = {name for _, name, _ in expected()}
    assert set(tables) == {1, 2} and all(set(t) == names for t in tables.values())
    for step, rows in tables.items():
        for name, cells in rows.items():
            assert cells[-2:] == list(_medians(step, name)), (step, name, cells)
    # many ranks or a narrow terminal: the distribution columns, the same GPU cells at the end
    for table in step_tables(summary.rows, summary.spreads, summary.stragglers, summary.steps,
                             per_rank=False):
        assert table.header[-3:] == ("slowest", "kernel ms", "kernels")
        assert {row[1].text: [c.text for c in row[-2:]] for row in table.rows} == \
            {name: list(_medians(table.step, name)) for name in names}


def test_summary_md_step_tables_show_the_median_kernel_time_and_count(gpu_run):
    summary, _ = gpu_run
    with open(summary.paths["summary.md"], encoding="utf-8") as handle:
        md = handle.read()
    per_step = md[md.index("### step 1"):]
    tables = _table_rows(per_step, "|")
    assert set(tables) == {1, 2}
    header = next(line for line in per_step.splitlines() if line.startswith("| group"))
    assert header.endswith("| kernel ms | kernels |")
    for step, rows in tables.items():
        assert {name: cells[-2:] for name, cells in rows.items()} == \
            {name: list(_medians(step, name)) for name in rows}
        assert len(rows) == 5


def test_summary_csv_has_each_ranks_kernel_and_memcpy_totals(gpu_run):
    summary, _ = gpu_run
    with open(summary.paths["summary.csv"], encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    got = {(int(r["step"]), f"{r['role']}/{r['phase']}", int(r["rank"])):
           (r["kernel_ms"], r["kernel_count"], r["memcpy_ms"]) for r in rows}
    assert got == {key: (_ms(k, 3), str(c), _ms(m, 3)) for key, (k, c, m) in expected().items()}


def test_pictures_of_a_gpu_run_show_every_phase_bar(gpu_run):
    summary, _ = gpu_run
    data = build_timeline(summary.records, summary.steps, summary.windows, summary.stragglers,
                          summary.t0_ns)
    checked = check_timeline_png(summary.paths["timeline.png"], data)
    assert checked["lane"] == len(KERNELS_BY_RANK) and checked["bar"] > 0
    assert check_steps_png(summary.paths["timeline_steps.png"], summary.spreads,
                           summary.stragglers, data.colours) == 2 * 5
