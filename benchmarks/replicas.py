"""P5 and P3 on verl's rollout replicas (issue 26): the stand-in engine's servers, driven by
verl 0.9.1's real ``LLMServerManager`` / ``RolloutReplica`` classes, profiled through
verlprof's bridge (:mod:`benchmarks.replicas_app`, in a process and Ray cluster of its own:
verl's resource pools ask for GPUs, which the cluster declares as logical ones).

- P5 on a replica: what a profiled step (nsys, whole step, replica 0 under nsys, the odd steps)
  adds to the step's wall time, profiled steps' medians minus unprofiled ones', against the
  bounds used for trainer ranks (:func:`benchmarks.p5_stall.stall`): exit <= 2 bare Ray
  round trips to the replica's server; entry <= nsys' own start floor on the same schedule
  (measured in bare processes under the replica's own nsys argv, windows as long as the
  run's steps) + 2 round trips.
- P3 on a replica: the unselected replica 1 (another replica of the same manager under nsys)
  in profiled steps, vs replica 1 of a second manager with no verlprof at all; goal P3's
  (:data:`benchmarks.p3_unselected.GOAL`). Judged on its process CPU time with both managers
  generating at once (the same neighbours, the same moments: pair by pair, as P3 on training
  ranks); its generate time at once is the second row; the blocks in turns are context.

The first step of every block is dropped from both. Medians.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from typing import Any, Dict, List

from benchmarks.bounds import deadline_s, run_bounded
from benchmarks.common import ROOT, Result, block_ratios, chunks, median, paired_ratios, spread
from benchmarks.p3_unselected import GOAL as P3_GOAL
from benchmarks.p5_stall import stall, stall_samples
from benchmarks.replicas_app import RESULT

REQUESTS = 8
"""Generate calls per replica per step (about 20 ms of generation: P5's step)."""

SAMPLES = 4
"""The side-by-side rows' samples: their window-open steps in four runs of consecutive steps
(each run holds both orders of sending alike, see :mod:`benchmarks.replicas_app`)."""


def _per_sample(count: int) -> int:
    return max(1, -(-count // SAMPLES))


def run(rounds: int = 4, block: int = 8, together: int = 16, log=print) -> List[Result]:
    work = tempfile.mkdtemp(prefix="verlprof-bench-replicas-")
    try:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
        done = run_bounded(
            "replicas", [sys.executable, "-m", "benchmarks.replicas_app", work, str(rounds),
                         str(block), str(REQUESTS), str(together)],
            deadline_s(240, 3.0, rounds * block + together),
            "replicas: verl's replicas, ON and OFF",
            env=env, cwd=ROOT)
        line = next((x for x in done.stdout.splitlines() if x.startswith(RESULT)), None)
        if line is None:
            raise RuntimeError(f"replicas app exit {done.returncode}: {done.stderr[-400:]}")
        got = json.loads(line[len(RESULT):])
        steps = rounds * block
        kept = [s for s in range(1, steps + 1) if (s - 1) % block]  # each block's first out
        profiled = [s for s in kept if s % 2 == 1]
        unprofiled = [s for s in kept if s % 2 == 0]
        floor = got["floor"]
        log(f"replicas: capture-range start in bare processes under replica 0's nsys: alone "
            f"{floor['alone'] * 1e3:.1f} ms, windows of {floor['step_s'] * 1e3:.1f} ms as far "
            f"apart {floor['schedule'] * 1e3:.1f} ms (medians of 3)")
        return [_p5(got, floor, profiled, unprofiled),
                _cpu_side_by_side(got, steps, _in_turns(got, kept, profiled, block)),
                _together(got, steps)]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _p5(got: Dict[str, Any], floor: Dict[str, float], profiled: List[int],
        unprofiled: List[int]) -> Result:
    added = stall(got["times"] | {"bare": got["bare"]}, floor, profiled, unprofiled)
    reports = [r for r in got["manifest"]["reports"] if r["group"] == "rollout_replicas"]
    wrapped = sorted(f"{p['group']} rank {p['rank']}" for p in got["manifest"]["processes"]
                     if p.get("under_profiler"))
    problems = [f"{r['path']}: {r['status']} ({r.get('reason')})" for r in reports
                if r["status"] != "ok"]
    if len(reports) != len(got["manifest"]["step_windows"]):
        problems.append(f"{len(reports)} replica reports for "
                        f"{len(got['manifest']['step_windows'])} windows")
    if "rollout_replicas rank 1" in wrapped:
        problems.append("the unselected replica ran under the profiler")
    details = [added.detail(floor),
               f"inside the step (replica 0 generating under a live nsys window): "
               f"+{added.body_added * 1e3:.1f} ms",
               f"{len(profiled)} profiled steps vs {len(unprofiled)} unprofiled, "
               f"{REQUESTS} requests per replica per step; under a profiler: "
               f"{', '.join(wrapped) or 'nothing'}; {len(reports) - len(problems)}/{len(reports)}"
               " replica reports ok"]
    details += [f"problem: {p}" for p in problems]
    return Result("P5 replica: step time added by profiling (whole, stand-in rollout replica "
                  "under nsys) vs its goal", added.ratio if not problems else None, 1.0,
                  details=details, note="; ".join(problems[:2]),
                  samples=stall_samples(got["times"] | {"bare": got["bare"]}, floor, profiled,
                                        unprofiled))


def _per_engine_ms(process: List[float], engine: List[float]) -> float:
    return median([p / e for p, e in zip(process, engine) if e])


def _in_turns(got: Dict[str, Any], kept: List[int], profiled: List[int], block: int
              ) -> List[str]:
    """The unselected replica in the blocks that take turns (profiled steps vs every OFF
    step), context for the CPU row: its process CPU (the core's speed beside each side's
    neighbours included), generate time (wall), its engine thread's CPU time, and Ray's
    threads while the controller opens replica 0's windows."""
    times = got["times"]

    def by_round(key: str, steps: List[int], pick=lambda v: v) -> List[List[float]]:
        rounds: Dict[int, List[float]] = {}
        for s in steps:
            if str(s) in times[key]:
                rounds.setdefault((s - 1) // block, []).append(pick(times[key][str(s)]))
        return [rounds[r] for r in sorted(rounds)]

    on = [times["on"][str(s)][1] for s in profiled]
    on_all = [times["on"][str(s)][1] for s in kept]
    off = [times["off"][str(s)][1] for s in kept]
    cpu_on = [times["cpu_on"][str(s)] for s in profiled]
    cpu_off = [times["cpu_off"][str(s)] for s in kept]
    pcpu_on = [times["pcpu_on"][str(s)] for s in profiled]
    pcpu_off = [times["pcpu_off"][str(s)] for s in kept]
    selected = {side: median([times[side][str(s)][0] for s in steps])
                for side, steps in (("on", profiled), ("off", kept))}
    rounds = block_ratios(by_round("pcpu_on", profiled), by_round("pcpu_off", kept))
    details = [f"in turns ({len(rounds)} rounds of a block each side, the core's speed beside "
               f"each side's neighbours included): process CPU per step on "
               f"{median(pcpu_on) * 1e3:.2f} ms, off {median(pcpu_off) * 1e3:.2f} ms = "
               f"{median(pcpu_on) / median(pcpu_off):.3f}x (per round "
               + ", ".join(f"{r:.2f}" for r in rounds) + ")",
               f"in turns, generate time (wall): on {median(on) * 1e3:.2f} ms, off "
               f"{median(off) * 1e3:.2f} ms = {median(on) / median(off):.3f}x; every ON step, "
               "windows open or not: "
               f"{median(on_all) / median(off):.3f}x",
               f"CPU time of replica 1's engine thread in the same steps: on "
               f"{median(cpu_on) * 1e3:.2f} ms, off {median(cpu_off) * 1e3:.2f} ms = "
               f"{median(cpu_on) / median(cpu_off):.3f}x (the same requests: how much "
               "slower the core ran its work)",
               # the engine thread is the stand-in engine's, which verlprof never touches: its
               # CPU for the same work gauges the core's speed at those moments
               f"process CPU per ms of the engine thread's, on vs off: "
               f"{_per_engine_ms(pcpu_on, cpu_on) / _per_engine_ms(pcpu_off, cpu_off):.3f}x "
               "(what the process did beyond its work, at the speed the core ran)",
               f"selected replica 0 (context, the other core): on {selected['on'] * 1e3:.2f} "
               f"ms, off {selected['off'] * 1e3:.2f} ms"]
    edges = [times["edges"][str(s)] for s in profiled if str(s) in times.get("edges", {})]
    if edges and got.get("idle_cpu"):
        cpu_s, wall_s = sum(e[0] for e in edges), sum(e[1] for e in edges)
        details.append(f"while the controller opens and closes replica 0's windows "
                       f"(begin_step, end_step: {wall_s / len(edges) * 1e3:.0f} ms a step) "
                       f"replica 1's process uses {cpu_s / wall_s * 100:.2f}% of a core; idle, "
                       f"{got['idle_cpu']['on'] * 100:.2f}% (ON) and "
                       f"{got['idle_cpu']['off'] * 100:.2f}% (OFF)")
    return details


def _cpu_side_by_side(got: Dict[str, Any], first: int, context: List[str]) -> Result:
    """Judged on the two unselected replicas' process CPU over the same spans (ON's step,
    begin_step to end_step, with OFF's requests sent at once: the same neighbours), pair by
    pair over the steps with replica 0's window open: the median of ON / OFF. Samples:
    :data:`SAMPLES`, each of consecutive pairs. ``context``: the blocks in turns."""
    cpu = {int(s): v for s, v in got["times"].get("together_cpu", {}).items()}
    steps = [s for s in sorted(cpu) if s > first + 1 and s % 2 == 1 and cpu[s][1]]
    metric = "P3 unselected replica (rollout replica 1) process CPU time per step, profiling " \
             "on vs off"
    if not steps:
        return Result(metric, None, P3_GOAL, note="no steps side by side", details=context)
    size = _per_sample(len(steps))
    on, off = [cpu[s][0] for s in steps], [cpu[s][1] for s in steps]
    ratio, samples = paired_ratios(on, off, size)
    first_side = {int(s): side for s, side in got["times"].get("together_first", {}).items()}
    orders = [f"{side} sent first {median(by):.3f}x ({len(by)} of {len(steps)} pairs)"
              for side in ("on", "off")
              if (by := [cpu[s][0] / cpu[s][1] for s in steps if first_side.get(s) == side])]
    return Result(metric, ratio, P3_GOAL, samples=samples,
                  details=[f"on (replica 1 of the profiled manager, replica 0 under nsys, its "
                           f"window open): {_ms(on)}",
                           f"off (replica 1 of plain verl, the same spans): {_ms(off)}",
                           f"{len(steps)} steps side by side, one sample per {size}; the "
                           "ratio: median of each span's ON / OFF; ratio of the medians "
                           f"{median(on) / median(off):.3f}x",
                           *([f"by the side whose requests went first: {'; '.join(orders)}"]
                             if orders else []), *context])


def _together(got: Dict[str, Any], first: int) -> Result:
    """The steps after ``first`` in which ON and OFF generated at once: replica 1 of ON (its
    neighbour replica 0 under nsys, the window open on the odd steps) vs replica 1 of OFF,
    both beside the same three other replicas. Samples: :data:`SAMPLES`, of consecutive
    steps."""
    rows = {int(s): v for s, v in got["times"].get("together", {}).items()}
    steps = sorted(s for s in rows if s > first + 1)  # the first one warms the pairing
    profiled = [s for s in steps if s % 2 == 1]
    ratio = [rows[s][1] / rows[s][3] for s in profiled]
    if not ratio:
        return Result("P3 unselected replica, both sides at once (same neighbours): generate "
                      "time, profiling on vs off", None, P3_GOAL, note="no steps side by side")
    groups = chunks(profiled, _per_sample(len(profiled)))
    samples = block_ratios([[rows[s][1] for s in c] for c in groups],
                           [[rows[s][3] for s in c] for c in groups])
    every = [rows[s][1] / rows[s][3] for s in steps]
    return Result("P3 unselected replica, both sides at once (same neighbours): generate "
                  "time, profiling on vs off",
                  median([rows[s][1] for s in profiled]) / median([rows[s][3] for s in profiled]),
                  P3_GOAL, samples=samples,
                  details=[f"on  (replica 1 of the profiled manager, replica 0's window open): "
                           f"{_ms([rows[s][1] for s in profiled])}",
                           f"off (replica 1 of plain verl, the same moments): "
                           f"{_ms([rows[s][3] for s in profiled])}",
                           f"every step side by side, windows open or not: median of the step "
                           f"ratios {median(every):.3f}x over {len(steps)} steps",
                           f"selected replica 0 in the same steps: "
                           f"{median([rows[s][0] for s in profiled]) * 1e3:.2f} ms"])


def _ms(seconds: List[float]) -> str:
    return spread([s * 1e9 for s in seconds])


if __name__ == "__main__":
    for row in run():
        print(row.line(), *row.details, sep="\n  ")
