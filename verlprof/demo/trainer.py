"""A PPO-shaped trainer on Ray, profiled with verlprof exactly as a verl user would do it.

It runs inside a Ray actor (like verl's TaskRunner), so that when controller options are set
the controller process itself is launched under nsys. Each step calls, on every rank of the
owning group: rollout ``generate_sequences``, actor ``compute_log_prob``, ref
``compute_ref_log_prob``, critic ``compute_values``, rm ``compute_rm_score``, critic
``update_critic``, actor ``update_actor``.

Its settings (steps, batch, planted faults and stragglers) are the record
:class:`~verlprof.demo.settings.DemoSettings`, checked on the driver.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import time
from collections import Counter
from typing import Any, Dict, List, Optional, Sequence, Tuple

import ray
import torch

from verlprof.demo import workers
from verlprof.demo.settings import DemoSettings, Fault
from verlprof.errors import ProfilingRuntimeError
from verlprof.plan_model import ProfilePlan
from verlprof.records import ProcessIdentity
from verlprof.runtime.controller import ProfileController, describe_error
from verlprof.runtime.ray_options import worker_options
from verlprof.worker import process_identity

ROLE_CLASSES = {
    "actor": workers.ActorRolloutRefWorker,
    "rollout": workers.ActorRolloutRefWorker,
    "ref": workers.ActorRolloutRefWorker,
    "critic": workers.CriticWorker,
    "rm": workers.RewardModelWorker,
}
"""The demo worker class that runs each role."""

_FUSED: Dict[Tuple[type, ...], type] = {}


def group_class(roles: Sequence[str]) -> type:
    """The worker class of a process hosting ``roles``: one class, or, when the roles of
    several classes share the process (verl's fused resource pools), one class made of them
    all, as verl's ``create_colocated_worker_cls`` fuses its workers."""
    classes = tuple(dict.fromkeys(ROLE_CLASSES[r] for r in roles))
    if len(classes) == 1:
        return classes[0]
    if classes not in _FUSED:
        name = "Fused" + "".join(c.__name__.replace("Worker", "") for c in classes) + "Worker"
        _FUSED[classes] = type(name, classes, {"__module__": __name__})
    return _FUSED[classes]

class _PlantedFaults:
    """Mixed into a demo worker class when faults are planted on that rank."""

    def __init__(self, rank: int, delays: Optional[Dict[str, float]] = None,
                 faults: Sequence[Fault] = ()):
        super().__init__(rank, delays)  # type: ignore[call-arg]
        self._planted = list(faults)
        self._phase_calls: Counter = Counter()

    def _delay(self, phase: str) -> None:
        self._phase_calls[phase] += 1
        for fault in self._planted:
            if fault.phase == phase and fault.step == self._phase_calls[phase]:
                _fire(fault, phase)
        super()._delay(phase)  # type: ignore[misc]


def _fire(fault: Fault, phase: str) -> None:
    if fault.marker:
        tmp = f"{fault.marker}.{os.getpid()}.tmp"
        with open(tmp, "w") as handle:
            json.dump({"pid": os.getpid(), "phase": phase, "step": fault.step,
                       "action": fault.action}, handle)
        os.replace(tmp, fault.marker)
    if fault.action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif fault.action == "raise":
        raise RuntimeError(f"planted fault in {phase} (step {fault.step})")
    elif fault.action == "sleep":
        _stuck(fault.seconds, fault.release)


def _stuck(seconds: float, release: Optional[str]) -> None:
    """Sleep ``seconds``, or until the file ``release`` exists."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if release and os.path.exists(release):
            return
        time.sleep(min(left, 0.2) if release else left)


_FAULTY: Dict[type, type] = {}


def _faulty(cls: type) -> type:
    if cls not in _FAULTY:
        _FAULTY[cls] = type(cls.__name__, (_PlantedFaults, cls), {})
    return _FAULTY[cls]


class PPOTrainer:
    """Creates the worker groups (wrapping only planned ranks) and runs the step loop."""

    def __init__(self, settings: DemoSettings, plan: ProfilePlan, *, preflight: Any = True):
        self.plan = plan
        self.total_steps = settings.total_steps
        self.batch_size = settings.batch_size
        self.continue_on_death = settings.on_worker_death == "continue"
        # the run policy (on_rank_failure, timeouts) comes with the plan, from the YAML
        self.controller = ProfileController(plan, preflight=preflight)
        self.groups: Dict[str, List[Any]] = {}
        placement = settings.worker_resources
        for group in plan.groups:
            base = group_class(group.roles)
            actors = []
            for rank in range(group.world_size):
                faults = settings.faults_of(group.name, rank)
                cls = ray.remote(num_cpus=0)(_faulty(base) if faults else base)
                extra = ({"resources": dict(placement[group.name])}
                         if group.name in placement else {})
                args = (rank, settings.delays(group.name, rank)) + ((faults,) if faults else ())
                actors.append(cls.options(**worker_options(plan, group.name, rank),
                                          **extra).remote(*args))
            self.groups[group.name] = actors
        self.live: Dict[str, List[Tuple[int, Any]]] = {
            name: list(enumerate(actors)) for name, actors in self.groups.items()}
        self._wait_started(settings.worker_start_timeout_s)
        for name, actors in self.groups.items():
            self.controller.register_group(name, actors)

    def _wait_started(self, timeout_s: float) -> None:
        """Bounded start-up: a rank whose launcher fails is retried by Ray forever."""
        refs = {w.ready.remote(): (g, r) for g, ws in self.groups.items()
                for r, w in enumerate(ws)}
        ready, late = ray.wait(list(refs), num_returns=len(refs), timeout=timeout_s)
        problems = []
        for ref in ready:
            try:
                ray.get(ref)
            except Exception as err:
                problems.append((refs[ref], f"failed to start: {describe_error(err)}"))
        for ref in late:
            problems.append((refs[ref], f"did not start within {timeout_s:g}s"))
        if not problems:
            return
        lines = []
        for (group, rank), why in problems:
            process = self.plan.process(group, rank)
            launcher = (f" (launched under {' '.join(process.launch_argv[:2])})"
                        if process is not None and process.launch_argv else "")
            lines.append(f"{group} rank {rank}: worker {why}{launcher}")
        for actor in (a for ws in self.groups.values() for a in ws):
            ray.kill(actor, no_restart=True)  # stops Ray retrying a failing launcher
        (group, rank), _ = problems[0]
        raise ProfilingRuntimeError("; ".join(lines), group=group, rank=rank)

    def _role(self, role: str) -> Tuple[str, List[Tuple[int, Any]]]:
        """The live (rank, actor) pairs of the group whose processes host ``role`` (the hybrid
        group for actor, rollout and ref; a fused pool for every role it holds)."""
        group = next((g.name for g in self.plan.groups if role in g.roles), role)
        return group, self.live.get(group, [])

    def _call(self, role: str, method: str, *tensors: torch.Tensor) -> List[Any]:
        """``method`` on every live rank of the role's group, each getting its slice of every
        tensor. A dead rank fails the step, or with ``demo.on_worker_death: continue`` is
        dropped and the call redone on the others."""
        while True:
            group, live = self._role(role)
            chunks = [torch.tensor_split(t, len(live)) for t in tensors]
            refs = [getattr(actor, method).remote(*(c[i] for c in chunks))
                    for i, (_, actor) in enumerate(live)]
            with self.controller.range(method):
                ray.wait(refs, num_returns=len(refs))
                dead = []
                for (rank, _), ref in zip(live, refs):
                    try:
                        ray.get(ref)
                    except ray.exceptions.RayActorError as err:
                        dead.append((rank, describe_error(err)))
                if not dead:
                    return ray.get(refs)
                if not self.continue_on_death or len(dead) == len(live):
                    return ray.get(refs)  # raises the worker's error
            for rank, why in dead:
                print(f"verlprof demo: {group} rank {rank} died in {method}: {why}; "
                      f"continuing on {len(live) - len(dead)} rank(s)", flush=True)
            gone = {rank for rank, _ in dead}
            self.live[group] = [(r, a) for r, a in live if r not in gone]

    def _has(self, role: str) -> bool:
        return bool(self._role(role)[1])

    def _step(self, step: int) -> Dict[str, float]:
        prompts = torch.randint(0, workers.VOCAB, (self.batch_size, 4),
                                generator=torch.Generator().manual_seed(step))
        seqs = torch.cat(self._call("rollout", "generate_sequences", prompts))
        old_lp = torch.cat(self._call("actor", "compute_log_prob", seqs))
        # verl has a reference policy only when a KL term uses it (its pools then lack ref)
        ref_lp = (torch.cat(self._call("ref", "compute_ref_log_prob", seqs))
                  if self._has("ref") else old_lp)
        values = (torch.cat(self._call("critic", "compute_values", seqs))
                  if self._has("critic") else torch.zeros(len(seqs)))
        scores = (torch.cat(self._call("rm", "compute_rm_score", seqs))
                  if self._has("rm") else (seqs[:, -1] % 2).float())
        kl = (old_lp - ref_lp).mean(-1)
        returns = scores - 0.01 * kl
        advantages = returns - values
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-6)
        metrics = {}
        if self._has("critic"):
            losses = self._call("critic", "update_critic", seqs, returns)
            metrics["critic_loss"] = sum(losses) / len(losses)
        losses = self._call("actor", "update_actor", seqs, old_lp, advantages)
        metrics["actor_loss"] = sum(losses) / len(losses)
        metrics["score"] = float(scores.mean())
        return metrics

    def fit(self) -> Dict[str, Any]:
        """Run every step; whatever happens (an exception, SIGTERM, Ctrl-C), open windows are
        stopped, the reports finalised (the manifest written) and the workers shut down
        cleanly before this returns or raises."""
        history = []
        try:
            with self.controller:
                for step in range(1, self.total_steps + 1):
                    started = time.perf_counter()
                    with self.controller.step(step):
                        metrics = self._step(step)
                    metrics["step_s"] = time.perf_counter() - started
                    history.append(metrics)
            manifest = self.controller.finalize()
            processes = self.worker_identities()
        finally:
            self.shutdown_workers()
        # finalize() again: the manifest as rewritten once the workers exited (rocprof-sys
        # output is gathered then, ProfileController.wait_for_profilers)
        manifest = self.controller.finalize()
        return {"manifest": manifest.to_dict(), "history": history, "processes": processes,
                "controller": {"host": self.controller.host, "pid": self.controller.pid},
                "failed_ranks": [[g, r, why] for (g, r), why in
                                 self.controller.failed_ranks.items()]}

    def worker_identities(self) -> List[Dict[str, Any]]:
        """Every live worker's host, pid and whether a profiler wraps it (selected or not)."""
        refs = {(g, r): a.verlprof_status.remote() for g, live in self.live.items()
                for r, a in live}
        out = []
        for (g, r), ref in refs.items():
            try:
                status = ray.get(ref, timeout=60)
                out.append(dict(dataclasses.asdict(status.identity), group=g, rank=r,
                                configured=status.configured))
            except Exception as err:
                out.append({"group": g, "rank": r, "error": describe_error(err)})
        return out

    def shutdown_workers(self, timeout_s: float = 60.0) -> None:
        """Let workers exit normally so each nsys finishes cleanly before Ray tears down."""
        actors = [a for ws in self.groups.values() for a in ws]
        refs = [a.__ray_terminate__.remote() for a in actors]
        ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        for problem in self.controller.wait_for_profilers(timeout_s):
            print(f"verlprof: {problem}")


@ray.remote(num_cpus=0)
class TaskRunner:
    """The controller process (verl's TaskRunner): launched under nsys when planned."""

    def identity(self) -> ProcessIdentity:
        """Host, pid, node and profiler pid of the controller process."""
        return process_identity()

    def run(self, settings: DemoSettings, plan: ProfilePlan,
            preflight: Any = True) -> Dict[str, Any]:
        return PPOTrainer(settings, plan, preflight=preflight).fit()
