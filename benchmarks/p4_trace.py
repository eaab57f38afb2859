"""``verlprof trace`` vs ``verlprof report`` on the same cold report sets (about 1 and 20 MB per
report, :mod:`benchmarks.p4_sizes`), and the trace's peak memory across sizes (issue 27).

Per size, interleaved rounds of: every export and summary deleted; ``verlprof report --no-trace
DIR`` cold (it makes the sqlite exports); then ``verlprof trace DIR``, which reads those exports
(shared, as when ``verlprof report`` writes the trace itself) and writes every NVTX range of
every report. Each runs in a fresh process that prints its peak RSS (``VmHWM``) and its largest
child's (the trace reads its reports in a pool of processes): the trace's peak is the larger.

Goals: the trace <= 1.5x the cold report's time at each size; the trace's peak RSS at the
largest size <= 1.3x its peak at the smallest (flat: it streams). ``VERLPROF_BENCH_P4_SIZES``
picks the sizes as for :mod:`benchmarks.p4_scale`.
"""

from __future__ import annotations

import os
import tempfile
from typing import Dict, List, Tuple

from benchmarks.common import Result, median, ns, ratios
from benchmarks.p4_report import clean
from benchmarks.p4_scale import sizes, verlprof_once
from benchmarks.p4_sizes import ensure

TIME_GOAL = 1.5
RSS_GOAL = 1.3
UI_LIMIT_BYTES = 2 * 10**9
"""What the Perfetto UI opens in a browser, as its documentation states (not measured here:
the UI does not load offline)."""


def once(argv: List[str]) -> Tuple[float, int, str]:
    """(wall s, peak RSS KiB, stdout) of one ``verlprof`` command in a fresh process; the
    peak is the larger of the process's and its largest child's (the trace reads its reports
    in a pool of processes)."""
    wall, peak, kids, stdout = verlprof_once(argv)
    return wall, max(peak, kids), stdout


def measure(size_mb: int, rounds: int, log=print) -> Dict[str, List[float]]:
    folder = ensure(size_mb, log=log)
    out: Dict[str, List[float]] = {"report": [], "trace": [], "rss": [], "bytes": []}
    line = ""
    for _ in range(rounds):
        clean(folder)
        wall, _, _ = once(["report", "--no-trace", folder])
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
                              ratio, TIME_GOAL, samples=ratios(f["trace"], f["report"]), details=[
                                  f"report {median(f['report']):.2f} s, trace "
                                  f"{median(f['trace']):.2f} s, trace file "
                                  f"{median(f['bytes']) / 2**20:.1f} MiB"]))
    with tempfile.TemporaryDirectory(prefix="verlprof-trace-1024-") as folder:
        results.append(sizes_at_1024(folder, log=log))
    if len(figures) > 1:
        small, large = min(figures), max(figures)
        ratio = max(figures[large]["rss"]) / max(figures[small]["rss"])
        results.append(Result(f"P4 trace peak RSS {large} MB vs {small} MB", ratio, RSS_GOAL,
                              samples=ratios(figures[large]["rss"], figures[small]["rss"]),
                              details=[f"{max(figures[s]['rss']) / 1024:.0f} MiB at {s} MB"
                                       for s in figures]))
    return results


def sizes_at_1024(folder: str, kernels: int = 2000, ranks: int = 1024, log=print) -> Result:
    """The trace's size at ``ranks`` ranks of one step, each an nsys export of ``kernels``
    kernels (:func:`benchmarks.p4_gpu.build`, one file linked ``ranks`` times): written in full
    without kernels, and with kernels for 8 ranks; the full size with kernels at ``ranks`` is
    that per rank times ``ranks`` (the same report on every rank)."""
    from benchmarks import p4_gpu
    from verlprof.manifest import Manifest, ProcessInfo, ReportEntry, write_manifest
    from verlprof.trace.build import write_trace
    from verlprof.trace.tracks import Filters

    source = os.path.join(folder, "gpu.sqlite")
    p4_gpu.build(source, kernels)
    entries = []
    for rank in range(ranks):
        rel = os.path.join("step0001", "g", f"rank{rank}", "r.nsys-rep")
        full = os.path.join(folder, rel)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb"):
            pass
        os.utime(full, ns=(1, 1))
        os.link(source, full[: -len(".nsys-rep")] + ".sqlite")
        entries.append(ReportEntry(steps=(1,), group="g", rank=rank, component="g",
                                   backend="nsys", path=rel, status="ok"))
    processes = tuple(ProcessInfo(group="g", rank=r, host=f"n{r // 8}", pid=r)
                      for r in range(ranks))
    write_manifest(Manifest(tool="nsys", output_dir=folder, step_windows=((1,),),
                            reports=tuple(entries), processes=processes,
                            groups={"g": ranks}), folder)
    sizes = {}
    for label, filters in (("no kernels", Filters(kernels=False)),
                           ("8 ranks", Filters(ranks=tuple(range(8))))):
        began = ns()
        result = write_trace(folder, filters=filters, out_path=os.path.join(folder, "t"))
        sizes[label] = (result.written.bytes, (ns() - began) / 1e9)
    per_rank = sizes["8 ranks"][0] / 8
    details = [f"{ranks} ranks x {kernels:,} kernels, one step: no kernels "
               f"{sizes['no kernels'][0] / 2**20:.1f} MiB ({sizes['no kernels'][1]:.1f} s); "
               f"8 ranks with kernels {sizes['8 ranks'][0] / 2**20:.1f} MiB; all "
               f"{ranks} with kernels {per_rank * ranks / 2**30:.2f} GiB (8 ranks' x "
               f"{ranks // 8}); {per_rank / kernels:.0f} bytes a kernel with its launch"]
    log("P4 trace at 1,024 ranks: " + details[0])
    return Result(f"P4 trace at {ranks} ranks --no-kernels vs the Perfetto UI's 2 GB",
                  sizes["no kernels"][0] / UI_LIMIT_BYTES, 1.0, details=details)
