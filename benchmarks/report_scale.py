"""The report at scale: summarise and render 1,024 ranks x 8 components x 3 steps.

The records are generated directly (as ``verlprof report``'s loader would return them after
reading 24,576 reports), so this times only what comes after reading: the analyses
(:func:`~verlprof.report.summary.analyse`), the console, summary.csv / summary.md and the
pictures. The ratio is the cost at 1,024 ranks over the cost at 128, measured interleaved in
the same run: linear growth is 8x.

The generator is also what the unit tests of the large report use
(tests/unit/test_report_scale.py), so the picture in docs/images is the one tested.
"""

from __future__ import annotations

import io
import os
import tempfile
import time
from typing import Any, Callable, List, Sequence, Tuple

from benchmarks.common import Result, median, ratios

MS = 1_000_000
T0 = 1_790_000_000 * 10**9
COMPONENTS: Tuple[Tuple[str, str, str, int], ...] = (
    ("rollout", "rollout", "generate_sequences", 900),
    ("actor", "actor", "compute_log_prob", 120),
    ("ref", "ref", "compute_ref_log_prob", 110),
    ("critic", "critic", "compute_values", 100),
    ("rm", "rm", "compute_rm_score", 80),
    ("reward", "reward", "compute_reward", 60),
    ("critic_train", "critic", "update_critic", 250),
    ("actor_train", "actor", "update_actor", 400),
)
"""8 components (group, role, phase, ms), one phase each, in the order a step runs them."""
SLOW_NODE = ("critic_train", range(8, 16), 2, 2.5)
"""(group, ranks, step, factor): one slow node's 8 ranks in one step."""
SLOW_RANK = ("actor_train", 517, 1.8)
"""(group, rank, factor): one rank slow in every step."""


def synthetic_load(components: Sequence[Tuple[str, str, str, int]], ranks: int, steps: int,
                   duration: Callable[[int, str, int, str, int], int], *,
                   offset: Callable[[int], int] = lambda rank: 2 * MS,
                   controller_extra_ms: int, gap_ms: int, step_gap_ms: int,
                   ranks_per_node: int, margin_ms: int = 0, problems: Sequence[Any] = ()):
    """A LoadResult as the report's loader returns it: per step, each component (group, role,
    phase, base ms) in turn, on ``ranks`` ranks (``duration(step, group, rank, phase, base)``
    ns, starting ``offset(rank)`` ns into the component), the controller's own phase range
    around each, the step spans and one capture window per group and rank. The maker of both
    this benchmark's records and the unit tests' synthetic report (tests/unit/
    test_report_outputs.py)."""
    from verlprof.report.model import LoadResult, PhaseRecord, StepSpan, Window

    records: List[PhaseRecord] = []
    spans, windows = [], []
    t = T0
    for step in range(1, steps + 1):
        step_start = t
        for group, role, phase, base in components:
            longest = 0
            records.append(PhaseRecord(step, "controller", 0, "controller", phase, t,
                                       t + (base + controller_extra_ms) * MS))
            for rank in range(ranks):
                dur = duration(step, group, rank, phase, base)
                start = t + offset(rank)
                records.append(PhaseRecord(step, group, rank, role, phase, start, start + dur,
                                           host=f"node{rank // ranks_per_node}",
                                           report_path=f"step{step:04d}/{group}/rank{rank}/r"))
                longest = max(longest, start + dur - t)
            t += longest + gap_ms * MS
        spans.append(StepSpan(step, step_start, t, "controller"))
        windows += [Window(group, rank, step_start - margin_ms * MS, t + margin_ms * MS)
                    for group in dict.fromkeys(c[0] for c in components)
                    for rank in range(ranks)]
        t += step_gap_ms * MS
    return LoadResult(records=tuple(records), steps=tuple(spans), windows=tuple(windows),
                      problems=tuple(problems))


def scale_load(ranks: int = 1024, steps: int = 3,
               components: Sequence[Tuple[str, str, str, int]] = COMPONENTS):
    """A LoadResult of ``ranks`` ranks per component, ``steps`` steps, the planted
    stragglers above, the controller's own phase ranges and one capture window per report."""

    def duration(step: int, group: str, rank: int, phase: str, base: int) -> int:
        dur = base * MS * (1000 + (rank * 37) % 97) // 1000
        if group == SLOW_NODE[0] and rank in SLOW_NODE[1] and step == SLOW_NODE[2]:
            dur = int(dur * SLOW_NODE[3])
        if (group, rank) == SLOW_RANK[:2]:
            dur = int(dur * SLOW_RANK[2])
        return dur

    return synthetic_load(components, ranks, steps, duration,
                          offset=lambda rank: (2 + (rank * 13) % 7) * MS, controller_extra_ms=300,
                          gap_ms=20, step_gap_ms=3000, ranks_per_node=8, margin_ms=5)


def summarise_and_render(load, out_dir: str) -> None:
    """Everything ``verlprof report`` does after reading: analyses, console, every file."""
    from rich.console import Console

    from verlprof.manifest import Manifest
    from verlprof.report.console import print_summary
    from verlprof.report.summary import analyse, write_outputs

    manifest = Manifest(tool="nsys", output_dir=out_dir, step_windows=(), reports=())
    summary = analyse(out_dir, manifest, load)
    write_outputs(summary)
    print_summary(summary, Console(file=io.StringIO(), width=160))


GOAL = 8.8
"""cost(1,024 ranks) / cost(128 ranks) at most 8.8: linear in the ranks (8x), with 10% slack."""


def run(rounds: int = 3, ranks: int = 1024, log=print) -> Result:
    """Summarise + render at ``ranks`` and at ``ranks // 8``, interleaved; the ratio says
    whether the cost grows linearly with the ranks (the absolute time is in the details)."""
    small = max(2, ranks // 8)
    metric = f"report at scale: summarise + render, {ranks} vs {small} ranks x 8 components"
    loads = {n: scale_load(n) for n in (ranks, small)}
    times: dict = {ranks: [], small: []}
    with tempfile.TemporaryDirectory(prefix="verlprof-scale-") as out:
        for _ in range(rounds):
            for n in (ranks, small):
                started = time.perf_counter()
                summarise_and_render(loads[n], os.path.join(out, str(n)))
                times[n].append(time.perf_counter() - started)
        size = os.path.getsize(os.path.join(out, str(ranks), "summary", "timeline.png"))
    big, little = median(times[ranks]), median(times[small])
    log(f"report at scale: {big:.2f} s at {ranks} ranks, {little:.2f} s at {small}")
    return Result(metric, big / little, GOAL, goal_text=f"<= {GOAL:g}x (linear)",
                  samples=ratios(times[ranks], times[small]), details=[
        f"{ranks} ranks x 8 components x 3 steps ({len(loads[ranks].records)} records): "
        f"{big:.2f} s to analyse, print and write csv, md, png, html (median of {rounds}; "
        "the issue's bound: < 10 s)",
        f"{small} ranks: {little:.2f} s", f"timeline.png at {ranks} ranks: {size / 1e3:.0f} kB"])
