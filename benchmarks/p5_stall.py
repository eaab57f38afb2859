"""P5: what a profiled step adds to the training loop's wall time (the "gap between steps").

Two CPU ranks of ``actor_rollout_ref``, rank 0 under nsys (NVTX trigger), a 20 ms step (one
annotated phase per rank), every other step profiled. The controller runs in a Ray actor, once
as a plain process and once under the plan's controller nsys argv, in whole-step and in
discrete mode. For each step it times the entry of ``with controller.step(n)`` (up to the
body) and the exit (after the body); what a profiled step adds is the median over profiled
steps minus the median over unprofiled ones, measured in the same run.

Goals (issue 14), against figures measured in this run:
- exit added <= 2 bare Ray round trips to the planned ranks;
- entry added <= the start latency of a capture range in a bare process under nsys (the floor:
  collection must have started before the step's work) + 2 round trips;
- each report holds exactly its window: its sqlite has the phase of its own step only.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Sequence, Tuple

from benchmarks.bounds import Started, deadline_s, ray_get
from benchmarks.common import DEMO_CONFIG, ROOT, Result, median, run_standalone
from verlprof.worker import ProfilingWorkerMixin, annotate

STEP_S = 0.02
STEPS = 10
"""Steps per run: the odd ones are profiled (5 windows), the even ones are the baseline."""

APP = os.path.join(ROOT, "benchmarks", "p5_capture_app.py")


class StallWorker(ProfilingWorkerMixin):
    """One rank: two 10 ms phases per step, and a no-op for the bare round trip."""

    def __init__(self, rank: int):
        self.rank = rank

    def noop(self) -> None:
        return None

    @annotate("actor")
    def compute_log_prob(self, step: int) -> int:
        time.sleep(STEP_S / 2)
        return step

    @annotate("actor")
    def update_actor(self, step: int) -> int:
        time.sleep(STEP_S / 2)
        return step


def overrides(output_dir: str, discrete: bool, controller_nsys: bool) -> List[str]:
    return [f"trainer.profiler.output_dir={output_dir}", f"trainer.total_training_steps={STEPS}",
            f"trainer.profile_steps=[{','.join(str(s) for s in range(1, STEPS + 1, 2))}]",
            "trainer.profiler.tool=nsys", "trainer.n_gpus_per_node=2",
            "actor_rollout_ref.actor.profile_ranks=[0]",
            f"actor_rollout_ref.actor.profile_discrete={str(discrete).lower()}",
            "actor_rollout_ref.rollout.profile_ranks=[]", "critic.enable=false",
            "reward_model.enable=false"] + \
        ([] if controller_nsys else ["trainer.controller_nsight_options=null"])


def make_plan(output_dir: str, discrete: bool, controller_nsys: bool):
    from verlprof.demo.run import plan_demo

    _, plan, _ = plan_demo(DEMO_CONFIG, overrides(output_dir, discrete, controller_nsys))
    return plan


def run_loop(plan_dict: Dict[str, Any]) -> Dict[str, Any]:
    """The trainer loop, inside the controller's process: timings, then the manifest."""
    import ray

    from verlprof.plan import ProfilePlan
    from verlprof.runtime.controller import ProfileController
    from verlprof.runtime.ray_options import worker_options

    plan = ProfilePlan.from_dict(plan_dict)
    controller = ProfileController(plan, echo=False, preflight="quick")
    cls = ray.remote(num_cpus=0)(StallWorker)
    actors = [cls.options(**worker_options(plan, "actor_rollout_ref", r)).remote(r)
              for r in range(2)]
    ray.get([a.noop.remote() for a in actors], timeout=300)
    controller.register_group("actor_rollout_ref", actors)
    planned = [actors[0]]
    enter: Dict[int, float] = {}
    body: Dict[int, float] = {}
    exit_: Dict[int, float] = {}
    bare: List[float] = []
    try:
        for step in range(1, STEPS + 1):
            t0 = time.perf_counter()
            with controller.step(step):
                t1 = time.perf_counter()
                for phase in ("compute_log_prob", "update_actor"):
                    ray_get([getattr(a, phase).remote(step) for a in actors],
                            deadline_s(60, 5.0, len(actors)), f"P5: step {step}'s {phase}")
                t2 = time.perf_counter()
            t3 = time.perf_counter()
            enter[step], body[step], exit_[step] = t1 - t0, t2 - t1, t3 - t2
            b0 = time.perf_counter()  # a bare round trip to the planned rank, between steps
            ray.get([a.noop.remote() for a in planned], timeout=deadline_s(30))
            bare.append(time.perf_counter() - b0)
        manifest = controller.finalize()
    finally:
        refs = [a.__ray_terminate__.remote() for a in actors]
        ray.wait(refs, num_returns=len(refs), timeout=60)
        controller.wait_for_profilers(60)
    return {"enter": enter, "body": body, "exit": exit_, "bare": bare,
            "manifest": manifest.to_dict()}


def capture_start_floor(sessions: Sequence[Tuple[Sequence[str], Dict[str, str]]],
                        workdir: str, step_s: float = STEP_S) -> Dict[str, float]:
    """Median start latency of a capture range in bare processes, one under each nsys argv of
    ``sessions`` at once (meeting at a barrier before each series): ``alone`` (the previous
    end has returned) and ``schedule`` (windows of ``step_s``, as many seconds apart). With
    several sessions, the slowest one's median: a step's entry waits for every window it
    opens."""
    out = os.path.join(workdir, f"floor{len(sessions)}")
    barrier = os.path.join(out, "barrier")
    os.makedirs(barrier, exist_ok=True)
    medians: Dict[str, List[float]] = {}
    with Started("p5-floor") as started:  # nsys sessions: ended by pid should one stall
        procs = []
        for n, (argv, env) in enumerate(sessions):
            argv = [a if not a.startswith("--output=") else f"--output={out}/floor{n}_%p"
                    for a in argv]
            procs.append(started.popen(
                [*argv, sys.executable, APP, str(step_s), barrier, str(len(sessions))],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                env={**os.environ, **env}, cwd=ROOT))
        for proc in procs:
            stdout, stderr = started.communicate(
                proc, deadline_s(120, 30.0, len(sessions)),
                f"P5: a capture app under nsys ({len(sessions)} session(s))")
            got: Dict[str, List[float]] = {}
            for line in stdout.splitlines():
                kind, _, value = line.partition(" ")
                if kind in ("alone", "schedule"):
                    got.setdefault(kind, []).append(float(value))
            if set(got) != {"alone", "schedule"}:
                raise RuntimeError(f"capture app printed no timings: {stdout[-300:]}"
                                   f"{stderr[-300:]}")
            for kind, values in got.items():
                medians.setdefault(kind, []).append(median(values))
    floor = {kind: max(values) for kind, values in medians.items()}
    floor["sessions"] = float(len(sessions))
    return floor


def window_check(output_dir: str, manifest: Dict[str, Any]) -> List[str]:
    """Problems: a report that is not ok, or whose phases are not exactly its own step's."""
    from verlprof.backends.nsys.read import read_nsys_report

    problems = []
    for entry in manifest["reports"]:
        if entry["group"] == "controller":
            continue
        if entry["status"] != "ok":
            problems.append(f"{entry['path']}: {entry['status']} ({entry.get('reason')})")
            continue
        data = read_nsys_report(os.path.join(output_dir, entry["path"]))
        names = [r.name for r in data.ranges]
        own = [f"actor/{entry['phase']}"] if entry.get("phase") else \
            ["actor/compute_log_prob", "actor/update_actor"]
        if names != own:
            problems.append(f"{entry['path']} (step {entry['steps']}): phases {names}")
    return problems


def run(log=print) -> List[Result]:
    import ray

    from verlprof.runtime.ray_options import controller_options

    work = tempfile.mkdtemp(prefix="verlprof-bench-p5-")
    results: List[Result] = []
    try:
        for controller_nsys in (False, True):
            for discrete in (False, True):
                out = os.path.join(work, f"c{int(controller_nsys)}d{int(discrete)}")
                plan = make_plan(out, discrete, controller_nsys)
                # measured right before each run: nsys' stop time follows the machine's load,
                # which drifts over the minutes the four runs take
                floor = _floor(plan, controller_nsys, out + "-floor", log)
                runner = ray.remote(num_cpus=0)(run_loop).options(
                    **controller_options(plan))
                got = ray.get(runner.remote(plan.to_dict()), timeout=600)
                results.append(_result(got, floor, discrete, controller_nsys,
                                       window_check(plan.output_dir, got["manifest"])))
                log(results[-1].line())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return results


def _floor(plan: Any, controller_nsys: bool, work: str, log) -> Dict[str, float]:
    """nsys' own start floor for ``plan``'s sessions: rank 0's alone, or rank 0's and the
    controller's at once (two sessions stopping together share the 2 cores: measured here,
    each start on this schedule takes ~40% longer than with one session)."""
    worker = next(p for p in plan.processes if p.launch_argv)
    sessions = [(worker.launch_argv, dict(worker.launch_env))]
    if controller_nsys:
        sessions.append((plan.controller.launch_argv, dict(plan.controller.launch_env)))
    floor = capture_start_floor(sessions, work)
    who = "rank 0's and the controller's nsys at once" if controller_nsys else \
        "rank 0's nsys alone"
    log(f"P5: capture-range start in bare processes under {who}: alone "
        f"{floor['alone'] * 1e3:.1f} ms, on this schedule {floor['schedule'] * 1e3:.1f} ms "
        "(medians of 3)")
    return floor


@dataclass(frozen=True)
class Stall:
    """What profiled steps added to a step, against P5's goals (seconds; medians)."""

    enter_added: float
    exit_added: float
    body_added: float
    trip: float
    """A bare Ray round trip to the planned rank (median)."""
    floor: float
    """nsys' start floor on this schedule (:func:`capture_start_floor`'s ``schedule``)."""

    @property
    def entry_goal(self) -> float:
        return self.floor + 2 * self.trip

    @property
    def ratio(self) -> float:
        """The worse of exit/goal and entry/goal (goal 1.0)."""
        return max(self.exit_added / (2 * self.trip), self.enter_added / self.entry_goal)

    def detail(self, floors: Dict[str, float]) -> str:
        sessions = "2 nsys sessions" if floors.get("sessions", 1.0) > 1 else "1 nsys session"
        return (f"entry +{self.enter_added * 1e3:.1f} ms (goal <= nsys' floor, {sessions}, on "
                f"this schedule {self.floor * 1e3:.1f} (alone {floors['alone'] * 1e3:.1f}) + 2 "
                f"round trips {2 * self.trip * 1e3:.1f} = {self.entry_goal * 1e3:.1f} ms); exit "
                f"+{self.exit_added * 1e3:.1f} ms (goal <= {2 * self.trip * 1e3:.1f} ms)")


def stall(got: Dict[str, Any], floors: Dict[str, float], profiled: Sequence[int],
          unprofiled: Sequence[int]) -> Stall:
    """P5's comparison: ``got`` holds per step (keys int or str) ``enter``, ``body`` and
    ``exit`` seconds, and ``bare`` round trips; profiled steps' medians minus unprofiled."""
    def added(kind: str) -> float:
        by_step = {int(k): v for k, v in got[kind].items()}
        return median([by_step[s] for s in profiled]) - median([by_step[s] for s in unprofiled])

    return Stall(enter_added=added("enter"), exit_added=added("exit"), body_added=added("body"),
                 trip=statistics.median(got["bare"]), floor=floors["schedule"])


def stall_samples(got: Dict[str, Any], floors: Dict[str, float], profiled: Sequence[int],
                  unprofiled: Sequence[int]) -> List[float]:
    """The row's ratio once per profiled step, against the unprofiled step next to it (the one
    before, else the one after): its spread over the run."""
    def at(kind: str) -> Dict[int, float]:
        return {int(k): v for k, v in got[kind].items()}

    enter, leave, trip = at("enter"), at("exit"), statistics.median(got["bare"])
    out = []
    for s in profiled:
        u = s - 1 if s - 1 in unprofiled else s + 1
        if u in unprofiled:
            out.append(max((leave[s] - leave[u]) / (2 * trip),
                           (enter[s] - enter[u]) / (floors["schedule"] + 2 * trip)))
    return out


def _result(got: Dict[str, Any], floors: Dict[str, float], discrete: bool,
            controller_nsys: bool,
            problems: List[str]) -> Result:
    prof = [s for s in range(1, STEPS + 1) if s % 2 == 1 and s > 1]  # step 1: warm-up
    base = [s for s in range(1, STEPS + 1) if s % 2 == 0]
    added = stall(got, floors, prof, base)
    mode = ("discrete" if discrete else "whole") + (", controller under nsys" if controller_nsys
                                                    else "")
    details = [added.detail(floors),
               f"inside the step (the phases' own windows in discrete mode): "
               f"+{added.body_added * 1e3:.1f} ms",
               f"{len(prof)} profiled steps vs {len(base)} unprofiled, {STEP_S * 1e3:.0f} ms "
               "each; ratio = the worse of exit/goal and entry/goal"]
    details += [f"window: {p}" for p in problems] or ["every report holds exactly its step"]
    return Result(f"P5 step time added by profiling ({mode}) vs its goal",
                  added.ratio if not problems else None, 1.0, details=details,
                  note="; ".join(problems[:2]), samples=stall_samples(got, floors, prof, base))

if __name__ == "__main__":
    run_standalone(run)
