"""P5 with per-window placement on vs off: what moving a closed window's reports while the job
runs (``verlprof.runtime.placement``) adds to the training loop.

Two CPU ranks of ``actor_rollout_ref``, both profiled with the torch profiler (it writes each
window's trace when the window closes, so the placement thread has files to move during the
run; an nsys 2022.4 session writes its ``repeat:N`` reports only when its last window closes),
a step of two phases doing a little torch work (traces of a few hundred KB), every other step
profiled. The controller runs in a Ray actor; the same loop runs with placement on and off,
alternating (off, on, off, on) in one benchmark run. Each step's wall time is timed as the
trainer sees it (``with controller.step(n)`` around the phases).

Ratio: the profiled steps' median wall time, placement on / off (goal <= 1.05x); its samples:
the same ratio per pair of runs (off then on) and half of their steps, so that the row shows its
noise (two runs of the same code once read 0.94x and 1.19x). Also shown:
the median of every step (the placement thread works during the steps after a window) and the
added time of a profiled step (profiled minus unprofiled medians) in each mode.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Any, Dict, List

from benchmarks.bounds import deadline_s, ray_get
from benchmarks.common import DEMO_CONFIG, Result, block_ratios, chunks, median, run_standalone
from verlprof.worker import ProfilingWorkerMixin, annotate

STEPS = 24
"""Steps per run: the odd ones are profiled (12 windows), the even ones the baseline."""
RUNS = 2
"""Runs per mode, alternating."""


class PlacedWorker(ProfilingWorkerMixin):
    """One rank: two phases of small matrix products per step."""

    def __init__(self, rank: int):
        self.rank = rank

    def noop(self) -> None:
        return None

    def _work(self) -> float:
        import torch

        x = torch.ones(64, 64)
        for _ in range(40):
            x = torch.tanh(x @ x / 64)
        return float(x.sum())

    @annotate("actor")
    def compute_log_prob(self, step: int) -> float:
        return self._work()

    @annotate("actor")
    def update_actor(self, step: int) -> float:
        return self._work()


def make_plan(output_dir: str, placing: bool):
    """The demo's plan; placement off is ``trainer.profiler.place=at_end``, as a user sets it."""
    from verlprof.demo.run import plan_demo

    _, plan, _ = plan_demo(DEMO_CONFIG, [
        f"trainer.profiler.output_dir={output_dir}", f"trainer.total_training_steps={STEPS}",
        f"trainer.profile_steps=[{','.join(str(s) for s in range(1, STEPS + 1, 2))}]",
        "trainer.profiler.tool=torch", "trainer.n_gpus_per_node=2",
        "actor_rollout_ref.actor.profile_ranks=[0,1]",
        "actor_rollout_ref.rollout.profile_ranks=[]", "critic.enable=false",
        "reward_model.enable=false", "trainer.controller_nsight_options=null",
        f"trainer.profiler.place={'per_window' if placing else 'at_end'}"])
    return plan


def run_loop(plan_dict: Dict[str, Any]) -> Dict[str, Any]:
    """The trainer loop inside the controller's process: each step's wall time, how many
    reports were placed while it ran, and the final manifest's statuses."""
    import ray

    from verlprof.plan import ProfilePlan
    from verlprof.runtime.controller import ProfileController
    from verlprof.runtime.ray_options import worker_options

    plan = ProfilePlan.from_dict(plan_dict)
    controller = ProfileController(plan, echo=False, preflight="quick")
    cls = ray.remote(num_cpus=0)(PlacedWorker)
    actors = [cls.options(**worker_options(plan, "actor_rollout_ref", r)).remote(r)
              for r in range(2)]
    ray.get([a.noop.remote() for a in actors], timeout=300)
    controller.register_group("actor_rollout_ref", actors)
    wall: Dict[int, float] = {}
    try:
        for step in range(1, STEPS + 1):
            t0 = time.perf_counter()
            with controller.step(step):
                for phase in ("compute_log_prob", "update_actor"):
                    ray_get([getattr(a, phase).remote(step) for a in actors],
                            deadline_s(60, 5.0, len(actors)), f"P5 placement: step {step}")
            wall[step] = time.perf_counter() - t0
        placed = controller.placed_while_running
        manifest = controller.finalize()
    finally:
        refs = [a.__ray_terminate__.remote() for a in actors]
        ray.wait(refs, num_returns=len(refs), timeout=60)
    return {"wall": wall, "placed": placed,
            "statuses": sorted({e.status for e in manifest.reports}),
            "bytes": sum(e.bytes for e in manifest.reports)}


def run(log=print) -> List[Result]:
    import ray

    from verlprof.runtime.ray_options import controller_options

    work = tempfile.mkdtemp(prefix="verlprof-bench-p5p-")
    got: Dict[bool, List[Dict[str, Any]]] = {False: [], True: []}
    try:
        for n in range(RUNS):
            for placing in (False, True):
                plan = make_plan(os.path.join(work, f"r{n}p{int(placing)}"), placing)
                runner = ray.remote(num_cpus=0)(run_loop).options(**controller_options(plan))
                got[placing].append(ray.get(runner.remote(plan.to_dict()),
                                            timeout=600))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = _result(got)
    log(result.line())
    return [result]


def _result(got: Dict[bool, List[Dict[str, Any]]]) -> Result:
    prof = [s for s in range(3, STEPS + 1, 2)]  # step 1: warm-up
    base = [s for s in range(2, STEPS + 1, 2)]

    def steps(placing: bool, which: List[int]) -> List[float]:
        return [run["wall"][s] for run in got[placing] for s in which]

    on, off = median(steps(True, prof)), median(steps(False, prof))
    every = {p: median(steps(p, prof + base)) for p in (False, True)}
    added = {p: median(steps(p, prof)) - median(steps(p, base)) for p in (False, True)}
    placed = [run["placed"] for run in got[True]]
    problems = [f"{'on' if p else 'off'}: statuses {run['statuses']}" for p in (False, True)
                for run in got[p] if run["statuses"] != ["ok"]]
    details = [f"profiled step (median of {len(prof)} x {RUNS} runs): on {on * 1e3:.1f} ms, "
               f"off {off * 1e3:.1f} ms",
               f"every step after the warm-up: on {every[True] * 1e3:.1f} ms, off "
               f"{every[False] * 1e3:.1f} ms ({every[True] / every[False]:.3f}x)",
               f"added by a profiled step: on +{added[True] * 1e3:.1f} ms, off "
               f"+{added[False] * 1e3:.1f} ms",
               f"reports placed while running: {placed} of {STEPS // 2 * 2} per run; "
               f"{got[True][0]['bytes'] / 1e6:.1f} MB of reports per run",
               "2 torch-profiled CPU ranks; runs alternate off, on; a shared 2-core machine: "
               "noisy"] + problems
    halves = chunks(prof, (len(prof) + 1) // 2)
    samples = block_ratios(*([[run["wall"][s] for s in half] for run in got[placing]
                              for half in halves] for placing in (True, False)))
    return Result("P5 profiled step, placement on vs off", on / off if not problems else None,
                  1.05, details=details, note="; ".join(problems[:2]), samples=samples)


if __name__ == "__main__":
    run_standalone(run)
