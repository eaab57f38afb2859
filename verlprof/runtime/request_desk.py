"""The request desk of capture on demand: where requests wait until the job takes them.

The channel is a small named Ray actor, ``verlprof-controller-<run id>`` in the job's
namespace (:func:`open_desk`). A named actor is reachable from anywhere that can join the
job's Ray cluster: another node, or a login node with ``ray.init(address=...)``, with no port
of verlprof's own to open, serve or secure. The job writes a token to
``<output_dir>/.verlprof-token`` (mode 0600): only who can read the output directory as the
job's owner can ask. Where to connect is in ``<output_dir>/.verlprof-on-demand.json``.

The desk only queues: a request is screened (token, sizes, names) on arrival, and the
controller takes the queue at its next step boundary without waiting (a long poll it checks
with ``ray.wait(timeout=0)``); :mod:`verlprof.runtime.request_windows` decides and runs them.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import time
from typing import Any, Dict, List, Protocol, Union

from verlprof import paths
from verlprof.plan.request_plan import request_problem
from verlprof.records import CaptureDecision, CaptureRequest, JobProgress

ACTOR_PREFIX = "verlprof-controller-"
MAX_QUEUED = 64
"""Requests the desk holds before refusing more (a flood never reaches the job)."""
MAX_DECISIONS = 1024
"""Decisions the desk keeps for askers to read back (the oldest go first)."""


class Desk:
    """The queue and the answers, as plain state (the Ray actor wraps one; tests use one)."""

    def __init__(self, token: str):
        self._token = token
        self.queue: List[CaptureRequest] = []
        self.taken: Dict[str, CaptureRequest] = {}
        self.decisions: Dict[str, CaptureDecision] = {}
        self.progress = JobProgress()
        self.closed = False

    def submit(self, request: Any) -> str:
        """"" when queued, else one line why not."""
        problem = request_problem(request, self._token)
        if problem:
            return problem
        if self.closed:
            return "the job has ended; it takes no more requests"
        if len(self.queue) >= MAX_QUEUED:
            return f"{MAX_QUEUED} requests are waiting already; try again after a step"
        if request.id in self.decisions or request.id in self.taken or any(
                q.id == request.id for q in self.queue):
            return "id: a request with this id was sent already"
        self.queue.append(request)
        return ""

    def take(self) -> List[CaptureRequest]:
        out, self.queue = self.queue, []
        self.taken.update((r.id, r) for r in out)
        return out

    def decide(self, decisions: List[CaptureDecision]) -> None:
        for decision in decisions:
            self.taken.pop(decision.id, None)
            self.decisions[decision.id] = decision
        while len(self.decisions) > MAX_DECISIONS:
            self.decisions.pop(next(iter(self.decisions)))

    def decision(self, token: Any, request_id: Any) -> Union[CaptureDecision, str, None]:
        if not self._token_ok(token):
            return "wrong token"
        return self.decisions.get(request_id)

    def status(self, token: Any) -> Union[JobProgress, str]:
        if not self._token_ok(token):
            return "wrong token"
        return JobProgress(**{**self.progress.__dict__,
                              "pending": len(self.queue) + len(self.taken),
                              "ended": self.closed or self.progress.ended})

    def _token_ok(self, token: Any) -> bool:
        return not request_problem(CaptureRequest(id="", token=token, steps="next:1"), self._token)

    def close(self) -> List[CaptureRequest]:
        """No more requests; returns those never decided."""
        self.closed = True
        left = self.take()
        self.taken.clear()
        return left


class Channel(Protocol):
    def poll(self) -> List[CaptureRequest]: ...
    def decide(self, decisions: List[CaptureDecision]) -> None: ...
    def progress(self, progress: JobProgress) -> None: ...
    def close(self) -> List[CaptureRequest]: ...


class LocalChannel:
    """The desk in this process (tests, and a controller without Ray)."""

    def __init__(self, desk: Desk):
        self.desk = desk

    def poll(self) -> List[CaptureRequest]:
        return self.desk.take() if self.desk.queue else []

    def decide(self, decisions: List[CaptureDecision]) -> None:
        self.desk.decide(decisions)

    def progress(self, progress: JobProgress) -> None:
        self.desk.progress = progress

    def close(self) -> List[CaptureRequest]:
        return self.desk.close()


class DeskActor:
    """The desk as an asyncio Ray actor: ``take`` and ``decision`` wait without a thread."""

    def __init__(self, token: str):
        self.desk = Desk(token)
        self.arrived = asyncio.Event()

    async def submit(self, request: Any) -> str:
        line = self.desk.submit(request)
        self.arrived.set()
        return line

    async def take(self) -> List[CaptureRequest]:
        while not self.desk.queue and not self.desk.closed:
            self.arrived.clear()
            await self.arrived.wait()
        return self.desk.take()

    async def decide(self, decisions: List[CaptureDecision]) -> None:
        self.desk.decide(decisions)

    async def decision(self, token: Any, request_id: Any,
                       timeout_s: float) -> Union[CaptureDecision, str, None]:
        deadline = time.monotonic() + min(float(timeout_s), 60.0)
        while True:
            answer = self.desk.decision(token, request_id)
            if answer is not None or time.monotonic() > deadline:
                return answer
            await asyncio.sleep(0.05)

    async def progress(self, progress: JobProgress) -> None:
        self.desk.progress = progress

    async def status(self, token: Any) -> Union[JobProgress, str]:
        return self.desk.status(token)

    async def close(self) -> List[CaptureRequest]:
        out = self.desk.close()
        self.arrived.set()
        return out


class RayChannel:
    """The controller's end of the desk actor: never waits for it."""

    def __init__(self, actor: Any):
        import ray

        self._ray, self.actor = ray, actor
        self._take = actor.take.remote()

    def poll(self) -> List[CaptureRequest]:
        ready, _ = self._ray.wait([self._take], timeout=0)
        if not ready:
            return []
        requests = self._ray.get(self._take)
        self._take = self.actor.take.remote()
        return list(requests)

    def decide(self, decisions: List[CaptureDecision]) -> None:
        self.actor.decide.remote(decisions)

    def progress(self, progress: JobProgress) -> None:
        self.actor.progress.remote(progress)

    def close(self) -> List[CaptureRequest]:
        left = self._ray.get(self.actor.close.remote(), timeout=10)
        ready, _ = self._ray.wait([self._take], timeout=1)
        return (list(self._ray.get(self._take)) if ready else []) + list(left)


def open_desk(output_dir: str, run_id: str) -> Channel:
    """Start the named desk actor, then write the token (0600) and where to find it."""
    import ray

    token = secrets.token_hex(32)
    context = ray.get_runtime_context()
    name = ACTOR_PREFIX + paths.sanitize(run_id or str(os.getpid()))
    actor = ray.remote(num_cpus=0, max_restarts=0)(DeskActor).options(
        name=name, namespace=context.namespace, get_if_exists=False).remote(token)
    write_descriptor(output_dir, token, {
        "address": context.gcs_address, "namespace": context.namespace, "actor": name,
        "run_id": run_id, "ray_auth_mode": os.environ.get("RAY_AUTH_MODE", "")})
    return RayChannel(actor)


def write_descriptor(output_dir: str, token: str, where: Dict[str, str]) -> None:
    """The token (owner-only, also when the file was there before), then where to ask."""
    descriptor = os.open(os.path.join(output_dir, paths.TOKEN_NAME),
                         os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        os.fchmod(handle.fileno(), 0o600)
        handle.write(token)
    with open(os.path.join(output_dir, paths.ON_DEMAND_NAME), "w", encoding="utf-8") as handle:
        json.dump(where, handle)
