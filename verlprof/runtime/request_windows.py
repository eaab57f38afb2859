"""Capture on demand, at run time: the controller's side of the request desk.

At each step boundary the controller takes the requests waiting at the desk
(:mod:`verlprof.runtime.request_desk`) without waiting, decides each in order
(:func:`verlprof.plan.request_plan.plan_request`: two users at once are served one after the
other), hands each asked rank its extended plan (``verlprof_extend``) and opens the windows as
their steps begin. A window whose tool writes its report when it closes (torch) is gathered
right after its last step and the manifest is rewritten (``running: true``), so an asker's
``--wait`` returns then, not at the job's end. Nothing here raises into the job: a failure is a
refusal or a warning line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import time
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

from verlprof import paths
from verlprof.manifest import ReportEntry
from verlprof.plan.request_plan import HOUR_S, plan_request, with_processes
from verlprof.records import CaptureDecision, CaptureRequest, JobProgress, Target, WorkerReport
from verlprof.runtime.collect import move_all
from verlprof.runtime.request_desk import Channel, Desk, LocalChannel, open_desk
from verlprof.runtime.run_context import RunContext
from verlprof.runtime.size_budget import SizeBudget
from verlprof.worker.identity import node_id


class NoRequests:
    """On-demand capture off: every hook is a no-op (a step pays one call)."""

    added: List[Target] = []
    gathered: List[ReportEntry] = []
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
    that the controller stays one concept): it extends the run's plan, RPC layer and
    identities (:class:`~verlprof.runtime.run_context.RunContext`) with the processes it adds,
    so finalize gathers their reports like planned ones.
    """

    def __init__(self, run: RunContext, channel: Channel, budget: Optional[SizeBudget] = None):
        self.context = run
        self.channel = channel
        self.budget = budget
        """The run's size budget (``trainer.profiler.max_total_bytes``); None: not held to one."""
        self.added: List[Target] = []
        self.gathered: List[ReportEntry] = []
        """Entries of the on-demand reports gathered while the job ran (:meth:`_gather`)."""
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
            self.context.note(f"on-demand requests: the desk stopped answering: {err}")
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
            self._gather(ending)
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
            self.context.note(f"on-demand requests: the desk could not be closed: {err}")
        for name in (paths.TOKEN_NAME, paths.ON_DEMAND_NAME):
            with contextlib.suppress(OSError):
                os.remove(os.path.join(self.context.plan.output_dir, name))

    # -- inside a step boundary -----------------------------------------------------------
    def _decide(self, request: CaptureRequest, step: int) -> CaptureDecision:
        now = time.time()
        self._hour = [(t, n) for t, n in self._hour if now - t < HOUR_S]
        run = self.context
        result = plan_request(run.plan, request, step, [n for _, n in self._hour], now)
        if isinstance(result, str):
            return _refused(request, result, step)
        over = self.budget.request_problem(run.plan, result.estimated_bytes,
                                           len(result.decision.reports), len(result.steps)) \
            if self.budget is not None else None
        if over:
            return _refused(request, over, step)
        rpc = run.rpc
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
            run.on_errors(errors, False)
            (group, rank), why = errors[0]
            return _refused(request, f"{group} rank {rank} could not take the windows: {why}",
                            step)
        for target, status in statuses.items():
            run.identity[target] = status.identity
            if target not in run.registered and target not in self.added:
                self.added.append(target)
        where = {(p.group, p.rank, w.report.path): run.identity.get((p.group, p.rank))
                 for p in result.processes for w in p.windows}
        decision = dataclasses.replace(result.decision, reports=tuple(
            paths.resolve_relpath(path, who.host, who.pid) if who and who.pid else path
            for (_, _, path), who in where.items() if path in result.decision.reports))
        run.plan = with_processes(run.plan, result.processes)
        for s in result.steps:
            self._scheduled.setdefault(s, []).extend(result.decision.targets)
        self._hour.append((now, len(decision.reports)))
        self._accepted += 1
        run.note(f"on demand: {request.requested_by or 'unknown'} asked for steps "
                        f"{_steps(result.steps)} on "
                        f"{', '.join(f'{g} rank {r}' for g, r in result.decision.targets)} "
                        f"({result.decision.tool}); accepted at step {step}")
        return decision

    def _call(self, method: str, windows: Dict[Target, Tuple[int, ...]]) -> None:
        """``method`` on each target with its window's steps (never a bare start or stop:
        a rank's planned windows follow their own order)."""
        live = [t for t in windows if t not in self.context.rpc.failed]
        if method == "verlprof_stop":
            for target in windows:
                self._open.pop(target, None)
        if not live:
            return
        _, errors = self.context.rpc.call(method, live, lambda t: (windows[t],))
        self.context.on_errors(errors, False)  # a request never stops the job

    def _gather(self, ended: Dict[Target, Tuple[int, ...]]) -> None:
        """Bring the reports of the windows that just ended into the output directory now,
        where their tool wrote them at close, and rewrite the manifest (``running``): the asker
        sees them without waiting for the job's end. finalize adds them to the last one."""
        run = self.context
        live = [t for t in ended if t not in run.rpc.failed]
        if not live:
            return
        replies, errors = run.rpc.call("verlprof_hand_over", live, lambda t: (ended[t],))
        run.on_errors(errors, False)
        items: List[WorkerReport] = [item for t in live for item in replies.get(t, [])]
        if not items:
            return
        placed = move_all(items, run.rpc.actors, run.plan.output_dir, node_id())
        self.gathered += placed
        run.reports_placed(placed)  # per_window summaries: made on their nodes meanwhile
        try:
            run.write(run.manifest(list(self.gathered), running=True))
        except Exception as err:  # the reports are in place; the job goes on
            run.note(f"on demand: the manifest could not be rewritten: {err}")

    def _progress(self) -> None:
        with contextlib.suppress(Exception):
            self.channel.progress(JobProgress(
                step=self._step, open_windows=tuple(
                    f"{g} rank {r} step {_steps(s)}" for (g, r), s in self._open.items()),
                scheduled=sum(map(len, self._scheduled.values())), accepted=self._accepted,
                reports=self._closed_reports, ended=self._ended))


def serve_requests(run: RunContext, channel: Optional[Channel] = None,
                   budget: Optional[SizeBudget] = None) -> Union[OnDemand, NoRequests]:
    """The controller's on-demand side: a no-op unless ``trainer.profiler.on_demand.enabled``;
    ``channel`` (tests) replaces the Ray desk; ``budget``: the run's size budget, which every
    capture is held to."""
    plan = run.plan
    if not plan.on_demand.enabled:
        return NoRequests()
    if channel is None:
        channel = open_desk(plan.output_dir, run.run.run_id)
    return OnDemand(run, channel, budget)


def _refused(request: CaptureRequest, reason: str, step: int) -> CaptureDecision:
    return CaptureDecision(id=request.id, accepted=False, reason=reason, at_step=step)


def _steps(steps: Tuple[int, ...]) -> str:
    return paths.step_text(steps) if len(steps) < 2 or steps[-1] - steps[0] == len(steps) - 1 \
        else ",".join(map(str, steps))
