"""P3: step time of an unselected rank, profiling on (the other ranks under nsys) vs off.

Two demo PPO trainers (the shipped config, :class:`~verlprof.demo.trainer.PPOTrainer`, the
controller in this process) live in one Ray cluster. ON profiles ``actor_rollout_ref`` rank 0
and ``critic`` rank 0 under nsys, one capture over all its steps; OFF profiles nothing (no nsys
anywhere). ``actor_rollout_ref`` rank 1 is unselected in both. The trainers take turns in
blocks of ``block`` steps (ON block, OFF block, OFF block, ON block, ...), so that both see
the same load on this shared machine; the first ``settle`` steps of every block are dropped,
so that a profiler's background work left over from the other trainer's block is not counted.
In both trainers rank 0 is pinned to the first core and rank 1 to the second (each rank of a
GPU node owns its own GPU and cores); everything else runs where the kernel puts it.

The step time is the time rank 1 spends in its own phases per step, measured inside that rank
(:class:`benchmarks.demo_runs.TimedActorRolloutRefWorker`). Medians.
"""

from __future__ import annotations

import os
import shutil
from typing import Dict, List, Sequence

from benchmarks.common import DEMO_CONFIG, WORK_DIR, Result, median, run_standalone, spread
from benchmarks.demo_runs import (
    GROUP,
    MEASURED_RANK,
    TIMES_DIR,
    DemoRun,
    TimedActorRolloutRefWorker,
    overrides,
    read_times,
)
from verlprof.config.topology import HYBRID_ROLES

GOAL = 1.03


def make_trainer(steps: int, on: bool, output_dir: str):
    from verlprof.demo import trainer as demo_trainer
    from verlprof.demo.run import plan_demo

    loaded, plan, _ = plan_demo(DEMO_CONFIG, [*overrides(output_dir, steps, on),
                                       "trainer.controller_nsight_options=null"])
    planned = {(p.group, p.rank) for p in plan.processes}
    if (GROUP, MEASURED_RANK) in planned or on != bool(planned):
        raise RuntimeError(f"P3 plan selects {sorted(planned)}: not the intended set-up")
    saved = dict(demo_trainer.ROLE_CLASSES)
    demo_trainer.ROLE_CLASSES.update(dict.fromkeys(HYBRID_ROLES, TimedActorRolloutRefWorker))
    try:
        return demo_trainer.PPOTrainer(loaded.raw, plan)
    finally:
        demo_trainer.ROLE_CLASSES.update(saved)


def run(blocks: int = 6, block: int = 12, settle: int = 3, demo: Sequence[DemoRun] = (),
        log=print) -> Result:

    out = os.path.join(WORK_DIR, "p3")
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(TIMES_DIR, ignore_errors=True)
    steps = blocks * block
    trainers: Dict[bool, object] = {}
    kept: Dict[bool, List[int]] = {True: [], False: []}
    try:
        for on in (True, False):
            trainers[on] = make_trainer(steps, on, os.path.join(out, "on" if on else "off"))
        log(f"P3: ON and OFF trainers up; {blocks} blocks of {block} steps each, alternating")
        done = {True: 0, False: 0}
        for b in range(blocks):
            for on in ((True, False) if b % 2 == 0 else (False, True)):
                trainer = trainers[on]
                for _ in range(block):
                    done[on] += 1
                    with trainer.controller.step(done[on]):
                        trainer._step(done[on])
                kept[on] += list(range(done[on] - block + settle, done[on]))
        manifest = trainers[True].controller.finalize()
        trainers[False].controller.finalize()
        who = {on: {(p["group"], p["rank"]): p for p in t.worker_identities()}
               for on, t in trainers.items()}
    finally:
        for trainer in trainers.values():
            trainer.shutdown_workers()
    wall = {on: _pick(read_times(who[on], MEASURED_RANK), kept[on], 0) for on in who}
    cpu = {on: _pick(read_times(who[on], MEASURED_RANK), kept[on], 1) for on in who}
    rank0 = {on: _pick(read_times(who[on], 0), kept[on], 0) for on in who}
    wrapped = sorted(f"{g} rank {r}" for (g, r), p in who[True].items() if p.get("under_profiler"))
    ok = sum(1 for r in manifest.reports if r.status == "ok")
    details = [f"on  (under nsys: {', '.join(wrapped)}): {spread(wall[True])}",
               f"off (no profiler anywhere): {spread(wall[False])}",
               f"CPU time of rank 1 in the same phases: on {median(cpu[True]) / 1e6:.2f} ms, "
               f"off {median(cpu[False]) / 1e6:.2f} ms = "
               f"{median(cpu[True]) / median(cpu[False]):.3f}x",
               f"selected rank 0 (context, pinned to the other core): on "
               f"{median(rank0[True]) / 1e6:.2f} ms, off {median(rank0[False]) / 1e6:.2f} ms",
               f"ON trainer wrote {ok}/{len(manifest.reports)} reports ok; first {settle} steps of "
               f"each block dropped"]
    if demo:
        details.append(_whole_runs(demo))
    return Result(f"P3 unselected rank ({GROUP} rank {MEASURED_RANK}) step time, profiling on "
                  "vs off", median(wall[True]) / median(wall[False]), GOAL, details=details)


def _pick(rows: List[tuple], steps: List[int], column: int) -> List[float]:
    """Values of 1-indexed ``steps`` (a row per step, in step order)."""
    return [rows[s - 1][column] for s in steps if s - 1 < len(rows)]


def _whole_runs(runs: Sequence[DemoRun], warmup: int = 5) -> str:
    """The same comparison from the whole demo runs (their processes differ: noisier)."""
    med = {on: [median(r.wall_ns[warmup:]) for r in runs if r.on == on and r.wall_ns[warmup:]]
           for on in (True, False)}
    if not med[True] or not med[False]:
        return "whole demo runs: no step times"
    return (f"cross-check, whole demo runs (controller under nsys too; separate processes): "
            f"rank 1 median on {', '.join(f'{v / 1e6:.2f}' for v in med[True])} ms, off "
            f"{', '.join(f'{v / 1e6:.2f}' for v in med[False])} ms = "
            f"{median(med[True]) / median(med[False]):.3f}x")


if __name__ == "__main__":
    run_standalone(run)
