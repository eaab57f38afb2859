"""Reports read where they were written (issue 37, item 2): what ``verlprof report`` costs the
head once each report's summary was made on the node that holds it
(:mod:`verlprof.runtime.summarise`), and what a second run of an unchanged directory costs.

The reports are :mod:`benchmarks.p4_sizes`' real nsys reports (cached; 2 ranks x 2 steps).
Summaries are made by :func:`~verlprof.runtime.summarise.summarise_here`, the body of the task
each node runs (no Ray here: what is measured is the head's side). Rows:

* head CPU seconds of ``verlprof report --no-trace DIR`` (the process and its children) with
  node-made summaries, 64 reports vs 4 (interleaved rounds, medians), goal <= 1.3x (issue 37
  found ~16x without summaries: the head exports and reads every report). The 4-report set is the
  1 MB set; the 64-report set is 32 ranks x 2 steps of hard links to those 4 files, each with
  its own summary (the record its node would make: the same values under its own name);
* bytes the head receives per report with summaries (the summary file plus the task's pickled
  result) over the report's size, 20 MB set, goal <= 1% (the largest of the 4);
* a second ``verlprof report --no-trace`` of an unchanged directory (it reads only the
  summaries) over the cold run (nothing cached: every export, summary and output deleted),
  20 MB set, wall time, interleaved, goal <= 0.1x.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import shutil
import sys
import tempfile
from typing import Dict, List, Tuple

from benchmarks.common import Result, median, run_quiet
from benchmarks.p4_report import clean, timed
from benchmarks.p4_sizes import GROUP, ensure, report_paths

HEAD_GOAL = 1.3
BYTES_GOAL = 0.01
SECOND_GOAL = 0.1
MANY = 64
"""Reports in the large set (32 ranks x 2 steps)."""


def _report(folder: str) -> Tuple[float, float]:
    """(wall s, CPU s of the process and its children) of one ``verlprof report``."""
    argv = [sys.executable, "-m", "verlprof.cli", "report", "--no-trace", folder]
    done: List = []
    wall, cpu = timed(lambda: done.append(run_quiet(argv, timeout=600)))
    if done[0].returncode != 0:
        raise RuntimeError(f"verlprof report {folder} failed ({done[0].returncode}): "
                           f"{done[0].stdout.strip()[-300:]}")
    return wall / 1e9, cpu / 1e9


def summarise_all(folder: str) -> Dict[str, int]:
    """Each report's summary made as its node's task makes it; bytes the head gets back per
    report (the summary file and the pickled task result)."""
    from verlprof.manifest import read_manifest
    from verlprof.runtime.summarise import summarise_here, summary_jobs

    received = {}
    for job in summary_jobs(read_manifest(folder), os.path.abspath(folder), timeout_s=600):
        result = summarise_here(job)
        if result.summary is None:
            raise RuntimeError(f"{job.path}: {result.outcome} {result.reason}")
        received[job.path] = (os.path.getsize(os.path.join(folder, result.summary))
                              + len(pickle.dumps(result)))
    return received


def _copy(source: str, target: str) -> None:
    """The report set (times kept, so that summaries made here match there)."""
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("*.sqlite", "summary",
                                                                  "*.verlprof-summary.json"))


def many_reports(small: str, target: str, count: int = MANY) -> None:
    """``count`` entries (``count // 2`` ranks x 2 steps), hard links to the 4 reports of
    ``small`` (which already have their summaries), each with its own summary."""
    from verlprof.backends.summary import load_summary, write_summary
    from verlprof.manifest import Manifest, read_manifest, write_manifest

    manifest = read_manifest(small)
    by_key = {(e.rank, e.steps): e for e in manifest.reports}
    entries = []
    for rank in range(count // 2):
        for step in (1, 2):
            source = by_key[(rank % 2, (step,))]
            rel = f"step{step:04d}/{GROUP}/rank{rank}/{GROUP}_rank{rank}.{step}.nsys-rep"
            full = os.path.join(target, rel)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            os.link(os.path.join(small, source.path), full)
            summary = load_summary(os.path.join(small, source.path), "nsys", None)
            if summary is None:
                raise RuntimeError(f"{source.path}: no summary to copy")
            write_summary(dataclasses.replace(summary, report=os.path.basename(full)), full)
            entries.append(dataclasses.replace(source, rank=rank, path=rel))
    write_manifest(Manifest(tool="nsys", output_dir=target, step_windows=manifest.step_windows,
                            reports=tuple(entries), groups={GROUP: count // 2}), target)


def run(rounds: int = 3, log=print) -> List[Result]:
    with tempfile.TemporaryDirectory(prefix="verlprof-bench-summaries-") as tmp:
        small, large, cold = (os.path.join(tmp, n) for n in ("small", "large", "cold"))
        _copy(ensure(1, log=log), small)
        summarise_all(small)
        for path in report_paths(small):  # the nodes' exports: not the head's to read
            sqlite = os.path.splitext(path)[0] + ".sqlite"
            if os.path.exists(sqlite):
                os.remove(sqlite)
        many_reports(small, large)
        cpu: Dict[str, List[float]] = {"4": [], "64": []}
        for _ in range(rounds):
            for key, folder in (("4", small), ("64", large)):
                cpu[key].append(_report(folder)[1])
        head = median(cpu["64"]) / median(cpu["4"])
        log(f"node summaries: head CPU 4 reports {median(cpu['4']):.2f} s, "
            f"{MANY} reports {median(cpu['64']):.2f} s")

        _copy(ensure(20, log=log), cold)
        sizes = {os.path.relpath(p, cold): os.path.getsize(p) for p in report_paths(cold)}
        received = summarise_all(cold)
        share = max(received[p] / sizes[p] for p in sizes)
        walls: Dict[str, List[float]] = {"cold": [], "second": []}
        for _ in range(max(2, rounds - 1)):
            clean(cold)
            walls["cold"].append(_report(cold)[0])
            walls["second"].append(_report(cold)[0])
        second = median(walls["second"]) / median(walls["cold"])
        mb = sum(sizes.values()) / len(sizes) / 1e6
        log(f"node summaries: 20 MB set ({mb:.1f} MB/report): cold "
            f"{median(walls['cold']):.2f} s, second {median(walls['second']):.2f} s")
    return [
        Result(f"summaries: head CPU of verlprof report, {MANY} vs 4 reports", head, HEAD_GOAL,
               details=[f"CPU s (process + children), 4 reports: "
                        f"{_list(cpu['4'])}; {MANY}: {_list(cpu['64'])}"],
               samples=[m / f for m, f in zip(cpu["64"], cpu["4"])]),
        Result("summaries: bytes the head receives per report / report size (20 MB)", share,
               BYTES_GOAL, goal_text=f"<= {BYTES_GOAL:g} (1%)", note=f"{share:.4%} of a report",
               details=["per report: " + ", ".join(
                   f"{received[p]:,} B of {sizes[p] / 1e6:.1f} MB" for p in sorted(sizes))]),
        Result("summaries: second verlprof report / cold, unchanged dir (20 MB)", second,
               SECOND_GOAL, details=[f"wall s, cold: {_list(walls['cold'])}; second: "
                                     f"{_list(walls['second'])}"],
               samples=[b / a for a, b in zip(walls["cold"], walls["second"])]),
    ]


def _list(values: List[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


if __name__ == "__main__":
    for row in run(rounds=int(os.environ.get("VERLPROF_BENCH_ROUNDS", "3"))):
        print(row.line(), *row.details, sep="\n  ")
