"""``python -m benchmarks`` (``make bench``): every metric, one line each, then the table.

Each metric is a ratio measured side by side in this run (interleaved, medians); the goals
are the issue's. A MISS is printed, never turned into a failing exit code: a benchmark reports,
it does not gate. ``--quick`` shrinks every size (a smoke run, figures not meaningful);
``--only p1,p2,p3,p4,p5,memory,scale,controller,trace,on-demand,replicas,summaries,anatomy,gpu``
runs a subset (``replicas``: P5 and P3 on verl's rollout replicas, :mod:`benchmarks.replicas`;
``summaries``: reports summarised on their nodes, :mod:`benchmarks.node_summaries`; ``anatomy``:
what the step anatomy adds to ``verlprof report``, :mod:`benchmarks.anatomy`; ``gpu``: a CUDA
training loop under nsys and the torch profiler, :mod:`benchmarks.gpu`, one line saying why not
on a machine without an NVIDIA GPU). ``--large`` adds P4 on 100 MB reports. ``p4``
includes P4 at report sizes of about 1, 20 and 100 MB (:mod:`benchmarks.p4_scale`) and on 5 M
synthetic kernels (:mod:`benchmarks.p4_gpu`), their inputs made once and cached under
``~/.cache/verlprof-bench``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
import traceback
import uuid
from typing import Callable, Dict, List

from benchmarks import history
from benchmarks.bounds import RUN_ENV, Stalled, end_marked
from benchmarks.common import HOLDS_FIRM, Result, machine, same_everywhere

SIZES = {
    "full": dict(p1_number=1_000_000, p1_rounds=9, peer_rounds=3, p2_rounds=40,
                 p2_sizes=(8, 16, 32, 64), demo_pairs=1, demo_steps=40, p3_blocks=4, p3_block=12,
                 p3_together=75,
                 p4_rounds=3, scale_rounds=3, replica_rounds=4, replica_block=8,
                 replica_together=32),
    "quick": dict(p1_number=100_000, p1_rounds=3, peer_rounds=1, p2_rounds=5,
                  p2_sizes=(8, 16, 32), demo_pairs=1, demo_steps=8, p3_blocks=2, p3_block=5,
                  p3_together=13,
                  p4_rounds=1, scale_rounds=1, replica_rounds=2, replica_block=4,
                  replica_together=6),
}
METRICS = ("p1", "p2", "p3", "memory", "p4", "p5", "scale", "controller", "trace", "on-demand",
           "replicas", "summaries", "anatomy", "gpu")
P4_PARTS = ("p4-report", "p4-scale", "p4-gpu")
"""``--only`` may name one part of p4: the report on the demo's run (Ray), the report sizes,
the GPU reader."""
STOP_GRACE_S = 10.0
"""After SIGTERM or Ctrl-C: seconds the run has to end its steps and Ray before it ends every
process it started by pid and exits anyway."""


class Interrupted(KeyboardInterrupt):
    """SIGTERM or Ctrl-C: the run stops (a KeyboardInterrupt, so that Ray's blocking calls
    give it up too)."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


def stop_on_signals() -> None:
    """SIGTERM and Ctrl-C end the run within seconds: the first one raises
    :class:`Interrupted` in the main thread (every step ends what it started) and arms a
    watchdog that ends every process of this run by pid and exits, should that take longer
    than :data:`STOP_GRACE_S`; a second one exits at once the same way. Installed again
    after ``ray.init`` (which puts its own SIGTERM handler in place)."""
    def handle(signum: int, frame: object) -> None:
        if getattr(handle, "armed", False):
            _exit_now(signum)
        handle.armed = True  # type: ignore[attr-defined]
        threading.Thread(target=lambda: (time.sleep(STOP_GRACE_S), _exit_now(signum)),
                         name="bench-stop-watchdog", daemon=True).start()
        raise Interrupted(signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handle)


def _exit_now(signum: int) -> None:
    print(f"\nbenchmarks: ending every process of this run after {signal.Signals(signum).name}",
          flush=True)
    end_marked(RUN_ENV, os.environ[RUN_ENV], grace_s=1.0)
    os._exit(128 + signum)


PART_SECONDS: Dict[str, float] = {}
"""Seconds each guarded part took in this run (printed at the end: what a full run costs)."""


def log(line: str) -> None:
    print(line, flush=True)


def guarded(name: str, action: Callable[[], List[Result]]) -> List[Result]:
    """A metric that fails is a row saying why (``FAIL (why)``), never the end of the run; a
    wait that expired (:class:`~benchmarks.bounds.Stalled`) already names what it waited
    for, and the processes it started are ended."""
    began = time.perf_counter()
    try:
        results = action()
    except Stalled as err:
        results = [Result(name, None, None, goal_text="-", failure=str(err)[:300])]
    except Exception as err:  # noqa: BLE001 - report and go on with the other metrics
        traceback.print_exc(file=sys.stdout)
        results = [Result(name, None, None, goal_text="-",
                          failure=f"{type(err).__name__}: {err}"[:300])]
    for result in results:
        print(result.line(), *result.details, sep="\n    ", flush=True)
    took = time.perf_counter() - began
    PART_SECONDS[name] = PART_SECONDS.get(name, 0.0) + took
    log(f"  ({name}: {took:.0f} s)")
    return results


def table(results: List[Result]) -> str:
    rows = [("metric", "ratio", "min / median / max (rounds)", "goal", "verdict", "holds")]
    for r in results:
        rows.append((r.metric, r.ratio_text, r.spread_text,
                     r.goal_text or ("none" if r.goal is None else f"<= {r.goal:g}x"),
                     r.verdict, r.holds_text))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def summary(results: List[Result]) -> str:
    """The closing line: rows, misses, rows within their noise, and what another run like
    this one is expected to change (from each row's ``holds``)."""
    misses = [r.metric.split(" ")[0] for r in results
              if r.verdict in ("MISS", "N/A") or r.failure]
    noisy = [r.metric.split(" ")[0] for r in results if r.verdict == "WITHIN NOISE"]
    holds = [r.holds for r in results if r.holds is not None]
    loose = [r.metric.split(" ")[0] for r in results
             if r.holds is not None and r.holds < HOLDS_FIRM]
    expected = (f"; another run like this is expected to change {sum(1 - h for h in holds):.1f} "
                f"verdicts, and to give every row the same one in "
                f"{_share(same_everywhere(holds))} of runs" if holds else "")
    return (f"{len(results)} rows, {len(misses)} MISS, FAIL or not measured"
            + (f": {', '.join(dict.fromkeys(misses))}" if misses else "")
            + f"; {len(noisy)} WITHIN NOISE"
            + (f": {', '.join(dict.fromkeys(noisy))}" if noisy else "")
            + f"; {len(loose)} whose verdict holds in under {HOLDS_FIRM:.0%} of runs like this"
            + (f": {', '.join(dict.fromkeys(loose))}" if loose else "")
            + expected)


def _share(value: float) -> str:
    """A share as a percentage, with two decimals under 1% (a product of 37 rows' holds is
    often 0.01-0.1%: "0%" would hide which)."""
    return f"{value:.0%}" if value >= 0.01 else f"{value:.2%}"


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke run)")
    parser.add_argument("--prepare", action="store_true",
                        help="only make what later runs reuse (the peer env, the cached report "
                        "sets), then exit: a timed run then measures, it does not build")
    parser.add_argument("--large", action="store_true",
                        help="P4 on 100 MB reports too (its set takes ~14 min to make once)")
    parser.add_argument("--only", default=",".join(METRICS),
                        help=f"comma-separated subset of {','.join(METRICS + P4_PARTS)}")
    parser.add_argument("--compare", nargs="*", metavar="RUN",
                        help="print which rows changed verdict between two saved runs "
                        f"(files under {os.path.relpath(history.RUNS_DIR)}; none named: the latest "
                        "two), then exit; every run saves its rows there and compares itself "
                        "with the previous run of the same command")
    args = parser.parse_args(argv)
    if args.compare is not None:
        return _compare(args.compare)
    only = {m.strip() for m in args.only.split(",") if m.strip()}
    unknown = only - set(METRICS + P4_PARTS)
    if unknown:
        parser.error(f"unknown metric(s) {sorted(unknown)}; choose from "
                     f"{','.join(METRICS + P4_PARTS)}")
    if "p4" in only:
        only |= set(P4_PARTS)
    if args.prepare:
        return prepare(args.large)
    if only == {"gpu"}:  # no GPU: one line, nothing started
        from benchmarks import gpu

        reason = gpu.missing()
        if reason:
            print(f"benchmarks --only gpu: not run: {reason}", flush=True)
            return 0
    # every process this run starts (Ray's, nsys' agents) carries it: ended by pid at the end
    # (new each run: never one that a parent of this process carries)
    os.environ[RUN_ENV] = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
    stop_on_signals()
    try:
        return _run(args, only, argv)
    except Interrupted as stop:
        log(f"\nbenchmarks: stopped by {stop}; ending what this run started")
        return 128 + stop.signum
    finally:
        end_marked(RUN_ENV, os.environ[RUN_ENV])


def _run(args: argparse.Namespace, only: set, argv: List[str]) -> int:
    size = SIZES["quick" if args.quick else "full"]
    began, started = time.perf_counter(), time.time()
    load_start = _load()
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    log("verlprof benchmarks" + (" (--quick: sizes too small to mean anything)"
                                 if args.quick else ""))
    for key, value in machine().items():
        log(f"  {key}: {value}")
    log(f"  command: python -m benchmarks {' '.join(argv)}".rstrip())
    log(f"  processes of this run carry {RUN_ENV}={os.environ[RUN_ENV]}")
    log(f"  load average at start: {load_start} (other work on this machine skews every figure)")
    results: List[Result] = []

    if "p1" in only:
        from benchmarks import p1_annotate

        results += guarded("P1", lambda: [p1_annotate.run(size["p1_number"], size["p1_rounds"])])
        results += guarded("P1 peer", lambda: [p1_annotate.run_peer(
            size["p1_number"], size["peer_rounds"], log=log)])
    if "scale" in only:  # the report at 1,024 ranks, records generated: no Ray, no nsys
        from benchmarks import report_scale

        results += guarded("report at scale", lambda: [report_scale.run(
            size["scale_rounds"], log=log)])
    if only & {"p2", "p3", "memory", "p4-report", "p5", "controller"}:
        import ray

        ray.init(include_dashboard=False, logging_level="ERROR", log_to_driver=False,
                 # 32 actors start at once: without this Ray warns about each batch of 2
                 _system_config={"worker_maximum_startup_concurrency": 32})
        stop_on_signals()  # over Ray's own SIGTERM handler
        try:
            results += _ray_metrics(only, size)
        finally:
            ray.shutdown()

    if "replicas" in only:  # verl's replicas: a Ray cluster of its own (logical GPUs)
        from benchmarks import replicas

        results += guarded("replicas", lambda: replicas.run(
            size["replica_rounds"], size["replica_block"], size["replica_together"], log=log))
    quick = args.quick
    if "p4-scale" in only:  # P4 at report sizes of 1-100 MB: no Ray needed
        from benchmarks import p4_scale

        saved = os.environ.get(p4_scale.SIZES_ENV)
        if quick and not saved:
            os.environ[p4_scale.SIZES_ENV] = "1"
        elif args.large and not saved:
            os.environ[p4_scale.SIZES_ENV] = ",".join(
                str(s) for s in (*p4_scale.DEFAULT_SIZES, max(p4_scale.SIZES_MB)))
        try:
            results += p4_scale.run(1 if quick else 3, 1, log=log, wide_set=not quick,
                                    guarded=guarded)
        finally:  # the trace's sizes stay the default ones
            if saved is None:
                os.environ.pop(p4_scale.SIZES_ENV, None)
    if "p4-gpu" in only:  # P4 on 5 M kernels
        from benchmarks import p4_gpu

        results += guarded("P4 GPU", lambda: [p4_gpu.run(
            n=200_000 if quick else p4_gpu.N_BENCH, rounds=1 if quick else 3, log=log)])
    if "trace" in only:  # verlprof trace vs verlprof report on the 1 and 20 MB sets
        from benchmarks import p4_scale, p4_trace

        if args.quick and not os.environ.get(p4_scale.SIZES_ENV):
            os.environ[p4_scale.SIZES_ENV] = "1"
        results += guarded("P4 trace", lambda: p4_trace.run(1 if args.quick else 3, log=log))
    if "summaries" in only:  # issue 37: reports summarised on their nodes (no Ray needed)
        from benchmarks import node_summaries

        results += guarded("summaries", lambda: node_summaries.run(1 if args.quick else 3,
                                                                  log=log))
    if "anatomy" in only:  # issue 39: what the anatomy adds to verlprof report (no Ray)
        from benchmarks import anatomy

        results += guarded("anatomy", lambda: anatomy.run(1 if args.quick else 3,
                                                          quick=args.quick, log=log))
    if "on-demand" in only:  # issue 28: no Ray (in-process ranks; nsys around a bare app)
        from benchmarks import on_demand

        quick = args.quick
        results += guarded("on-demand idle", lambda: [on_demand.run_idle(
            rounds=2 if quick else 6, steps=60 if quick else 200, warmup=10 if quick else 30,
            log=log)])
        results += guarded("on-demand serving", lambda: on_demand.run_serving(
            blocks=2 if quick else 8, block_s=2.0 if quick else 4.5, probes=2 if quick else 6,
            log=log))
    if "gpu" in only:  # issue 38: a CUDA training loop under nsys and the torch profiler
        from benchmarks import gpu

        reason = gpu.missing()
        if reason:
            log(f"gpu: not run: {reason}")
        else:
            results += guarded("GPU", lambda: gpu.run(rounds=1 if quick else 2,
                                                      steps=12 if quick else 30,
                                                      warmup=4 if quick else 10, log=log))
    seconds, load_end = time.perf_counter() - began, _load()
    log("")
    log(table(results))
    log("\n" + summary(results)
        + f"; total {seconds:.0f} s; load average at the end: {load_end}")
    log("seconds per part: " + ", ".join(f"{k} {v:.0f}" for k, v in PART_SECONDS.items()))
    _keep(results, argv, seconds, load_start, load_end, started)
    return 0


def _keep(results: List[Result], argv: List[str], seconds: float, load_start: str,
          load_end: str, started: float) -> None:
    """Save this run's rows and print what changed since the previous run like it."""
    run = history.run_record(results, argv, seconds, load_start, load_end, started=started)
    try:
        before = history.previous(run)
        path = history.save(run)
    except OSError as err:  # the table is printed already: a full disk costs only the record
        log(f"rows not saved: {err}")
        return
    log(f"rows saved: {os.path.relpath(path)}")
    if before is None:
        log("no earlier run of this command on this machine to compare with")
        return
    for line in history.render(before, run, history.compare(before, run)):
        log(line)


def _compare(paths: List[str]) -> int:
    try:
        lines = history.compare_saved(paths)
    except ValueError as err:
        print(f"python -m benchmarks: {err}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


def prepare(large: bool) -> int:
    """``--prepare``: the peer env and every cached input of the rows (made once, reused by
    every later run), each with the seconds it took; no row is measured."""
    from benchmarks import p4_gpu, p4_sizes
    from benchmarks.peer import ensure_peer

    steps: List[tuple] = [("peer env (benchmarks/.venv-peer)", lambda: ensure_peer(log=log))]
    steps += [(f"P4 set of {mb} MB reports", lambda mb=mb: p4_sizes.ensure(mb, log=log))
              for mb in ((1, 20, 100) if large else (1, 20))]
    steps += [("P4 set of 16 x 200,000 ranges", lambda: p4_sizes.ensure_wide(log=log)),
              ("P4 GPU's 5 M kernels", lambda: _gpu_input(p4_gpu, p4_sizes))]
    for name, action in steps:
        began = time.perf_counter()
        action()
        log(f"prepared: {name} ({time.perf_counter() - began:.0f} s)")
    return 0


def _gpu_input(p4_gpu, p4_sizes) -> None:
    path = os.path.join(p4_sizes.cache_root(), f"gpu_{p4_gpu.N_BENCH}.sqlite")
    if not os.path.isfile(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        p4_gpu.build(path, p4_gpu.N_BENCH)


def _load() -> str:
    try:
        with open("/proc/loadavg") as handle:
            return " ".join(handle.read().split()[:3])
    except OSError:
        return "unknown"


def _ray_metrics(only, size) -> List[Result]:
    results: List[Result] = []
    if "p2" in only:
        from benchmarks import p2_fanout

        results += guarded("P2", lambda: p2_fanout.run(
            size["p2_sizes"], rounds=size["p2_rounds"], log=log))
    if "controller" in only:
        from benchmarks import controller_scale

        results += guarded("controller at scale", lambda: controller_scale.run(log=log))
    if "p5" in only:
        from benchmarks import p5_stall

        results += guarded("P5", lambda: p5_stall.run(log=log))
        from benchmarks import p5_placement

        results += guarded("P5 placement", lambda: p5_placement.run(log=log))
    runs: list = []
    if only & {"p3", "memory"}:
        from benchmarks import demo_runs, memory

        results += guarded("demo runs", lambda: runs.extend(demo_runs.run_pairs(
            size["demo_pairs"], size["demo_steps"], log=log)) or [])
        if "memory" in only:
            results += guarded("Memory", lambda: [memory.result(runs)])
    if "p3" in only:
        from benchmarks import p3_unselected

        results += guarded("P3", lambda: p3_unselected.run(
            size["p3_blocks"], size["p3_block"], together=size["p3_together"], demo=runs,
            log=log))
    if "p4-report" in only:
        from benchmarks import p4_report

        results += guarded("P4", lambda: [p4_report.run(size["p4_rounds"], log=log)])
    return results


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
