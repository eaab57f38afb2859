"""P2: the controller's start+stop fan-out to N worker actors vs a bare Ray no-op fan-out.

Real Ray actors mixing in :class:`~verlprof.worker.ProfilingWorkerMixin`, the real
:class:`~verlprof.runtime.controller.ProfileController` with a torch-backend plan in discrete
mode: a ``with controller.step(s)`` that holds no phase call is exactly one ``verlprof_start``
fan-out
(each worker's session arms step ``s``) and one ``verlprof_stop`` fan-out (it disarms), the
control cost that every profiled step pays, without the profiler's own capture work. The bare
side is two ``ray.get([actor.noop.remote() ...])`` to the same actors. Each N has its own
controller (one controller drives a worker: it mirrors which window each worker opens next, and
sends ``verlprof_start()`` without an argument when that is the window it means), so N = 8, 16
and 32 have a pool each; N = 64 comes after them and reuses the pools of 16 and 32 (see
:data:`SHARED_ABOVE`). Rounds cycle N and interleave A/B; medians.

The actors are as light as a Ray actor gets: ``num_cpus=0``, no runtime env, and a process
that imports Ray, this module and :mod:`verlprof.worker` only (the torch backend loads torch
when a window opens, and P2's armed windows never open). The run reports what they cost (start
time, CPU seconds and memory per actor) and checks that no actor loaded torch.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Dict, List, Optional, Sequence

from benchmarks.bounds import deadline_s, ray_get
from benchmarks.common import Result, block_ratios, chunks, median, ns, spread
from verlprof.worker import ProfilingWorkerMixin

GOAL = 1.25
GROWTH_GOAL = 1.10
SAMPLE_ROUNDS = 8
"""Consecutive interleaved rounds per sample of a row (one fan-out is too short to be one)."""
"""The ratio may not rise with N by more than this (the noise of this machine)."""
SIZES = (8, 16, 32, 64)
LINES = (32, 64)
"""The N that get a ratio line and a growth line (against the smallest N) in the table."""
SHARED_ABOVE = 32
"""An N above this has no pool of its own: after the rounds of the smaller N, a new controller
takes over the actors of every pool but the smallest N's, plus fresh ones, and its rounds
interleave with the smallest N only. A pool of its own would start 48 more Ray workers for
N = 64 (about 1.3 CPU s and 59 MB each on the machine of docs/performance.md)."""
STARTUP_CONCURRENCY = 32
"""Ray workers started at once (Ray's default is one per CPU: 2 here)."""


class FanoutWorker(ProfilingWorkerMixin):
    def noop(self):
        return None


def make_plan(n: int, steps: int, output_dir: str):
    from verlprof.config.schema import ComponentConfig, ComponentsConfig, ProfilingConfig
    from verlprof.config.topology import Topology
    from verlprof.plan import build_plan

    cfg = ProfilingConfig(steps=tuple(range(1, steps + 1)), tool="torch", output_dir=output_dir,
                          components=ComponentsConfig(actor=ComponentConfig(
                              tuple(range(n)), False, True)))
    return build_plan(cfg, Topology.of({"actor_rollout_ref": n}, cuda=False))


def run(sizes: Sequence[int] = SIZES, rounds: int = 40, log=print) -> List[Result]:
    import ray

    from verlprof.runtime.controller import ProfileController

    first = [n for n in sizes if n <= SHARED_ABOVE] or [min(sizes)]
    later = [n for n in sizes if n not in first]
    lo = min(first)
    out = tempfile.mkdtemp(prefix="verlprof-bench-p2-")
    started = not ray.is_initialized()
    if started:
        ray.init(include_dashboard=False, logging_level="ERROR", log_to_driver=False,
                 _system_config={"worker_maximum_startup_concurrency": STARTUP_CONCURRENCY})
    try:
        cls = ray.remote(num_cpus=0)(FanoutWorker)
        began = time.perf_counter()
        pools = {n: [cls.remote() for _ in range(n)] for n in first}
        shared = [a for n in first if n != lo for a in pools[n]]
        fresh = [cls.remote() for _ in range(max([0] + later) - len(shared))]
        every = [a for pool in pools.values() for a in pool] + fresh
        ray_get([a.noop.remote() for a in every], deadline_s(60, 2.0, len(every)),
                f"P2: {len(every)} actors starting")
        up_s = time.perf_counter() - began
        pids = [s.identity.pid for s in ray_get([a.verlprof_status.remote() for a in every],
                                                deadline_s(30, 0.5, len(every)),
                                                "P2: the actors' verlprof_status")]
        footprint = _footprint(pids, up_s)
        log(f"P2: {footprint}")
        controllers = {}
        steps = (1 + len(later)) * (rounds + 1)  # N=lo plays in every phase
        last_step: Dict[int, int] = {}

        def take(n: int, actors: list) -> None:
            """A new controller for N, which configures (takes over) these actors."""
            controller = ProfileController(make_plan(n, steps, out), echo=False)
            controller.register_group("actor_rollout_ref", actors)
            controllers[n], pools[n], last_step[n] = controller, actors, 0

        def verlprof_side(n: int) -> float:
            last_step[n] += 1
            t0 = ns()
            with controllers[n].step(last_step[n]):
                pass
            return ns() - t0

        def bare_side(n: int) -> float:
            t0 = ns()
            for _ in range(2):
                ray.get([a.noop.remote() for a in pools[n]], timeout=deadline_s(30, 0.5, n))
            return ns() - t0

        def measure(phase: Sequence[int]) -> Dict[int, Dict[str, List[float]]]:
            for n in phase:  # warm-up: first calls set up Ray's per-actor channels
                verlprof_side(n)
                bare_side(n)
            times: Dict[int, Dict[str, List[float]]] = {n: {"verlprof": [], "bare": []}
                                                        for n in phase}
            for r in range(rounds):
                for n in phase:
                    order = ("verlprof", "bare") if r % 2 == 0 else ("bare", "verlprof")
                    for side in order:
                        value = verlprof_side(n) if side == "verlprof" else bare_side(n)
                        times[n][side].append(value)
            return times

        for n in first:
            take(n, pools[n])
        log(f"P2: {rounds} rounds x N={first}, interleaved")
        phases = [measure(first)]
        for n in later:
            take(n, (shared + fresh)[:n])
            log(f"P2: then N={n} on the {len(shared)} actors of N="
                f"{'+'.join(str(m) for m in first if m != lo)} and {len(fresh)} more, under a "
                f"new controller: {rounds} rounds x N={[lo, n]}, interleaved")
            phases.append(measure([lo, n]))
        statuses = ray_get([a.verlprof_status.remote() for a in every],
                           deadline_s(30, 0.5, len(every)), "P2: the actors' verlprof_status")
        torch_in = [_loaded(pid, "libtorch") for pid in pids]
        for actor in every:
            ray.kill(actor)
    finally:
        if started:
            ray.shutdown()
        shutil.rmtree(out, ignore_errors=True)
    results = _result(phases, statuses)
    read = [t for t in torch_in if t is not None]
    results[0].details += [footprint, f"torch loaded in {sum(read)} of the {len(read)} actors "
                                      "whose memory map was read (after the run)"]
    return results


def _proc_kib(pid: int, path: str, fields: Sequence[str]) -> Optional[int]:
    """Sum of ``fields`` (kB) in ``/proc/pid/<path>``; None when unreadable (another host)."""
    try:
        with open(f"/proc/{pid}/{path}") as handle:
            return sum(int(line.split()[1]) for line in handle if line.split(":")[0] in fields)
    except (OSError, ValueError, IndexError):
        return None


def _cpu_s(pid: int) -> Optional[float]:
    """User + system CPU seconds of a process so far (its start, for a fresh actor)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _loaded(pid: int, library: str) -> Optional[bool]:
    """Whether a shared library whose path holds ``library`` is mapped (None: unreadable)."""
    try:
        with open(f"/proc/{pid}/maps") as handle:
            return any(library in line for line in handle)
    except OSError:
        return None


def _footprint(pids: Sequence[int], up_s: float) -> str:
    """One line: how long the actors took to start and what each costs (medians)."""
    uss = [v for v in (_proc_kib(p, "smaps_rollup", ("Private_Clean", "Private_Dirty"))
                       for p in pids) if v is not None]
    rss = [v for v in (_proc_kib(p, "smaps_rollup", ("Rss",)) for p in pids) if v is not None]
    cpu = [v for v in (_cpu_s(p) for p in pids) if v is not None]
    line = f"{len(pids)} actors up in {up_s:.1f} s, started at once"
    if uss and rss and cpu:
        line += (f"; per actor: {median(cpu):.2f} CPU s to start, {median(rss) / 1024:.0f} MB "
                 f"RSS, {median(uss) / 1024:.0f} MB private (all actors: "
                 f"{sum(uss) / 1024 ** 2:.1f} GiB private)")
    return line


def _result(phases: Sequence[Dict[int, Dict[str, List[float]]]], statuses) -> List[Result]:
    """A ratio row and a growth row (against the smallest N of its phase) per N in LINES
    (else the largest N of the phase); each phase's raw figures under its first row."""
    results: List[Result] = []
    for times in phases:
        sizes = sorted(times)
        med = {n: (median(times[n]["verlprof"]), median(times[n]["bare"])) for n in sizes}
        ratios = {n: v / b for n, (v, b) in med.items()}
        lo = sizes[0]
        details = [f"N={n:2d}: start+stop {spread(times[n]['verlprof'])}; bare 2x no-op "
                   f"{spread(times[n]['bare'])}; ratio {ratios[n]:.3f}x" for n in sizes]
        if not results:
            armed = sum(1 for s in statuses if s.armed)
            details.append(f"{len(statuses)} actors, every start stopped (left armed: {armed})")
        by_n = f"ratio by N: {', '.join(f'{n}: {ratios[n]:.3f}x' for n in sizes)}"
        for hi in [n for n in sizes if n in LINES] or [sizes[-1]]:
            slope = ((med[hi][0] - med[lo][0]) / (med[hi][1] - med[lo][1])
                     if med[hi][1] > med[lo][1] else float("nan"))
            growth = [by_n, f"N {lo}->{hi}: verlprof +{(med[hi][0] - med[lo][0]) / 1e6:.2f} ms, "
                      f"bare +{(med[hi][1] - med[lo][1]) / 1e6:.2f} ms: each added actor costs "
                      f"{slope:.2f}x what it costs the bare fan-out"]
            # samples: the ratio per block of SAMPLE_ROUNDS consecutive interleaved rounds
            per = {n: block_ratios(chunks(times[n]["verlprof"], SAMPLE_ROUNDS),
                                   chunks(times[n]["bare"], SAMPLE_ROUNDS)) for n in (lo, hi)}
            results += [Result(f"P2 start+stop fan-out vs bare Ray no-op fan-out, N={hi}",
                               ratios[hi], GOAL, details=details, samples=per[hi]),
                        Result(f"P2 growth: ratio at N={hi} / ratio at N={lo} (grows no faster "
                               "than bare)", ratios[hi] / ratios[lo], GROWTH_GOAL, details=growth,
                               samples=[a / b for a, b in zip(per[hi], per[lo])])]
            details = []
    return results

if __name__ == "__main__":
    for result in run():
        print(result.line(), *result.details, sep="\n  ")
