"""P4 at report sizes of about 1, 20 and 100 MB (issue 17): ``verlprof report`` vs ``nsys
export`` of the same K = 4 reports, both ``nproc`` at a time, cold and warm, and peak RSS.

The reports come from :mod:`benchmarks.p4_sizes` (cached). Per size, interleaved rounds of:

* ``nsys export --type sqlite`` of the 4 reports and nothing else, ``nproc`` at a time (the
  baseline);
* ``verlprof report DIR`` cold (every ``.sqlite`` and the summary deleted first), run by a
  small wrapper that prints the process's own peak RSS (``VmHWM``; the ``nsys export``
  children are separate processes, their ``ru_maxrss`` is printed too, an upper bound);
* the same, warm: a second ``verlprof report`` of the same run (the exports cached next to
  each report, as a user who runs it again has them; every report is read and every summary
  file written again).

Goals: cold <= 1.3x the export; warm <= 0.2x the export from :data:`WARM_MIN_MB` up (on smaller
reports the exports are tenths of a second and a second run is mostly Python's and the report's
fixed cost: reported, no goal); the verlprof process's peak RSS at the
largest size <= 2x its peak at the smallest. The same cold measurement runs on issue 14's set,
K = 16 reports of 200,000 foreign ranges each (:func:`benchmarks.p4_sizes.ensure_wide`), goal
<= 1.3x. ``VERLPROF_BENCH_P4_SIZES`` picks the sizes:
``1,20`` by default; ``1,20,100`` adds the 100 MB set (about 14 minutes to make the first time
on 2 busy cores, then 2-3 minutes a round: over ``make bench``'s 10 minutes, hence opt-in).
"""

from __future__ import annotations

import os
import sys
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from benchmarks.bounds import deadline_s, run_bounded
from benchmarks.common import Result, median, ns, ratios
from benchmarks.p4_report import clean, compile_package, export_all, timed
from benchmarks.p4_sizes import SIZES_MB, WIDE_RANGES, ensure, ensure_wide, report_paths

SIZES_ENV = "VERLPROF_BENCH_P4_SIZES"
COLD_GOAL = 1.3
WARM_GOAL = 0.2
WARM_MIN_MB = 20
"""The warm goal holds from this size up (issue 30 dropped it for 1 MB reports)."""
RSS_GOAL = 2.0
# VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so a child of a large benchmark
# process would report its parent's peak
_WRAPPER = ("import resource, sys\n"
            "from verlprof.cli import main\n"
            "rc = main(sys.argv[1:])\n"
            "me = [int(l.split()[1]) for l in open('/proc/self/status') "
            "if l.startswith('VmHWM:')][0]\n"
            "kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
            "print(f'PEAK_RSS_KIB {me} {kids}', file=sys.stderr)\n"
            "sys.exit(rc)\n")


DEFAULT_SIZES = (1, 20)
"""What ``make bench`` measures unless told: the 100 MB set takes ~14 minutes to make on 2 busy
cores and ~2-3 minutes a round, over the 10 minutes the whole ``make bench`` may take."""


def sizes() -> List[int]:
    """``$VERLPROF_BENCH_P4_SIZES`` (e.g. ``1,20,100``), else :data:`DEFAULT_SIZES`."""
    raw = os.environ.get(SIZES_ENV, "")
    return [int(x) for x in raw.split(",") if x.strip()] if raw.strip() else list(DEFAULT_SIZES)


def report_once(folder: str) -> Tuple[float, int, int]:
    """(wall s, peak RSS KiB of the verlprof process, of its largest child) of one run (the
    trace has its own benchmark, benchmarks/p4_trace.py)."""
    wall, me, kids, _ = verlprof_once(["report", "--no-trace", folder])
    return wall, me, kids


def verlprof_once(argv: List[str]) -> Tuple[float, int, int, str]:
    """(wall s, peak RSS KiB of the verlprof process, of its largest child, its stdout) of one
    ``verlprof ARGV`` in a fresh process."""
    began = ns()
    folder = argv[-1]
    megabytes = sum(os.path.getsize(p) for p in report_paths(folder)) / 1e6
    proc = run_bounded("p4-report", [sys.executable, "-c", _WRAPPER, *argv],
                       deadline_s(120, 6.0, megabytes), f"verlprof {' '.join(argv)}")
    wall = (ns() - began) / 1e9
    line = [x for x in proc.stderr.splitlines() if x.startswith("PEAK_RSS_KIB")]
    if proc.returncode != 0 or not line:
        raise RuntimeError(f"verlprof {argv[0]} failed ({proc.returncode}): "
                           f"{(proc.stderr or proc.stdout).strip()[-300:]}")
    _, me, kids = line[-1].split()
    return wall, int(me), int(kids), proc.stdout


def measure(size_mb: int, rounds: int, log=print) -> Dict[str, List[float]]:
    return measure_folder(ensure(size_mb, log=log), f"{size_mb} MB", rounds, log)


def measure_folder(folder: str, label: str, rounds: int, log=print) -> Dict[str, List[float]]:
    reports = report_paths(folder)
    cores = os.cpu_count() or 1
    out: Dict[str, List[float]] = {k: [] for k in ("export", "cold", "warm", "rss", "kids",
                                                    "warm_rss", "export_cpu", "cold_cpu",
                                                    "warm_cpu")}
    for _ in range(rounds):
        wall, cpu = timed(lambda: export_all(reports, cores))
        out["export"].append(wall / 1e9)
        out["export_cpu"].append(cpu / 1e9)
        clean(folder)
        for side in ("cold", "warm"):
            got: List[Tuple[float, int, int]] = []
            _, cpu = timed(lambda got=got: got.append(report_once(folder)))
            wall, me, kids = got[0]
            out[side].append(wall)
            out[f"{side}_cpu"].append(cpu / 1e9)
            out["rss" if side == "cold" else "warm_rss"].append(me)
            if side == "cold":
                out["kids"].append(kids)
    clean(folder)
    mb = sum(os.path.getsize(p) for p in reports) / len(reports) / 1e6
    log(f"P4 scale {label} ({mb:.1f} MB/report, K={len(reports)}): export "
        f"{median(out['export']):.2f} s, cold {median(out['cold']):.2f} s, warm "
        f"{median(out['warm']):.2f} s, peak RSS "
        f"{max(out['rss']) / 1024:.0f} MiB")
    out["mb"] = [mb]
    out["k"] = [len(reports)]
    return out


Guard = Callable[[str, Callable[[], List[Result]]], List[Result]]


def run(rounds: int = 3, large_rounds: int = 1, log=print, wide_set: bool = True,
        guarded: Optional[Guard] = None) -> List[Result]:
    """Every size, then the wide set; with ``guarded`` (``python -m benchmarks``) each is
    its own step: one that fails or stalls is a ``FAIL (why)`` row, the next one still runs."""
    guard: Guard = guarded or (lambda name, action: action())
    compile_package()
    chosen = sizes()
    figures: Dict[int, Dict[str, List[float]]] = {}
    out: List[Result] = []
    for size in chosen:
        def one(size: int = size) -> List[Result]:
            figures[size] = measure(size, large_rounds if size >= 100 else rounds, log=log)
            return results({size: figures[size]})
        out += guard(f"P4 {size} MB x 4: verlprof report vs nsys export", one)
    out += results(figures, sizes_too=False) + not_measured(chosen)
    if wide_set:
        out += guard(f"P4 K=16 reports of {WIDE_RANGES:,} foreign ranges",
                     lambda: [wide(rounds, log)])
    return out


def not_measured(chosen: Sequence[int]) -> List[Result]:
    """A NOT RUN row per opt-in size left out: the table says what it does not show and how
    to run it (``--large``, or the sizes in :data:`SIZES_ENV`)."""
    return [Result(f"P4 {size} MB x 4: verlprof report cold and warm vs nsys export", None,
                   COLD_GOAL, not_run="runs under --large",
                   note=f"python -m benchmarks --large (or {SIZES_ENV}=1,20,{size}); its set "
                   "takes ~14 minutes to make, then 2-3 minutes a round")
            for size in SIZES_MB if size not in chosen and size > max(DEFAULT_SIZES)]


def wide(rounds: int, log=print) -> Result:
    """Issue 14's P4: K = 16 reports of 200,000 foreign ranges each, cold vs the export."""
    f = measure_folder(ensure_wide(log=log), f"16 x {WIDE_RANGES:,} ranges", rounds, log)
    export, cold = median(f["export"]), median(f["cold"])
    return Result(f"P4 K=16 reports of {WIDE_RANGES:,} foreign ranges: verlprof report cold vs "
                  "nsys export", cold / export, COLD_GOAL, details=_details(f),
                  samples=ratios(f["cold"], f["export"]))


def results(figures: Dict[int, Dict[str, List[float]]], sizes_too: bool = True
            ) -> List[Result]:
    """Two rows per size (``sizes_too``), and the peak RSS row when two sizes were measured."""
    out: List[Result] = []
    for size, f in figures.items() if sizes_too else ():
        export, cold, warm = median(f["export"]), median(f["cold"]), median(f["warm"])
        small = size < WARM_MIN_MB  # seconds of fixed start-up against tenths of exports
        out.append(Result(f"P4 {size} MB x 4: verlprof report cold vs nsys export",
                          cold / export, None if small else COLD_GOAL, details=_details(f),
                          samples=ratios(f["cold"], f["export"]),
                          note=f"fixed start-up: verlprof's own {(cold - export) * 1e3:.0f} ms "
                          f"above an export of {export * 1e3:.0f} ms" if small else ""))
        out.append(Result(f"P4 {size} MB x 4: verlprof report warm vs nsys export",
                          warm / export, None if small else WARM_GOAL,
                          samples=ratios(f["warm"], f["export"])))
    if len(figures) >= 2:
        small, large = min(figures), max(figures)
        out.append(Result(f"P4 peak RSS of verlprof report, {large} MB / {small} MB reports",
                          max(figures[large]["rss"]) / max(figures[small]["rss"]), RSS_GOAL,
                          samples=ratios(figures[large]["rss"], figures[small]["rss"])))
    return out


def _details(f: Dict[str, List[float]]) -> List[str]:
    cores = os.cpu_count() or 1
    export, cold, warm = median(f["export"]), median(f["cold"]), median(f["warm"])
    return [f"{f['mb'][0]:.1f} MB/report, K={int(f['k'][0])}: nsys export {cores} at a time "
            f"{export:.2f} s; verlprof report cold {cold:.2f} s, warm {warm:.2f} s "
            f"(rounds {len(f['cold'])})",
            f"CPU time (user + sys, children included; robust to other load): export "
            f"{median(f['export_cpu']):.2f} s, cold {median(f['cold_cpu']):.2f} s "
            f"({median(f['cold_cpu']) / median(f['export_cpu']):.2f}x), warm "
            f"{median(f['warm_cpu']):.2f} s",
            f"verlprof process peak RSS {max(f['rss']) / 1024:.0f} MiB cold, "
            f"{max(f['warm_rss']) / 1024:.0f} MiB warm; largest child (nsys export) "
            f"{max(f['kids']) / 1024:.0f} MiB"]


def run_sizes(selected: Sequence[int], rounds: int, log=print) -> List[Result]:
    """Only ``selected`` sizes (tests, quick runs)."""
    compile_package()
    return results({s: measure(s, rounds, log=log) for s in selected})


if __name__ == "__main__":
    for res in run():
        print(res.line(), *res.details, sep="\n  ")
