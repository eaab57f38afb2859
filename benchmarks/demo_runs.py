"""Whole runs of the demo trainer (``verlprof demo``'s own ``run_trainer``): Memory, and a
cross-check of P3.

Each run is the shipped PPO config with ``actor_rollout_ref`` rank 1 left unselected: ON
profiles ``actor_rollout_ref`` rank 0 and ``critic`` rank 0 under nsys over every step (one
continuous capture) and runs the controller under nsys, as the demo does; OFF sets
``trainer.profile_steps=null``. Runs alternate ON, OFF, ON, OFF, each a whole trainer with its
own processes. Recorded per run: the controller's peak RSS (``ru_maxrss`` of the controller
process, read by itself when ``fit`` returns) and, per step, the time each rank of
``actor_rollout_ref`` spends in its own phases (wall and CPU, measured inside the rank).
"""

from __future__ import annotations

import os
import resource
import shutil
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List

import ray

from benchmarks.common import DEMO_CONFIG, WORK_DIR
from verlprof.config.topology import HYBRID_ROLES
from verlprof.demo.workers import ActorRolloutRefWorker

GROUP, MEASURED_RANK = "actor_rollout_ref", 1
TIMES_DIR = os.path.join(WORK_DIR, "rank_times")


class TimedActorRolloutRefWorker(ActorRolloutRefWorker):
    """The demo's hybrid worker; per step (ending with ``update_actor``) it appends the wall
    and CPU nanoseconds spent in its four phases, then the process's CPU time so far (every
    thread of it: Ray's, verlprof's, nsys' injection if any) and the wall clock, to
    ``TIMES_DIR/rank<r>_<pid>.txt``. The timing sits outside ``annotate`` and costs the same
    in both runs."""

    _wall = _cpu = 0

    def __init__(self, rank: int, *args: Any, **kwargs: Any):
        super().__init__(rank, *args, **kwargs)
        # each rank on its own core, as each rank of a GPU node owns its GPU and cores; the
        # other processes (controller, critic, rm, Ray, nsys) run where the kernel puts them
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[rank % len(cpus)]})

    def _timed(self, method, *args):
        wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
        try:
            return method(*args)
        finally:
            self._wall += time.perf_counter_ns() - wall
            self._cpu += time.thread_time_ns() - cpu

    def generate_sequences(self, prompts):
        return self._timed(super().generate_sequences, prompts)

    def compute_log_prob(self, seqs):
        return self._timed(super().compute_log_prob, seqs)

    def compute_ref_log_prob(self, seqs):
        return self._timed(super().compute_ref_log_prob, seqs)

    def update_actor(self, seqs, old_log_prob, advantages):
        try:
            return self._timed(super().update_actor, seqs, old_log_prob, advantages)
        finally:
            os.makedirs(TIMES_DIR, exist_ok=True)
            with open(os.path.join(TIMES_DIR, f"rank{self.rank}_{os.getpid()}.txt"), "a") as f:
                f.write(f"{self._wall} {self._cpu} {time.process_time_ns()} "
                        f"{time.perf_counter_ns()}\n")
            self._wall = self._cpu = 0


@ray.remote(num_cpus=0)
class BenchTaskRunner:
    """The demo's TaskRunner with the timed hybrid worker, reporting its own peak RSS."""

    def identity(self) -> Dict[str, Any]:
        from verlprof.worker import process_identity

        return process_identity()

    def run(self, settings: Any, plan: Any, *args: Any) -> Dict[str, Any]:
        """``settings``: the demo's ``DemoSettings``; ``plan``: the ``ProfilePlan``."""
        from verlprof.demo import trainer

        # this process only: the hybrid roles run the timed class
        trainer.ROLE_CLASSES.update(dict.fromkeys(HYBRID_ROLES, TimedActorRolloutRefWorker))
        result = trainer.PPOTrainer(settings, plan).fit()
        result["peak_rss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return result


@dataclass
class DemoRun:
    on: bool
    seconds: float
    peak_rss_kib: int
    wall_ns: List[int] = field(default_factory=list)
    """Rank 1's time in its phases, per step."""
    cpu_ns: List[int] = field(default_factory=list)
    selected_wall_ns: List[int] = field(default_factory=list)
    """The same for rank 0 (selected in ON runs), for context."""
    reports_ok: int = 0
    reports: int = 0
    wrapped: List[str] = field(default_factory=list)


def overrides(output_dir: str, steps: int, on: bool) -> List[str]:
    common = [f"trainer.profiler.output_dir={output_dir}", f"trainer.total_training_steps={steps}",
              "actor_rollout_ref.actor.profile_ranks=[0]",
              "actor_rollout_ref.rollout.profile_ranks=[0]", "critic.profile_ranks=[0]"]
    if not on:
        return [*common, "trainer.profile_steps=null"]
    return [*common, f"trainer.profile_steps=[{','.join(str(s) for s in range(1, steps + 1))}]",
            "trainer.profile_continuous_steps=true"]


def run_once(on: bool, steps: int, output_dir: str) -> DemoRun:
    from verlprof.demo.run import plan_demo, run_trainer

    loaded, plan, _ = plan_demo(DEMO_CONFIG, overrides(output_dir, steps, on))
    planned = {(p.group, p.rank) for p in plan.processes}
    if (GROUP, MEASURED_RANK) in planned or on != bool(planned):
        raise RuntimeError(f"demo plan selects {sorted(planned)}: not the intended set-up")
    shutil.rmtree(TIMES_DIR, ignore_errors=True)
    began = time.perf_counter()
    result = run_trainer(loaded, plan, runner_class=BenchTaskRunner)
    seconds = time.perf_counter() - began
    who = {(p["group"], p["rank"]): p for p in result["processes"]}
    rows, selected = read_times(who, MEASURED_RANK), read_times(who, 0)
    reports = result["manifest"]["reports"]
    return DemoRun(on, seconds, int(result["peak_rss_kib"]), [r[0] for r in rows],
                   [r[1] for r in rows], [r[0] for r in selected],
                   sum(1 for r in reports if r["status"] == "ok"), len(reports),
                   sorted(f"{g} rank {r}" for (g, r), p in who.items()
                          if p.get("under_profiler")))


def read_times(who: Dict[Any, Dict[str, Any]], rank: int) -> List[tuple]:
    """(wall ns, CPU ns in the phases, process CPU ns so far, clock ns) per step of ``rank``
    of the hybrid group (``who``: identities by (group, rank), from ``verlprof_status``)."""
    path = os.path.join(TIMES_DIR, f"rank{rank}_{who[(GROUP, rank)]['pid']}.txt")
    if not os.path.exists(path):
        return []
    with open(path) as handle:
        return [tuple(int(x) for x in line.split()) for line in handle if line.strip()]


def run_pairs(pairs: int = 1, steps: int = 40, log=print) -> List[DemoRun]:
    """ON, OFF, ON, OFF, ... (``pairs`` of each); Ray is started here unless it runs."""
    started = not ray.is_initialized()
    if started:
        ray.init(include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    runs = []
    try:
        for i in range(pairs):
            for on in (True, False):
                out = os.path.join(WORK_DIR, "demo_runs", f"{'on' if on else 'off'}{i}")
                shutil.rmtree(out, ignore_errors=True)
                runs.append(run_once(on, steps, out))
                last = runs[-1]
                log(f"demo run {'ON ' if on else 'OFF'} #{i + 1}: {last.seconds:.0f} s, "
                    f"controller peak RSS {last.peak_rss_kib / 1024:.0f} MiB, "
                    f"{len(last.wall_ns)} steps timed on rank {MEASURED_RANK}")
    finally:
        if started:
            ray.shutdown()
    return runs
