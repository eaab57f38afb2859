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
"""

from __future__ import annotations

import shutil
import tempfile
from typing import Dict, List, Sequence

from benchmarks.common import Result, median, ns, spread
from verlprof.worker import ProfilingWorkerMixin

GOAL = 1.25
GROWTH_GOAL = 1.10
"""The ratio may not rise with N by more than this (the noise of this machine)."""
SIZES = (8, 16, 32)


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
        ray.init(include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    try:
        cls = ray.remote(num_cpus=0)(FanoutWorker)
        pools = {n: [cls.remote() for _ in range(n)] for n in sizes}
        ray.get([a.noop.remote() for pool in pools.values() for a in pool])
        controllers = {}
        for n in sizes:
            controller = ProfileController(make_plan(n, rounds + 1, out), echo=False)
            controller.register_group("actor_rollout_ref", pools[n])
            controllers[n] = controller
        log(f"P2: {sum(sizes)} actors up (a pool per N); {rounds} rounds x N={list(sizes)}, "
            "interleaved")

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
        every = [a for pool in pools.values() for a in pool]
        statuses = ray.get([a.verlprof_status.remote() for a in every])
        for actor in every:
            ray.kill(actor)
    finally:
        if started:
            ray.shutdown()
        shutil.rmtree(out, ignore_errors=True)
    return _result(times, statuses, sizes)


def _result(times, statuses, sizes) -> List[Result]:
    med = {n: (median(times[n]["verlprof"]), median(times[n]["bare"])) for n in sizes}
    ratios = {n: v / b for n, (v, b) in med.items()}
    lo, hi = min(sizes), max(sizes)
    slope = ((med[hi][0] - med[lo][0]) / (med[hi][1] - med[lo][1])
             if med[hi][1] > med[lo][1] else float("nan"))
    details = [f"N={n:2d}: start+stop {spread(times[n]['verlprof'])}; bare 2x no-op "
               f"{spread(times[n]['bare'])}; ratio {ratios[n]:.3f}x" for n in sizes]
    armed = sum(1 for s in statuses if s.armed)
    details.append(f"{len(statuses)} actors, every start stopped (left armed: {armed})")
    growth = [f"ratio by N: {', '.join(f'{n}: {ratios[n]:.3f}x' for n in sizes)}",
              f"N {lo}->{hi}: verlprof +{(med[hi][0] - med[lo][0]) / 1e6:.2f} ms, bare "
              f"+{(med[hi][1] - med[lo][1]) / 1e6:.2f} ms: each added actor costs {slope:.2f}x "
              "what it costs the bare fan-out"]
    return [Result(f"P2 start+stop fan-out vs bare Ray no-op fan-out, N={hi}", ratios[hi], GOAL,
                   details=details),
            Result(f"P2 growth: ratio at N={hi} / ratio at N={lo} (grows no faster than bare)",
                   ratios[hi] / ratios[lo], GROWTH_GOAL, details=growth)]


if __name__ == "__main__":
    for result in run():
        print(result.line(), *result.details, sep="\n  ")
