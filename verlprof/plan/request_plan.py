"""Capture on demand, planned: a request of a running job becomes windows of the plan.

Two pure functions. :func:`screen` checks what a request says on its own (the token, sizes,
names, the step spec) as soon as it arrives, so a malformed or hostile request is refused in
one line before it reaches the job. :func:`plan_request` decides it at a step boundary against
the plan as it stands (steps in the future only, ranks that exist, one capture per rank and
step, the caps of ``trainer.profiler.on_demand``) and returns the plan's additions: the
:class:`~verlprof.plan_model.ProcessPlan` of each asked rank with its new windows, built by
the same functions that build a planned one. The controller only executes them.
"""

from __future__ import annotations

import dataclasses
import hmac
import re
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple, Union

from verlprof import paths
from verlprof.config.schema import TOOLS
from verlprof.plan.build import capture_options, process_windows
from verlprof.plan.size import REPORT_BYTES, traces_gpu
from verlprof.plan.tool_launch import worker_launch
from verlprof.plan_model import ProcessPlan, ProfilePlan
from verlprof.records import CaptureDecision, CaptureRequest, Mode, Target

MAX_TEXT = 200
"""Characters any text field of a request may hold."""
MAX_RANKS = 4096
"""Ranks one request may name (the report cap usually refuses far fewer)."""
HOUR_S = 3600.0

_STEPS = re.compile(r"^(?:next:(?P<next>\d{1,6})|(?P<first>\d{1,9})(?:-(?P<last>\d{1,9}))?)$")


@dataclass(frozen=True)
class Accepted:
    """What :func:`plan_request` adds to the plan for one accepted request."""

    decision: CaptureDecision
    processes: Tuple[ProcessPlan, ...]
    """The full new plan of every asked process (its earlier windows, then the new ones)."""
    steps: Tuple[int, ...]
    estimated_bytes: int = 0
    """The new reports' size by the plan's table (:data:`verlprof.plan.size.REPORT_BYTES`),
    for the size budget until the run has measured a report of its own."""


def request_problem(request: Any, token: str) -> str:
    """"" when ``request`` is a well-formed :class:`CaptureRequest` carrying ``token``, else
    one line saying why not (never the token itself, never the raw text of a field)."""
    if not isinstance(request, CaptureRequest):
        return "not a capture request"
    if not isinstance(request.token, str) or not hmac.compare_digest(
            request.token.encode("utf-8", "replace"), token.encode()):
        return ("wrong token: only the job's owner can ask (the token is "
                f"<output_dir>/{paths.TOKEN_NAME})")
    for name in ("id", "steps", "group", "requested_by"):
        value = getattr(request, name)
        if not isinstance(value, str) or len(value) > MAX_TEXT or not value.isprintable():
            return f"{name}: printable text of at most {MAX_TEXT} characters expected"
    if request.group and paths.sanitize(request.group) != request.group:
        return "group: a worker group's name expected ([A-Za-z0-9._-])"
    ranks = request.ranks
    if not isinstance(ranks, tuple) or not ranks or len(ranks) > MAX_RANKS or any(
            not isinstance(r, int) or isinstance(r, bool) or r < 0 for r in ranks):
        return f"ranks: 1 to {MAX_RANKS} non-negative integers expected"
    if len(set(ranks)) != len(ranks):
        return "ranks: a rank is listed twice"
    if request.tool is not None and request.tool not in TOOLS:
        return f"tool: one of {', '.join(TOOLS)} expected (or none: the run's tool)"
    if not isinstance(request.discrete, bool):
        return "discrete: true or false expected"
    if _STEPS.match(request.steps) is None:
        return "steps: next:N, S or S-T expected (e.g. next:2, 120, 120-121)"
    return ""


def requested_steps(spec: str, step: int) -> Union[Tuple[int, ...], str]:
    """The steps ``spec`` asks for when decided at the boundary of ``step`` (the step about to
    run), or one line why not. ``next:N`` starts at ``step``."""
    match = _STEPS.match(spec)
    if match is None:
        return "steps: next:N, S or S-T expected (e.g. next:2, 120, 120-121)"
    if match.group("next") is not None:
        count = int(match.group("next"))
        return tuple(range(step, step + count)) if count else "steps: next:0 asks for nothing"
    first = int(match.group("first"))
    last = int(match.group("last") or first)
    if last < first:
        return f"steps: {first}-{last} ends before it starts"
    if first < step:
        return f"steps: step {first} has started already (the job is at step {step})"
    return tuple(range(first, last + 1))


def plan_request(plan: ProfilePlan, request: CaptureRequest, step: int,
                 accepted_in_hour: Sequence[int], now: float) -> Union[Accepted, str]:
    """The windows ``request`` adds at the boundary of ``step``, or one line why not.

    ``accepted_in_hour``: the report count of each request accepted in the last hour;
    ``now``: the time recorded as ``requested_at``. Pure: same inputs, same answer.
    """
    caps = plan.on_demand
    if not caps.enabled:
        return "this job does not take capture requests (trainer.profiler.on_demand.enabled)"
    steps = requested_steps(request.steps, step)
    if isinstance(steps, str):
        return steps
    if len(steps) > caps.max_steps_per_request:
        return (f"steps: {len(steps)} steps asked, at most {caps.max_steps_per_request} per "
                "request (trainer.profiler.on_demand.max_steps_per_request)")
    group = plan.group(request.group or plan.groups[0].name) if plan.groups else None
    if group is None:
        return (f"group: {request.group!r} is not a worker group of this job "
                f"({', '.join(g.name for g in plan.groups)})")
    outside = [r for r in request.ranks if r >= group.world_size]
    if outside:
        return (f"ranks: {group.name} has ranks 0-{group.world_size - 1}; "
                f"{', '.join(map(str, outside))} do not exist")
    tool = request.tool or plan.tool
    problem = _tool_problem(plan, tool, group.name, request.ranks)
    if problem:
        return problem
    inputs = plan.built_from
    if inputs is None:
        return "this job's plan carries no inputs to plan a window from (built_from)"
    mode: Mode = "discrete" if request.discrete else "whole"
    config = dataclasses.replace(inputs.config, tool=tool)
    by = request.requested_by or "unknown"
    processes: List[ProcessPlan] = []
    for rank in request.ranks:
        before = plan.process(group.name, rank)
        problem = _conflict(before, group.name, rank, tool, mode, steps)
        if problem:
            return problem
        roles = before.selected_roles if before else group.roles
        windows = tuple(dataclasses.replace(w, report=dataclasses.replace(
            w.report, requested_by=by, requested_at=now))
            for w in process_windows(config, group, rank, roles, mode, tuple((s,) for s in steps)))
        if not windows:
            return (f"--discrete: no annotated phase of {', '.join(roles)} opens a window "
                    "(trainer.profiler.phases)")
        if before is not None:
            processes.append(dataclasses.replace(before, windows=before.windows + windows))
            continue
        launch = worker_launch(config, inputs.topology, group, rank, len(windows), [])
        processes.append(ProcessPlan(
            group=group.name, rank=rank, roles=group.roles, selected_roles=roles, mode=mode,
            backend=tool, windows=windows, raw_dir=paths.raw_dir(
                plan.output_dir, group.name, rank), world_size=group.world_size,
            capture_options=capture_options(config, group, launch.capture_options),
            window_time=plan.window_time))
    reports = tuple(w.report.path for p in processes for w in p.windows
                    if w.report.requested_at == now)
    problem = _over_caps(plan, len(reports), accepted_in_hour)
    if problem:
        return problem
    targets: Tuple[Target, ...] = tuple((group.name, r) for r in request.ranks)
    each = REPORT_BYTES[(tool, mode, traces_gpu(tool, config, inputs.topology))]
    return Accepted(decision=CaptureDecision(
        id=request.id, accepted=True, steps=steps, targets=targets, tool=tool,
        reports=reports, at_step=step), processes=tuple(processes), steps=steps,
        estimated_bytes=each.bytes_per_step * sum(
            len(w.steps) for p in processes for w in p.windows if w.report.requested_at == now))


def _tool_problem(plan: ProfilePlan, tool: str, group: str, ranks: Sequence[int]) -> str:
    """torch opens anywhere; nsys only on ranks armed at launch (``nsys_ranks``)."""
    if tool == "torch":
        return ""
    key = "trainer.profiler.on_demand.nsys_ranks"
    if tool != "nsys":
        return (f"tool: {tool} opens a fixed number of windows per process from its launch; "
                "a running job captures on demand with --tool torch, or nsys on armed ranks")
    armed = plan.on_demand.nsys_ranks.get(group, ())
    unarmed = [r for r in ranks if r not in armed]
    if unarmed:
        return (f"tool: nsys needs ranks armed at launch; {group} rank(s) "
                f"{', '.join(map(str, unarmed))} are not in {key} "
                f"(armed: {', '.join(map(str, armed)) or 'none'}); ask --tool torch")
    return ""


def _conflict(before: Optional[ProcessPlan], group: str, rank: int, tool: str, mode: Mode,
              steps: Tuple[int, ...]) -> str:
    """Why ``(group, rank)`` cannot take these windows beside what it already captures."""
    if before is None:
        return ""
    if before.backend != tool:
        return (f"{group} rank {rank} is profiled with {before.backend} by the plan; "
                f"it cannot also run {tool} (ask --tool {before.backend} or another rank)")
    if before.mode != mode:
        flag = "with" if before.mode == "discrete" else "without"
        return f"{group} rank {rank} captures in {before.mode} mode; ask {flag} --discrete"
    taken = sorted({s for w in before.windows for s in w.steps} & set(steps))
    if taken:
        by = next((w.report.requested_by for w in before.windows
                   if set(w.steps) & set(taken)), None)
        return (f"{group} rank {rank} already captures step(s) {', '.join(map(str, taken))} "
                f"({'asked by ' + by if by else 'planned'}); ask for other steps")
    return ""


def _over_caps(plan: ProfilePlan, reports: int, accepted_in_hour: Sequence[int]) -> str:
    caps = plan.on_demand
    key = "trainer.profiler.on_demand"
    if reports > caps.max_reports_per_request:
        return (f"{reports} reports asked, at most {caps.max_reports_per_request} per request "
                f"({key}.max_reports_per_request); ask fewer ranks or steps")
    if len(accepted_in_hour) + 1 > caps.max_requests_per_hour:
        return (f"{len(accepted_in_hour)} requests accepted in the last hour, the cap is "
                f"{caps.max_requests_per_hour} ({key}.max_requests_per_hour); try later")
    if sum(accepted_in_hour) + reports > caps.max_reports_per_hour:
        return (f"{sum(accepted_in_hour)} reports accepted in the last hour, {reports} more "
                f"would pass the cap of {caps.max_reports_per_hour} "
                f"({key}.max_reports_per_hour); try later or ask fewer")
    return ""


def with_processes(plan: ProfilePlan, processes: Sequence[ProcessPlan]) -> ProfilePlan:
    """``plan`` with ``processes`` in place of their earlier plans, new ones at the end."""
    by_target = {(p.group, p.rank): p for p in processes}
    kept = tuple(by_target.pop((p.group, p.rank), p) for p in plan.processes)
    return dataclasses.replace(plan, processes=kept + tuple(by_target.values()))
