"""P2: the controller's start+stop fan-out to N worker actors vs a bare Ray no-op fan-out.

Real Ray actors mixing in :class:`~verlprof.worker.ProfilingWorkerMixin`, the real
:class:`~verlprof.runtime.controller.ProfileController` with a torch-backend plan in discrete
mode: a ``with controller.step(s)`` that holds no phase call is exactly one ``verlprof_start``
fan-out
(each worker's session arms step ``s``) and one ``verlprof_stop`` fan-out (it disarms), the
control cost that every profiled step pays, without the profiler's own capture work. The bare
side is two ``ray.get([actor.noop.remote() ...])`` to the same actors. Each N has its own pool
of N actors and its own controller (one controller drives a worker: it mirrors which window
each worker opens next, and sends ``verlprof_start()`` without an argument when that is the
window it means). Rounds cycle N and interleave A/B; medians.

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

from benchmarks.common import Result, median, ns, spread
from verlprof.worker import ProfilingWorkerMixin

GOAL = 1.25
GROWTH_GOAL = 1.10
"""The ratio may not rise with N by more than this (the noise of this machine)."""
SIZES = (8, 16, 32, 64)
LINES = (32, 64)
"""The N that get a ratio line and a growth line (against the smallest N) in the table."""
STARTUP_CONCURRENCY = 32
"""Ray workers started at once (Ray's default is one per CPU: 2 here, 60 s more for 120)."""


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

    out = tempfile.mkdtemp(prefix="verlprof-bench-p2-")
    started = not ray.is_initialized()
    if started:
        ray.init(include_dashboard=False, logging_level="ERROR", log_to_driver=False,
                 _system_config={"worker_maximum_startup_concurrency": STARTUP_CONCURRENCY})
    try:
        cls = ray.remote(num_cpus=0)(FanoutWorker)
        began = time.perf_counter()
        pools = {n: [cls.remote() for _ in range(n)] for n in sizes}
        ray.get([a.noop.remote() for pool in pools.values() for a in pool])
        up_s = time.perf_counter() - began
        every = [a for pool in pools.values() for a in pool]
        pids = [s.identity.pid for s in ray.get([a.verlprof_status.remote() for a in every])]
        footprint = _footprint(pids, up_s)
        log(f"P2: {footprint}")
        controllers = {}
        for n in sizes:
            controller = ProfileController(make_plan(n, rounds + 1, out), echo=False)
            controller.register_group("actor_rollout_ref", pools[n])
            controllers[n] = controller
        log(f"P2: {rounds} rounds x N={list(sizes)}, interleaved")

        def verlprof_side(n: int, step: int) -> float:
            t0 = ns()
            with controllers[n].step(step):
                pass
            return ns() - t0

        def bare_side(n: int) -> float:
            t0 = ns()
            for _ in range(2):
                ray.get([a.noop.remote() for a in pools[n]])
            return ns() - t0

        for n in sizes:  # warm-up: first calls set up Ray's per-actor channels
            verlprof_side(n, 1)
            bare_side(n)
        times: Dict[int, Dict[str, List[float]]] = {n: {"verlprof": [], "bare": []}
                                                    for n in sizes}
        for r in range(rounds):
            for n in sizes:
                order = ("verlprof", "bare") if r % 2 == 0 else ("bare", "verlprof")
                for side in order:
                    value = verlprof_side(n, r + 2) if side == "verlprof" else bare_side(n)
                    times[n][side].append(value)
        statuses = ray.get([a.verlprof_status.remote() for a in every])
        torch_in = [_loaded(pid, "libtorch") for pid in pids]
        for actor in every:
            ray.kill(actor)
    finally:
        if started:
            ray.shutdown()
        shutil.rmtree(out, ignore_errors=True)
    results = _result(times, statuses, sizes)
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
    line = f"{len(pids)} actors up in {up_s:.1f} s (a pool per N, started at once)"
    if uss and rss and cpu:
        line += (f"; per actor: {median(cpu):.2f} CPU s to start, {median(rss) / 1024:.0f} MB "
                 f"RSS, {median(uss) / 1024:.0f} MB private (all actors: "
                 f"{sum(uss) / 1024 ** 2:.1f} GiB private)")
    return line


def _result(times, statuses, sizes) -> List[Result]:
    med = {n: (median(times[n]["verlprof"]), median(times[n]["bare"])) for n in sizes}
    ratios = {n: v / b for n, (v, b) in med.items()}
    lo = min(sizes)
    details = [f"N={n:2d}: start+stop {spread(times[n]['verlprof'])}; bare 2x no-op "
               f"{spread(times[n]['bare'])}; ratio {ratios[n]:.3f}x" for n in sizes]
    armed = sum(1 for s in statuses if s.armed)
    details.append(f"{len(statuses)} actors, every start stopped (left armed: {armed})")
    by_n = f"ratio by N: {', '.join(f'{n}: {ratios[n]:.3f}x' for n in sizes)}"
    results: List[Result] = []
    for hi in [n for n in sizes if n in LINES] or [max(sizes)]:
        slope = ((med[hi][0] - med[lo][0]) / (med[hi][1] - med[lo][1])
                 if med[hi][1] > med[lo][1] else float("nan"))
        growth = [by_n, f"N {lo}->{hi}: verlprof +{(med[hi][0] - med[lo][0]) / 1e6:.2f} ms, bare "
                  f"+{(med[hi][1] - med[lo][1]) / 1e6:.2f} ms: each added actor costs "
                  f"{slope:.2f}x what it costs the bare fan-out"]
        results += [Result(f"P2 start+stop fan-out vs bare Ray no-op fan-out, N={hi}",
                           ratios[hi], GOAL, details=details if not results else []),
                    Result(f"P2 growth: ratio at N={hi} / ratio at N={lo} (grows no faster "
                           "than bare)", ratios[hi] / ratios[lo], GROWTH_GOAL, details=growth)]
    return results

if __name__ == "__main__":
    for result in run():
        print(result.line(), *result.details, sep="\n  ")
