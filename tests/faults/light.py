"""The smallest real configuration: verlprof's runtime (plan, launch under nsys, controller,
windows, collection, teardown) around a worker that does almost nothing and imports no torch
(importing torch alone costs ~3 s of CPU per process on the CI machine). Used where a fault
needs many runs or precise control; the full demo trainer covers the rest."""

from __future__ import annotations

import os
import signal
import time
from typing import Any, Dict, List, Optional, Sequence

import ray

from verlprof.demo.settings import DemoSettings
from verlprof.plan import ProfilePlan
from verlprof.runtime.controller import ProfileController
from verlprof.runtime.ray_options import worker_options
from verlprof.worker import ProfilingWorkerMixin, annotate, process_identity


def _busy(seconds: float, until: Optional[str]) -> None:
    """Sleep ``seconds``, or (``until``) until that file exists, at most ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not (until and os.path.exists(until)):
        time.sleep(0.05 if until else max(0.0, deadline - time.monotonic()))


class LightWorker(ProfilingWorkerMixin):
    """A hybrid actor_rollout_ref rank with two annotated phases."""

    def __init__(self, rank: int):
        self.rank = rank

    def ready(self) -> int:
        return os.getpid()

    @annotate("rollout")
    def generate_sequences(self, seconds: float = 0.0, until: Optional[str] = None) -> int:
        _busy(seconds, until)
        return self.rank

    @annotate("actor")
    def update_actor(self, seconds: float = 0.0, until: Optional[str] = None) -> int:
        _busy(seconds, until)
        return self.rank

    @annotate("actor", phase="update_actor")
    def fail(self, message: str) -> None:
        raise RuntimeError(message)

    def die(self) -> None:
        os.kill(os.getpid(), signal.SIGKILL)


RemoteLightWorker = ray.remote(num_cpus=0)(LightWorker)


def start_group(plan: ProfilePlan, group: str = "actor_rollout_ref",
                timeout_s: float = 120.0) -> List[Any]:
    """Every rank of ``group``, launched as the plan says (planned ranks under nsys)."""
    size = next(g.world_size for g in plan.groups if g.name == group)
    actors = [RemoteLightWorker.options(**worker_options(plan, group, rank)).remote(rank)
              for rank in range(size)]
    ray.get([a.ready.remote() for a in actors], timeout=timeout_s)
    return actors


def step_work(actors: Sequence[Any], seconds: float = 0.0) -> List[int]:
    """One training step: both phases on every rank."""
    ray.get([a.generate_sequences.remote(seconds) for a in actors])
    return ray.get([a.update_actor.remote(seconds) for a in actors])


def shutdown(controller: ProfileController, actors: Sequence[Any]) -> List[str]:
    """The clean end the demo uses: workers exit normally, then their profilers settle."""
    refs = [a.__ray_terminate__.remote() for a in actors]
    ray.wait(refs, num_returns=len(refs), timeout=60)
    return controller.wait_for_profilers(60)


@ray.remote(num_cpus=0)
class LightTaskRunner:
    """The demo TaskRunner's interface (``identity``, ``run``) around light workers, for
    :func:`verlprof.demo.run.run_trainer`."""

    def identity(self) -> Dict[str, Any]:
        return process_identity()

    def run(self, settings: DemoSettings, profile_plan: ProfilePlan,
            preflight: Any = True) -> Dict[str, Any]:
        times = {"t0": time.monotonic()}
        controller = ProfileController(profile_plan, preflight=preflight,
                                       rpc_timeout_s=60, finalize_timeout_s=60, echo=False)
        times["controller"] = time.monotonic()
        actors = start_group(profile_plan)
        times["workers"] = time.monotonic()
        try:
            controller.register_group("actor_rollout_ref", actors)
            times["register"] = time.monotonic()
            steps = settings.total_steps
            with controller:
                for step in range(1, steps + 1):
                    with controller.step(step):
                        step_work(actors)
                times["steps"] = time.monotonic()
            manifest = controller.finalize()
            times["finalize"] = time.monotonic()
        finally:
            problems = shutdown(controller, actors)
            times["shutdown"] = time.monotonic()
        return {"manifest": manifest.to_dict(), "problems": problems, "times": times,
                "controller": {"host": controller.host, "pid": controller.pid}}


def make_plan(output_dir: str, overrides: Sequence[str]) -> ProfilePlan:
    """A real plan from the shipped trainer config plus ``overrides``."""
    from tests.faults.harness import CONFIG
    from verlprof.demo.run import plan_demo

    _, plan, _ = plan_demo(CONFIG, [f"trainer.profiler.output_dir={output_dir}", *overrides])
    return plan


def controller_for(plan: ProfilePlan, **kwargs: Any) -> ProfileController:
    kwargs.setdefault("rpc_timeout_s", 30.0)
    kwargs.setdefault("finalize_timeout_s", 30.0)
    kwargs.setdefault("echo", False)
    kwargs.setdefault("preflight", "quick")
    return ProfileController(plan, **kwargs)


def statuses(actors: Sequence[Any], timeout_s: float = 60.0) -> List[Optional[Dict[str, Any]]]:
    """verlprof_status of each actor (None for a dead one)."""
    out: List[Optional[Dict[str, Any]]] = []
    for actor in actors:
        try:
            out.append(ray.get(actor.verlprof_status.remote(), timeout=timeout_s))
        except Exception:
            out.append(None)
    return out
