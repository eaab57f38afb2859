"""Memory: peak RSS of the demo's controller process, profiling on vs off.

From the demo runs of :mod:`benchmarks.demo_runs`: the controller (the demo's TaskRunner
process, which runs the trainer loop, the ProfileController and the end-of-run collection)
reads its own ``ru_maxrss`` when ``fit`` returns. ON runs it under nsys as the shipped config
does. There is no goal in the issue: reported, not judged.
"""

from __future__ import annotations

from typing import Sequence

from benchmarks.common import Result, median, ratios
from benchmarks.demo_runs import DemoRun


def result(runs: Sequence[DemoRun]) -> Result:
    on = [r.peak_rss_kib for r in runs if r.on]
    off = [r.peak_rss_kib for r in runs if not r.on]
    metric = "Memory: controller peak RSS in the demo, profiling on vs off"
    if not on or not off:
        return Result(metric, None, None, goal_text="none (reported)", note="no demo run")
    ok = sum(r.reports_ok for r in runs if r.on)
    total = sum(r.reports for r in runs if r.on)
    return Result(
        metric, median(on) / median(off), None, goal_text="none (reported)",
        samples=ratios(on, off),
        details=[f"on: {median(on) / 1024:.1f} MiB (runs: "
                 f"{', '.join(f'{v / 1024:.1f}' for v in on)}); off: {median(off) / 1024:.1f} "
                 f"MiB (runs: {', '.join(f'{v / 1024:.1f}' for v in off)}); "
                 f"+{(median(on) - median(off)) / 1024:.1f} MiB",
                 f"ON runs wrote {ok}/{total} reports ok"])
