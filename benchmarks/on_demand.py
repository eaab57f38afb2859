"""Capture on demand (issue 28): what being ready for requests costs a running job.

Three rows, each measured side by side in this run:

- **armed-but-idle nsys**: the demo's ``actor_rollout_ref`` phase work, one rank, no Ray
  (:mod:`benchmarks.armed_idle_app`), in a process launched exactly as verlprof launches a
  rank armed by ``trainer.profiler.on_demand.nsys_ranks`` (the plan's argv: ``nsys profile``
  with ``--capture-range-end=repeat`` and the NVTX trigger, every phase an NVTX range, no
  window ever opened) vs the same work in a plain process. Rounds alternate the order
  (armed, plain, plain, armed, ...); the first steps of each process are dropped. Judged on
  the process's own CPU time per step (every thread of it: nsys' injected ones too), not its
  wall time, which the other processes on a shared machine move; the wall ratio is given
  beside it. Published reference: armed-but-idle nsys < 4% (goal 1.04x).
- **serving requests**: a controller with on-demand capture on (in-process ranks,
  :class:`~verlprof.runtime.local_rpc.InProcessRanks`, the request desk in this process)
  runs blocks of steps; in every other block a thread asks it for a window once per second
  (each taken and decided at a step boundary, the rank's plan extended over its RPC; the
  windows asked lie beyond the run, so that the steps measured hold no open window and only
  the serving is timed). Mean step wall time, serving vs quiet blocks (goal 1.03x).
- **request to first window**: requests for ``next:1`` sent at random moments inside a step.
  A window opens at a step boundary, so the wait until the next boundary is the step's own
  remainder, fixed by when the request came and not by verlprof (it made this row read 0.92
  steps in one run and 1.28 in the next, requests sent in the first 4 ms of a 10-13 ms step).
  The row is what the controller adds: from the first boundary after the request to the
  rank's ``verlprof_start`` of its window, in steps, plus one step for each boundary the
  request waited past (goal <= 1 step: the window opens at the next boundary). The whole
  wait, request to window, is printed beside it.

Every wait has a deadline (:mod:`benchmarks.bounds`): a stall is a FAIL row naming it.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import random
import shutil
import statistics
import subprocess
import threading
import time
from typing import Dict, List

from benchmarks.bounds import Stalled, Started, deadline_s
from benchmarks.common import ROOT, WORK_DIR, Result, block_ratios, median, python, spread

APP = os.path.join(ROOT, "benchmarks", "armed_idle_app.py")
GROUP = "actor_rollout_ref"
IDLE_GOAL = 1.04
SERVING_GOAL = 1.03
LATENCY_GOAL = 1.0
TOKEN = "b" * 64


# -- armed but idle -------------------------------------------------------------------------
def armed_plan(output_dir: str):
    """The plan verlprof makes for one rank armed for nsys on demand, nothing planned."""
    from verlprof.config.schema import OnDemandConfig, ProfilingConfig
    from verlprof.config.topology import Topology
    from verlprof.plan import build_plan

    config = ProfilingConfig(tool="nsys", output_dir=output_dir, on_demand=OnDemandConfig(
        enabled=True, nsys_ranks={GROUP: (0,)}))
    return build_plan(config, Topology.of({GROUP: 1}, cuda=False)).process(GROUP, 0)


def run_idle(rounds: int = 6, steps: int = 300, warmup: int = 30, log=print) -> Result:
    out = os.path.join(WORK_DIR, "on_demand_idle")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    process = armed_plan(out)
    if process is None or "--capture-range-end=repeat" not in process.launch_argv:
        raise RuntimeError("the armed plan has no open-ended nsys launch: not the intended set-up")
    with open(os.path.join(out, "plan.pkl"), "wb") as handle:
        pickle.dump(process, handle)
    plain = [python(), APP, str(steps)]
    armed = [*process.launch_argv, python(), APP, str(steps), os.path.join(out, "plan.pkl")]
    env = {**os.environ, **process.launch_env}
    times: Dict[bool, List[float]] = {True: [], False: []}
    cpu: Dict[bool, List[float]] = {True: [], False: []}
    per_round: Dict[bool, List[List[float]]] = {True: [], False: []}
    cpu_round: Dict[bool, List[List[float]]] = {True: [], False: []}
    log(f"armed-but-idle nsys: {rounds} rounds of {steps} steps per process, alternating")
    for r in range(rounds):
        for on in ((True, False) if r % 2 == 0 else (False, True)):
            with Started("on-demand-idle") as started:
                proc = started.popen(armed if on else plain, env=env if on else None,
                                     stdout=subprocess.PIPE, text=True)
                stdout, _ = started.communicate(proc, deadline_s(120, 0.05, steps),
                                                f"{'armed' if on else 'plain'} app, round {r}")
            kept = [line.split()[1:] for line in stdout.splitlines()
                    if line.startswith("step ")][warmup:]
            if len(kept) != steps - warmup:
                raise RuntimeError(f"{'armed' if on else 'plain'} app printed {len(kept)} of "
                                   f"{steps - warmup} steps (exit {proc.returncode})")
            per_round[on].append([float(w) for w, _ in kept])
            cpu_round[on].append([float(c) for _, c in kept])
            times[on] += per_round[on][-1]
            cpu[on] += cpu_round[on][-1]
    leftovers = [n for _, _, names in os.walk(out) for n in names if n.endswith(".nsys-rep")]
    return Result("on-demand: armed-but-idle nsys rank, process CPU time per step vs plain",
                  median(cpu[True]) / median(cpu[False]), IDLE_GOAL,
                  samples=block_ratios(cpu_round[True], cpu_round[False]),
                  details=[f"armed (nsys profile ... --capture-range-end=repeat, no window), "
                           f"process CPU per step: {spread(cpu[True])}",
                           f"plain, process CPU per step: {spread(cpu[False])}",
                           f"wall time per step: armed {spread(times[True])}; plain "
                           f"{spread(times[False])} = "
                           f"{median(times[True]) / median(times[False]):.3f}x (per round "
                           + ", ".join(f"{x:.3f}" for x in block_ratios(per_round[True],
                                                                        per_round[False]))
                           + ")",
                           f"reports written by the idle armed processes: {len(leftovers)} "
                           "(none expected)"])


# -- serving requests -----------------------------------------------------------------------
class _TimedStarts:
    """Records when each rank's ``verlprof_start`` runs (the window opening)."""

    def __init__(self) -> None:
        self.at: List[float] = []


def _controller(output_dir: str, starts: _TimedStarts):
    from verlprof.config.schema import OnDemandConfig, ProfilingConfig
    from verlprof.config.topology import Topology
    from verlprof.demo import workers
    from verlprof.plan import build_plan
    from verlprof.runtime.controller import ProfileController
    from verlprof.runtime.local_rpc import InProcessRanks
    from verlprof.runtime.request_desk import Desk

    class Rank(workers.ActorRolloutRefWorker):
        def verlprof_start(self, *args, **kwargs):
            starts.at.append(time.perf_counter())
            return super().verlprof_start(*args, **kwargs)

    config = ProfilingConfig(tool="torch", output_dir=output_dir, on_demand=OnDemandConfig(
        enabled=True, max_requests_per_hour=100_000, max_reports_per_hour=100_000))
    plan = build_plan(config, Topology.of({GROUP: 2}, cuda=False))
    desk = Desk(TOKEN)
    controller = ProfileController(plan, rpc=InProcessRanks(), echo=False, preflight=False,
                                   handle_signals=False, requests=_LockedChannel(desk))
    ranks = [Rank(r) for r in range(2)]
    controller.register_group(GROUP, ranks)
    return controller, ranks, desk


class _LockedChannel:
    """:class:`~verlprof.runtime.request_desk.LocalChannel` with the asker on another thread
    (the Ray desk is another process; here a lock keeps the queue whole)."""

    def __init__(self, desk) -> None:
        from verlprof.runtime.request_desk import LocalChannel

        self.lock = threading.Lock()
        self.inner = LocalChannel(desk)

    def submit(self, request) -> str:
        with self.lock:
            return self.inner.desk.submit(request)

    def poll(self):
        with self.lock:
            return self.inner.poll()

    def decide(self, decisions) -> None:
        with self.lock:
            self.inner.decide(decisions)

    def progress(self, progress) -> None:
        self.inner.progress(progress)

    def close(self):
        with self.lock:
            return self.inner.close()


def _work(ranks, step: int) -> None:
    import torch

    from verlprof.demo import workers

    prompts = torch.randint(0, workers.VOCAB, (8, 4), generator=torch.Generator().manual_seed(step))
    for rank in ranks:
        seqs = rank.generate_sequences(prompts)
        old = rank.compute_log_prob(seqs)
        rank.compute_ref_log_prob(seqs)
        rank.update_actor(seqs, old, torch.randn(8))


def run_serving(blocks: int = 8, block_s: float = 6.0, probes: int = 6, log=print
                ) -> List[Result]:
    from verlprof.records import CaptureRequest

    out = os.path.join(WORK_DIR, "on_demand_serving")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    starts = _TimedStarts()
    controller, ranks, _ = _controller(out, starts)
    channel = controller._on_demand.channel
    step = 0
    times: Dict[bool, List[float]] = {True: [], False: []}
    blocks_of: Dict[bool, List[List[float]]] = {True: [], False: []}
    asked: List[str] = []
    stop = threading.Event()

    def asker() -> None:  # one request a second, each for a window beyond the run
        while not stop.wait(1.0):
            request = CaptureRequest(id=f"s{len(asked)}", token=TOKEN,
                                     steps=str(10 ** 8 + len(asked)), group=GROUP, ranks=(1,))
            line = channel.submit(request)
            asked.append(line)

    log(f"serving: {blocks} blocks of {block_s:g} s, a request per second in every other one")
    try:
        for b in range(blocks):
            serving = (b % 2 == 0) == (b % 4 < 2)  # serving, quiet, quiet, serving, ...
            thread = threading.Thread(target=asker, daemon=True) if serving else None
            stop.clear()
            if thread:
                thread.start()
            end = time.perf_counter() + block_s
            blocks_of[serving].append([])
            while time.perf_counter() < end:
                step += 1
                t0 = time.perf_counter_ns()
                with controller.step(step):
                    _work(ranks, step)
                times[serving].append(time.perf_counter_ns() - t0)
                blocks_of[serving][-1].append(times[serving][-1])
            stop.set()
            if thread:
                thread.join(deadline_s(10))
                if thread.is_alive():
                    raise Stalled("serving: the asking thread did not stop within 10 s")
        step_s = median(times[False]) / 1e9
        probed = _probes(controller, ranks, channel, starts, probes, step, step_s)
    finally:
        stop.set()
        controller.finalize(timeout_s=deadline_s(60))
    decisions = controller._on_demand.channel.inner.desk.decisions
    accepted = sum(1 for d in decisions.values() if d.accepted)
    refused = [line for line in asked if line]
    serving_row = Result(
        "on-demand: step time serving a request per second vs none (mean)",
        statistics.fmean(times[True]) / statistics.fmean(times[False]), SERVING_GOAL,
        samples=[statistics.fmean(a) / statistics.fmean(b)
                 for a, b in zip(blocks_of[True], blocks_of[False]) if a and b],
        details=[f"serving blocks: {spread(times[True])}, mean "
                 f"{statistics.fmean(times[True]) / 1e6:.2f} ms",
                 f"quiet blocks: {spread(times[False])}, mean "
                 f"{statistics.fmean(times[False]) / 1e6:.2f} ms",
                 f"median ratio {median(times[True]) / median(times[False]):.3f}x (the mean "
                 "counts the steps that decide a request; an outlier of this busy machine "
                 "moves it too)",
                 f"requests sent {len(asked)}, refused at the desk {len(refused)}; decided with "
                 f"the latency probes {len(decisions)}, accepted {accepted}"])
    return [serving_row, latency_row(probed, step_s)]


@dataclasses.dataclass(frozen=True)
class Probe:
    """One request for ``next:1``, timed against the step boundaries (each the moment a step's
    ``controller.step`` was entered)."""

    wait_s: float
    """From the request to the rank's ``verlprof_start``."""
    boundary_s: float
    """From the boundary that opened the window to its ``verlprof_start``."""
    skipped: int
    """Boundaries after the request that did not open its window (0: it opened at the next)."""


def probe(sent: float, boundaries: List[float], started: float) -> Probe:
    """A request taken at a boundary's poll opens at that boundary: the last one entered
    before the window started. Those entered between the request and it were waited past."""
    opened = max(b for b in boundaries if b <= started)
    return Probe(wait_s=started - sent, boundary_s=started - opened,
                 skipped=sum(1 for b in boundaries if sent < b < opened))


def latency_row(probes: List[Probe], step_s: float) -> Result:
    """The row from the probes: each one's boundaries waited past plus what its boundary took
    before the window, in steps of ``step_s`` (a quiet step's median)."""
    added = [p.skipped + p.boundary_s / step_s for p in probes]
    waits = [p.wait_s for p in probes]
    return Result(
        "on-demand: request to its first window, past the next step boundary, in steps",
        median(added), LATENCY_GOAL, goal_text=f"<= {LATENCY_GOAL:g} step (the next boundary)",
        samples=added,
        details=[f"{len(probes)} requests for next:1 at random moments of a step: "
                 f"{sum(1 for p in probes if not p.skipped)} opened at the next boundary; the "
                 f"boundary's work before the window: median "
                 f"{median([p.boundary_s for p in probes]) * 1e3:.2f} ms",
                 f"request to window (the rest of its step included): median "
                 f"{median(waits) * 1e3:.1f} ms = {median(waits) / step_s:.2f} steps, max "
                 f"{max(waits) * 1e3:.1f} ms; a quiet step {step_s * 1e3:.2f} ms"])


def _send(channel, request, sent: List[float]) -> None:
    sent.append(time.perf_counter())
    channel.submit(request)


def _probes(controller, ranks, channel, starts: _TimedStarts, probes: int,
            step: int, step_s: float) -> List[Probe]:
    """Each probe: a request sent at a random moment of a step (uniform over a quiet step's
    length), then steps until rank 1 starts its window (bounded)."""
    from verlprof.records import CaptureRequest

    out: List[Probe] = []
    rng = random.Random(28)
    for n in range(probes):
        seen = len(starts.at)
        sent: List[float] = []
        boundaries: List[float] = []
        request = CaptureRequest(id=f"p{n}", token=TOKEN, steps="next:1", group=GROUP,
                                 ranks=(1,))
        timer = threading.Timer(rng.uniform(0.0, step_s), _send, (channel, request, sent))
        deadline = time.monotonic() + deadline_s(30)
        step += 1
        timer.start()
        while len(starts.at) == seen:
            if time.monotonic() > deadline:
                raise Stalled(f"request to first window: probe {n} opened no window in 30 s")
            boundaries.append(time.perf_counter())
            with controller.step(step):
                _work(ranks, step)
            step += 1
        timer.join()
        out.append(probe(sent[0], boundaries, starts.at[seen]))
        for _ in range(2):  # let the window close before the next probe
            with controller.step(step):
                _work(ranks, step)
            step += 1
    return out


if __name__ == "__main__":
    for row in [run_idle(), *run_serving()]:
        print(row.line(), *row.details, sep="\n  ")
