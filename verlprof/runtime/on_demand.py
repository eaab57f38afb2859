"""Capture on demand, at run time: the request desk and the controller's side of it.

The channel is a small named Ray actor, ``verlprof-controller-<run id>`` in the job's
namespace (:func:`open_desk`). A named actor is reachable from anywhere that can join the
job's Ray cluster: another node, or a login node with ``ray.init(address=...)``, with no port
of verlprof's own to open, serve or secure. The job writes a token to
``<output_dir>/.verlprof-token`` (mode 0600): only who can read the output directory as the
job's owner can ask. Where to connect is in ``<output_dir>/.verlprof-on-demand.json``.

The desk only queues: a request is screened (token, sizes, names) on arrival, and the
controller takes the queue at its next step boundary without waiting (a long poll it checks
with ``ray.wait(timeout=0)``), decides each request in order
(:func:`verlprof.plan.on_demand.plan_request`: two users at once are served one after the
other), hands each asked rank its extended plan (``verlprof_extend``) and opens the windows as
their steps begin. Nothing here raises into the job: a failure is a refusal or a warning line.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import secrets
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Protocol, Tuple, Union

from verlprof import paths
from verlprof.plan.on_demand import HOUR_S, extended, plan_request, screen
from verlprof.records import CaptureDecision, CaptureRequest, JobProgress, Target

if TYPE_CHECKING:
    from verlprof.runtime.controller import ProfileController

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
        problem = screen(request, self._token)
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
        return not screen(CaptureRequest(id="", token=token, steps="next:1"), self._token)

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


class NoRequests:
    """On-demand capture off: every hook is a no-op (a step pays one call)."""

    added: List[Target] = []
    _NOTHING = contextlib.nullcontext()

    def register(self, group: str, actors: Any) -> None:
        pass

    def step(self, step: int) -> contextlib.AbstractContextManager:
        return self._NOTHING

    def finish(self) -> None:
        pass


class OnDemand:
    """The controller's side: decides requests at step boundaries and runs their windows.

    A collaborator of :class:`~verlprof.runtime.controller.ProfileController` (split out so
    that the controller stays one concept): it extends the controller's plan, RPC layer and
    identities with the processes it adds, so finalize gathers their reports like planned ones.
    """

    def __init__(self, controller: ProfileController, channel: Channel):
        self.controller = controller
        self.channel = channel
        self.added: List[Target] = []
        self._actors: Dict[str, List[Any]] = {}
        self._scheduled: Dict[int, List[Target]] = {}
        self._open: Dict[Target, Tuple[int, ...]] = {}
        self._hour: List[Tuple[float, int]] = []
        self._closed_reports = 0
        self._accepted = 0
        self._step = 0
        self._ended = False

    def register(self, group: str, actors: Any) -> None:
        self._actors[group] = list(actors)

    @contextmanager
    def step(self, step: int) -> Iterator[None]:
        self._step = step
        try:
            requests = self.channel.poll()
        except Exception as err:  # the desk died: the job goes on without it
            self.controller.note(f"on-demand requests: the desk stopped answering: {err}")
            self.channel, requests = LocalChannel(Desk(secrets.token_hex(8))), []
        if requests:
            self.channel.decide([self._decide(r, step) for r in requests])
        self._call("verlprof_stop", {t: s for t, s in self._open.items() if step not in s})
        starting: Dict[Target, Tuple[int, ...]] = dict.fromkeys(self._scheduled.pop(step, []),
                                                                (step,))
        self._call("verlprof_start", starting)
        self._open.update(starting)
        try:
            yield
        finally:
            ending = {t: s for t, s in self._open.items() if s[-1] == step}
            self._call("verlprof_stop", ending)
            self._closed_reports += len(ending)
            self._progress()

    def finish(self) -> None:
        """The job ends: requests not decided yet are refused; the desk closes."""
        if self._ended:
            return
        self._ended = True
        try:
            left = self.channel.close()
            self.channel.decide([CaptureDecision(
                id=r.id, accepted=False, at_step=self._step,
                reason=f"the job ended (after step {self._step}) before a step boundary "
                       "could take the request") for r in left])
            self._progress()
        except Exception as err:
            self.controller.note(f"on-demand requests: the desk could not be closed: {err}")
        for name in (paths.TOKEN_NAME, paths.ON_DEMAND_NAME):
            with contextlib.suppress(OSError):
                os.remove(os.path.join(self.controller.plan.output_dir, name))

    # -- inside a step boundary -----------------------------------------------------------
    def _decide(self, request: CaptureRequest, step: int) -> CaptureDecision:
        now = time.time()
        self._hour = [(t, n) for t, n in self._hour if now - t < HOUR_S]
        controller = self.controller
        result = plan_request(controller.plan, request, step, [n for _, n in self._hour], now)
        if isinstance(result, str):
            return _refused(request, result, step)
        rpc = controller._rpc
        for process in result.processes:
            target = (process.group, process.rank)
            if target in rpc.failed:
                return _refused(request, f"{target[0]} rank {target[1]} died: "
                                         f"{rpc.failed[target]}", step)
            if target not in rpc.actors:
                rpc.actors[target] = self._actors[process.group][process.rank]
        plans = {(p.group, p.rank): p for p in result.processes}
        statuses, errors = rpc.call("verlprof_extend", list(plans), lambda t: (plans[t],))
        if errors:
            controller._on_errors(errors, False)
            (group, rank), why = errors[0]
            return _refused(request, f"{group} rank {rank} could not take the windows: {why}",
                            step)
        for target, status in statuses.items():
            controller._identity[target] = status.identity
            if target not in controller._targets and target not in self.added:
                self.added.append(target)
        where = {(p.group, p.rank, w.report.path): controller._identity.get((p.group, p.rank))
                 for p in result.processes for w in p.windows}
        decision = dataclasses.replace(result.decision, reports=tuple(
            paths.resolve_relpath(path, who.host, who.pid) if who and who.pid else path
            for (_, _, path), who in where.items() if path in result.decision.reports))
        controller.plan = extended(controller.plan, result.processes)
        for s in result.steps:
            self._scheduled.setdefault(s, []).extend(result.decision.targets)
        self._hour.append((now, len(decision.reports)))
        self._accepted += 1
        controller.note(f"on demand: {request.requested_by or 'unknown'} asked for steps "
                        f"{_steps(result.steps)} on "
                        f"{', '.join(f'{g} rank {r}' for g, r in result.decision.targets)} "
                        f"({result.decision.tool}); accepted at step {step}")
        return decision

    def _call(self, method: str, windows: Dict[Target, Tuple[int, ...]]) -> None:
        """``method`` on each target with its window's steps (never a bare start or stop:
        a rank's planned windows follow their own order)."""
        live = [t for t in windows if t not in self.controller._rpc.failed]
        if method == "verlprof_stop":
            for target in windows:
                self._open.pop(target, None)
        if not live:
            return
        _, errors = self.controller._rpc.call(method, live, lambda t: (windows[t],))
        self.controller._on_errors(errors, False)  # a request never stops the job

    def _progress(self) -> None:
        with contextlib.suppress(Exception):
            self.channel.progress(JobProgress(
                step=self._step, open_windows=tuple(
                    f"{g} rank {r} step {_steps(s)}" for (g, r), s in self._open.items()),
                scheduled=sum(map(len, self._scheduled.values())), accepted=self._accepted,
                reports=self._closed_reports, ended=self._ended))


def serve_requests(controller: ProfileController,
                   channel: Optional[Channel] = None) -> Union[OnDemand, NoRequests]:
    """The controller's on-demand side: a no-op unless ``trainer.profiler.on_demand.enabled``;
    ``channel`` (tests) replaces the Ray desk."""
    plan = controller.plan
    if not plan.on_demand.enabled:
        return NoRequests()
    if channel is None:
        channel = open_desk(plan.output_dir, controller.run.run_id)
    return OnDemand(controller, channel)


def _refused(request: CaptureRequest, reason: str, step: int) -> CaptureDecision:
    return CaptureDecision(id=request.id, accepted=False, reason=reason, at_step=step)


def _steps(steps: Tuple[int, ...]) -> str:
    return paths.step_text(steps) if len(steps) < 2 or steps[-1] - steps[0] == len(steps) - 1 \
        else ",".join(map(str, steps))
