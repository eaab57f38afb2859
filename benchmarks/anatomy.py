"""What "where the step went" (:mod:`verlprof.report.anatomy`, issue 39) adds to ``verlprof
report``: on the K = 16 set (:func:`benchmarks.p4_sizes.ensure_wide`) and the 20 MB x 4 set
(:func:`benchmarks.p4_sizes.ensure`), interleaved rounds of

* ``verlprof report --no-trace DIR`` warm (its exports cached, as a second run has them: the
  smallest report time, so the strictest denominator), in a fresh process;
* :func:`~verlprof.report.anatomy.anatomize` on the same run's records, loaded once in this
  process (what the report does with them after reading them).

The report's time includes the anatomy, so the ratio is anatomy / (report - anatomy): what the
anatomy adds to a report without it. Goal <= 0.05. Those sets hold few phase ranges (4 per step
and rank; their bulk is ranges inside the phases, which the anatomy never looks at), so a third
row puts it where it works hardest: the 1,024-ranks x 8 components load of
:mod:`benchmarks.report_scale` (controller phases, every rank's call of each), against what
``verlprof report`` does after reading it (analyses, console, every file; reading excluded,
so again the strictest denominator). ``--quick`` measures the 1 MB set and 128 ranks.
"""

from __future__ import annotations

import os
from typing import List, Tuple

from benchmarks.common import Result, median, ns
from benchmarks.p4_scale import report_once
from benchmarks.p4_sizes import ensure, ensure_wide
from verlprof.manifest import Manifest, read_manifest
from verlprof.report.anatomy import anatomize
from verlprof.report.load import load

GOAL = 0.05


def measure(folder: str, label: str, rounds: int, log=print) -> Result:
    report_once(folder)  # the exports, cached next to each report: every round is warm
    loaded = load(folder, read_manifest(folder))
    manifest = read_manifest(folder)
    reports: List[float] = []
    anatomies: List[float] = []
    for _ in range(rounds):
        wall, _, _ = report_once(folder)
        reports.append(wall)
        began = ns()
        anatomy = anatomize(loaded.records, loaded.steps, manifest)
        anatomies.append((ns() - began) / 1e9)
    report, added = median(reports), median(anatomies)
    log(f"anatomy {label}: {added * 1e3:.1f} ms on {len(loaded.records):,} records, "
        f"{len(anatomy.steps)} step(s); verlprof report warm {report:.2f} s")
    return Result(f"Anatomy on {label}: added to verlprof report (warm)",
                  added / max(report - added, 1e-9), GOAL,
                  details=[f"{len(loaded.records):,} phase records, {len(loaded.steps)} steps: "
                           f"anatomize {added * 1e3:.1f} ms (median of {rounds}), verlprof "
                           f"report --no-trace warm {report:.2f} s"],
                  samples=[a / max(r - a, 1e-9) for r, a in zip(reports, anatomies)])


def sets(quick: bool, log=print) -> List[Tuple[str, str]]:
    if quick:
        return [(ensure(1, log=log), "the 1 MB x 4 set")]
    return [(ensure_wide(log=log), "K=16 reports of 200,000 ranges"),
            (ensure(20, log=log), "the 20 MB x 4 set")]


def at_scale(rounds: int, ranks: int, log=print) -> Result:
    import tempfile

    from benchmarks.report_scale import scale_load, summarise_and_render

    load = scale_load(ranks)
    manifest = Manifest(tool="nsys", output_dir="", step_windows=(), reports=())
    rest: List[float] = []
    anatomies: List[float] = []
    with tempfile.TemporaryDirectory(prefix="verlprof-anatomy-") as out:
        for _ in range(rounds):
            began = ns()
            summarise_and_render(load, out)
            rest.append((ns() - began) / 1e9)
            began = ns()
            anatomize(load.records, load.steps, manifest)
            anatomies.append((ns() - began) / 1e9)
    report, added = median(rest), median(anatomies)
    log(f"anatomy at {ranks} ranks: {added * 1e3:.0f} ms on {len(load.records):,} records; "
        f"summarise + render {report:.2f} s")
    # ``rest`` is timed without the anatomy, so the ratio is the anatomy over it as measured
    return Result(f"Anatomy at {ranks} ranks x 8 components: added to summarise + render",
                  added / max(report, 1e-9), GOAL,
                  details=[f"{len(load.records):,} phase records, {len(load.steps)} steps: "
                           f"anatomize {added * 1e3:.0f} ms, the report after reading "
                           f"{report:.2f} s (medians of {rounds})"],
                  samples=[a / max(r, 1e-9) for r, a in zip(rest, anatomies)])


def run(rounds: int = 3, quick: bool = False, log=print) -> List[Result]:
    return [measure(folder, label, rounds, log) for folder, label in sets(quick, log)] + \
        [at_scale(rounds, 128 if quick else 1024, log)]


if __name__ == "__main__":
    for result in run(quick=bool(os.environ.get("VERLPROF_BENCH_QUICK"))):
        print(result.line(), *result.details, sep="\n  ")
