"""P1: a no-op ``@annotate``d worker method with profiling off vs the same bare method.

Two "off" cases, both real: the unselected rank (never configured: the common case, it is
what every rank not in ``profile_ranks`` runs) and a selected rank between its windows
(configured, started and stopped once). timeit-style loops of ``number`` calls, interleaved,
repeated ``rounds`` times; medians. The peer, verl's ``DistProfiler.annotate`` with verl's
default (profiling off) profiler, is measured in the same process as a bare method and
verlprof's wrapper, in the peer environment (:mod:`benchmarks.peer`).

The goal is the peer's alone (issue 30): verlprof's added cost per call, off, at most 1/20 of
verl's. The ratio to a bare call is reported without a goal.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import timeit
from typing import Dict, List

from benchmarks.bounds import deadline_s, run_bounded
from benchmarks.common import ROOT, Result, interleave, median, ratios
from verlprof.worker import ProfilingWorkerMixin, annotate

PEER_GOAL = 1 / 20


class Worker(ProfilingWorkerMixin):
    @annotate("actor")
    def annotated(self):
        pass

    def bare(self):
        pass


def configured_worker(tmp: str) -> Worker:
    """A selected rank between windows: configured (torch, discrete), started, stopped."""
    from verlprof.config.schema import ComponentConfig, ComponentsConfig, ProfilingConfig
    from verlprof.config.topology import Topology
    from verlprof.plan import build_plan

    cfg = ProfilingConfig(steps=(1,), tool="torch", output_dir=tmp, components=ComponentsConfig(
        actor=ComponentConfig((0,), False, True)))
    plan = build_plan(cfg, Topology.of({"actor_rollout_ref": 1}, cuda=False))
    worker = Worker()
    worker.verlprof_configure(plan.process("actor_rollout_ref", 0))
    assert worker.verlprof_start((1,)) == "started"
    assert worker.verlprof_stop((1,)).outcome == "stopped"
    return worker


def per_call_ns(obj, method: str, number: int) -> float:
    timer = timeit.Timer(f"w.{method}()", globals={"w": obj}, timer=time.perf_counter_ns)
    return timer.timeit(number) / number


def measure(sides: Dict[str, tuple], number: int, rounds: int) -> Dict[str, List[float]]:
    """``sides``: name -> (object, method name). Nanoseconds per call, every round."""
    return interleave({name: (lambda o=o, m=m: per_call_ns(o, m, number))
                       for name, (o, m) in sides.items()}, rounds)


def run(number: int = 1_000_000, rounds: int = 9) -> Result:
    with tempfile.TemporaryDirectory() as tmp:
        sides = {"bare": (Worker(), "bare"), "off_unselected": (Worker(), "annotated"),
                 "off_configured": (configured_worker(tmp), "annotated")}
        times = measure(sides, number, rounds)
    med = {k: median(v) for k, v in times.items()}
    ratio = med["off_unselected"] / med["bare"]
    between = med["off_configured"] / med["bare"]
    return Result(
        "P1 annotate, profiling off (unselected rank) vs bare method", ratio, None,
        samples=ratios(times["off_unselected"], times["bare"]),
        details=[
            f"bare method: {med['bare']:.1f} ns/call; annotated, unselected rank: "
            f"{med['off_unselected']:.1f} ns/call (+{med['off_unselected'] - med['bare']:.1f} "
            f"ns); median of {rounds} interleaved loops of {number:,} calls",
            f"annotated, selected rank between windows: {med['off_configured']:.1f} ns/call "
            f"= {between:.3f}x bare",
        ])


# -- the peer: verl's DistProfiler.annotate, in its own environment ----------------------------


def _verl_worker():
    from verl.utils.profiler import DistProfiler

    class VerlWorker:
        def __init__(self):
            # what a verl worker holds when profiling is off: verl's default ProfilerConfig
            self.profiler = DistProfiler(rank=0, config=None)

        @DistProfiler.annotate(color="red", role="actor_update")
        def annotated(self):
            pass

        def bare(self):
            pass

    return VerlWorker()


def child(number: int, rounds: int) -> Dict[str, List[float]]:
    """Runs in the peer env: bare, verlprof off, verl off, interleaved, same process; ns per
    call, every round."""
    sides = {"bare": (Worker(), "bare"), "verlprof": (Worker(), "annotated"),
             "verl": (_verl_worker(), "annotated")}
    return measure(sides, number, rounds)


def run_peer(number: int = 1_000_000, rounds: int = 5, log=print) -> Result:
    from benchmarks.peer import ensure_peer

    metric = "P1 peer: verlprof added cost per call / verl DistProfiler.annotate's (off)"
    python, info = ensure_peer(log=log)
    if python is None:
        return Result(metric, None, PEER_GOAL, goal_text="<= 1/20",
                      note=f"peer unavailable: {info}")
    proc = run_bounded("p1-peer", [python, "-m", "benchmarks.p1_annotate", "--child",
                                   "--number", str(number), "--rounds", str(rounds)],
                       deadline_s(60, 20e-6, 3 * number * rounds), "P1 peer's loops", cwd=ROOT)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return Result(metric, None, PEER_GOAL, goal_text="<= 1/20",
                      note=f"peer unavailable: {tail[0][:200]}")
    per_round = json.loads(proc.stdout.strip().splitlines()[-1])
    med = {k: median(v) for k, v in per_round.items()}
    ours, theirs = med["verlprof"] - med["bare"], med["verl"] - med["bare"]
    return Result(
        metric, ours / theirs, PEER_GOAL, goal_text="<= 1/20 (0.050)",
        samples=[(v - b) / (p - b) for v, b, p in zip(per_round["verlprof"], per_round["bare"],
                                                      per_round["verl"]) if p > b],
        details=[f"verl {info}: {med['verl']:.1f} ns/call = {med['verl'] / med['bare']:.1f}x a "
                 f"bare call ({med['bare']:.1f} ns), +{theirs:.1f} ns; verlprof "
                 f"{med['verlprof']:.1f} ns/call = {med['verlprof'] / med['bare']:.2f}x, "
                 f"+{ours:.1f} ns = 1/{theirs / max(ours, 1e-9):.0f} of verl's; "
                 f"{rounds} interleaved loops of {number:,} calls, same process"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--number", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.number, args.rounds)))
    else:
        for result in (run(args.number, args.rounds), run_peer(args.number, args.rounds)):
            print(result.line(), *result.details, sep="\n  ")


if __name__ == "__main__":
    main()
