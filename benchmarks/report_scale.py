"""The report at scale: summarise and render 1,024 ranks x 8 components x 3 steps.

The records are generated directly (as ``verlprof report``'s loader would return them after
reading 24,576 reports), so this times only what comes after reading: the analyses
(:func:`~verlprof.report.summary.analyse`), the console, summary.csv / summary.md and the
pictures. The ratio is against building the same records, measured in the same run: how many
times the cost of merely holding the records the report costs.

The generator is also what the unit tests of the large report use
(tests/unit/test_report_scale.py), so the picture in docs/images is the one tested.
"""

from __future__ import annotations

import io
import os
import tempfile
import time
from typing import List, Sequence, Tuple

from benchmarks.common import Result, median

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


def scale_load(ranks: int = 1024, steps: int = 3,
               components: Sequence[Tuple[str, str, str, int]] = COMPONENTS):
    """A LoadResult of ``ranks`` ranks per component, ``steps`` steps, the planted
    stragglers above, the controller's own phase ranges and one capture window per report."""
    from verlprof.report.model import LoadResult, PhaseRecord, StepSpan, Window

    records: List[PhaseRecord] = []
    spans, windows = [], []
    t = T0
    for step in range(1, steps + 1):
        step_start = t
        for group, role, phase, base in components:
            longest = 0
            records.append(PhaseRecord(step, "controller", 0, "controller", phase, t,
                                       t + (base + 300) * MS))
            for rank in range(ranks):
                dur = base * MS * (1000 + (rank * 37) % 97) // 1000
                if group == SLOW_NODE[0] and rank in SLOW_NODE[1] and step == SLOW_NODE[2]:
                    dur = int(dur * SLOW_NODE[3])
                if (group, rank) == SLOW_RANK[:2]:
                    dur = int(dur * SLOW_RANK[2])
                start = t + (2 + (rank * 13) % 7) * MS
                records.append(PhaseRecord(step, group, rank, role, phase, start, start + dur,
                                           host=f"node{rank // 8}",
                                           report_path=f"step{step:04d}/{group}/rank{rank}/r"))
                longest = max(longest, start + dur - t)
            t += longest + 20 * MS
        spans.append(StepSpan(step, step_start, t, "controller"))
        windows += [Window(group, rank, step_start - 5 * MS, t + 5 * MS)
                    for group, _, _, _ in components for rank in range(ranks)]
        t += 3000 * MS
    return LoadResult(records=tuple(records), steps=tuple(spans), windows=tuple(windows),
                      problems=())


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


def run(rounds: int = 3, ranks: int = 1024, log=print) -> Result:
    metric = f"report at scale: summarise + render {ranks} ranks x 8 components x 3 steps"
    build, render = [], []
    with tempfile.TemporaryDirectory(prefix="verlprof-scale-") as out:
        for _ in range(rounds):
            started = time.perf_counter()
            load = scale_load(ranks)
            build.append(time.perf_counter() - started)
            started = time.perf_counter()
            summarise_and_render(load, out)
            render.append(time.perf_counter() - started)
        size = os.path.getsize(os.path.join(out, "summary", "timeline.png"))
    ratio = median(render) / median(build)
    log(f"report at scale: {median(render):.2f} s to summarise and render, "
        f"{median(build):.2f} s to build the records")
    return Result(metric, ratio, None, goal_text="none (reported; render < 10 s)", details=[
        f"summarise + render (analyse, console, csv, md, png, html): {median(render):.2f} s "
        f"(median of {rounds})",
        f"building the {len(load.records)} records alone: {median(build):.2f} s",
        f"timeline.png: {size / 1e3:.0f} kB"])
