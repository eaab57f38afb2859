"""``verlprof trace`` vs ``verlprof report`` on the same cold report sets (about 1 and 20 MB per
report, :mod:`benchmarks.p4_sizes`), and the trace's peak memory across sizes (issue 27).

Per size, interleaved rounds of: every export and summary deleted; ``verlprof report --no-trace
DIR`` cold (it makes the sqlite exports); then ``verlprof trace DIR``, which reads those exports
(shared, as when ``verlprof report`` writes the trace itself) and writes every NVTX range of
every report. Each runs in a fresh process that prints its own peak RSS (``VmHWM``).

Goals: the trace <= 1.5x the cold report's time at each size; the trace's peak RSS at the
largest size <= 1.3x its peak at the smallest (flat: it streams). ``VERLPROF_BENCH_P4_SIZES``
picks the sizes as for :mod:`benchmarks.p4_scale`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Dict, List, Tuple

from benchmarks.common import Result, median, ns
from benchmarks.p4_report import clean
from benchmarks.p4_scale import sizes
from benchmarks.p4_sizes import ensure

TIME_GOAL = 1.5
RSS_GOAL = 1.3
_WRAPPER = ("import sys\n"
            "from verlprof.cli import main\n"
            "rc = main(sys.argv[1:])\n"
            "me = [int(l.split()[1]) for l in open('/proc/self/status') "
            "if l.startswith('VmHWM:')][0]\n"
            "print(f'PEAK_RSS_KIB {me}', file=sys.stderr)\n"
            "sys.exit(rc)\n")


def once(argv: List[str]) -> Tuple[float, int, str]:
    """(wall s, peak RSS KiB, stdout) of one ``verlprof`` command in a fresh process."""
    began = ns()
    proc = subprocess.run([sys.executable, "-c", _WRAPPER, *argv], capture_output=True,
                          text=True, timeout=900, check=False)
    wall = (ns() - began) / 1e9
    peak = [x for x in proc.stderr.splitlines() if x.startswith("PEAK_RSS_KIB")]
    if proc.returncode != 0 or not peak:
        raise RuntimeError(f"verlprof {argv[0]} failed ({proc.returncode}): "
                           f"{(proc.stderr or proc.stdout).strip()[-300:]}")
    return wall, int(peak[-1].split()[1]), proc.stdout


def measure(size_mb: int, rounds: int, log=print) -> Dict[str, List[float]]:
    folder = ensure(size_mb, log=log)
    out: Dict[str, List[float]] = {"report": [], "trace": [], "rss": [], "bytes": []}
    line = ""
    for _ in range(rounds):
        clean(folder)
        wall, _, _ = once(["report", "--no-trace", "--no-picture", folder])
        out["report"].append(wall)
        wall, peak, stdout = once(["trace", folder])
        out["trace"].append(wall)
        out["rss"].append(peak)
        line = stdout.strip().splitlines()[0]
        out["bytes"].append(os.path.getsize(os.path.join(folder, "summary", "trace.pftrace")))
    clean(folder)
    log(f"P4 trace {size_mb} MB: report cold {median(out['report']):.2f} s, trace "
        f"{median(out['trace']):.2f} s, trace peak RSS {max(out['rss']) / 1024:.0f} MiB; {line}")
    return out


def run(rounds: int = 3, log=print) -> List[Result]:
    figures = {size: measure(size, rounds, log) for size in sizes()}
    results = []
    for size, f in figures.items():
        ratio = median(f["trace"]) / median(f["report"])
        results.append(Result(f"P4 trace {size} MB x 4: verlprof trace vs verlprof report cold",
                              ratio, TIME_GOAL, details=[
                                  f"report {median(f['report']):.2f} s, trace "
                                  f"{median(f['trace']):.2f} s, trace file "
                                  f"{median(f['bytes']) / 2**20:.1f} MiB"]))
    if len(figures) > 1:
        small, large = min(figures), max(figures)
        ratio = max(figures[large]["rss"]) / max(figures[small]["rss"])
        results.append(Result(f"P4 trace peak RSS {large} MB vs {small} MB", ratio, RSS_GOAL,
                              details=[f"{max(figures[s]['rss']) / 1024:.0f} MiB at {s} MB"
                                       for s in figures]))
    return results
