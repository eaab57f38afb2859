"""The profiling plan: a pure function from (config, topology) to everything that will happen.

``build_plan`` decides, before any process starts: which steps are captured and how they group
into windows, which rank of which group is selected and in which mode, which roles' phases open
discrete windows, the exact launch argv of each wrapped rank (with ``repeat:N`` equal to the
windows that process will open), and the contract path of every report. The controller, the
workers and collection only execute it; none of them re-derives a decision.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
from typing import Any, Callable, List, Optional, Tuple, TypeVar

from verlprof import paths
from verlprof.config.schema import ComponentConfig, ProfilingConfig
from verlprof.config.topology import GroupTopology, Topology
from verlprof.config.verl_pools import ROLLOUT_REPLICAS, TEACHER
from verlprof.errors import ConfigError
from verlprof.plan.size import check_budget, size_plan
from verlprof.plan.tool_launch import check_tool, controller_launch, worker_launch
from verlprof.plan_model import (
    PHASE_ORDER,
    ROLE_PHASES,
    ControllerPlan,
    EngineRoute,
    FinishHookPlan,
    PlanInputs,
    ProcessPlan,
    ProfilePlan,
    Report,
    RunPolicy,
    TokenWindow,
    TorchCapture,
    Window,
    WindowTime,
)
from verlprof.records import TOOL_TRAITS, Mode, StepWindow, Target

_PHASE_RANK = {p: i for i, p in enumerate(PHASE_ORDER)}


def _phase_rank(phase: str) -> int:
    """Where ``phase`` runs in a PPO step (phases not in :data:`PHASE_ORDER` last)."""
    return _PHASE_RANK.get(phase, len(PHASE_ORDER))


def group_step_windows(steps: Tuple[int, ...], continuous: bool) -> Tuple[Tuple[int, ...], ...]:
    """Split sorted steps into windows: runs of consecutive steps when continuous."""
    windows: List[List[int]] = []
    for step in sorted(steps):
        if continuous and windows and windows[-1][-1] == step - 1:
            windows[-1].append(step)
        else:
            windows.append([step])
    return tuple(tuple(w) for w in windows)


_F = TypeVar("_F", bound=Callable[..., Any])


def _cyclic_gc_paused(build: _F) -> _F:
    """Run ``build`` with CPython's cyclic collector paused (as it was before, afterwards).

    A plan is a tree of frozen records: it makes no reference cycles, so a collection during
    the build finds nothing, yet each full one walks every object built so far. At 512 x 8
    GPUs (86,016 reports) that was 5 full collections per plan against 0.6 at 64 x 8, and the
    time in the collector grew 17-19x for 8x the ranks (0.025 s -> 0.42-0.48 s CPU, about a
    fifth of the build): the growth was the collector's, not the plan's (Python calls 7.997x).
    """
    @functools.wraps(build)
    def paused(*args: Any, **kwargs: Any) -> Any:
        was_on = gc.isenabled()
        gc.disable()
        try:
            return build(*args, **kwargs)
        finally:
            if was_on:
                gc.enable()

    return paused  # type: ignore[return-value]


@_cyclic_gc_paused
def build_plan(config: ProfilingConfig, topology: Topology) -> ProfilePlan:
    """The plan for ``config`` on ``topology``. Pure: no Ray, no I/O, no clock.

    Raises :class:`ConfigError` naming the full key for choices the topology makes invalid
    (a rank beyond its group's world size, colocated roles disagreeing on discrete mode).
    """
    warnings: List[str] = []
    _check_ranks(config, topology, warnings)
    windows = group_step_windows(config.steps, config.continuous_steps)
    processes: List[ProcessPlan] = []
    controller = ControllerPlan()
    window_time: Optional[WindowTime] = None
    if config.active:
        check_tool(config, topology)
        window_time = _window_time(config)  # one record, shared by every process
        for group in topology.groups:
            mode = "whole" if group.served else _group_mode(config, group)
            for rank in range(group.world_size):
                selecting = tuple(r for r in group.roles
                                  if _selects(_component(config, group, r), rank, group))
                if selecting and _has_windows(config, selecting, mode, group, rank, warnings):
                    processes.append(_process_plan(config, topology, group, rank,
                                                   selecting, mode, windows, window_time,
                                                   warnings))
        controller = _controller_plan(config, topology, windows, warnings)
    processes = _armed(config, topology, processes, warnings)
    served = {g.name for g in topology.groups if g.served}  # finish_hook ranks are GPU ranks
    hook = _finish_hook(config, [p for p in processes if p.group not in served], warnings) \
        if config.active else None
    size = size_plan(config, topology, processes, controller, windows)
    check_budget(size, windows)  # a budget that holds not even the first window: one line
    return ProfilePlan(
        enabled=bool(processes) or config.serves_requests, tool=config.tool,
        output_dir=config.output_dir,
        step_windows=windows, groups=topology.groups, processes=tuple(processes),
        controller=controller, source=config.source, warnings=tuple(dict.fromkeys(warnings)),
        window_time=window_time if window_time is not None else _window_time(config),
        worker_options_key=config.nsys.worker_options_key,
        controller_options_key=config.nsys.controller_options_key,
        policy=RunPolicy(on_rank_failure=config.on_rank_failure,
                         rpc_timeout_s=config.rpc_timeout_s,
                         finalize_timeout_s=config.finalize_timeout_s,
                         existing_run=config.existing_run, summarise=config.summarise,
                         place=config.place),
        finish_hook=hook, unprofiled=topology.unprofiled,
        on_demand=dataclasses.replace(config.on_demand, enabled=config.serves_requests),
        verl_release=config.verl_release, engine_route=_engine_route(config, topology),
        disabled_reason="" if config.enabled else config.disabled_reason, size=size,
        built_from=PlanInputs(config=config, topology=topology))


def _engine_route(config: ProfilingConfig, topology: Topology) -> Optional[EngineRoute]:
    """verl's engine profiling on the rollout replicas, on every profiled step."""
    engine = config.rollout_engine
    if engine is None or not config.active or config.tool != "torch" \
            or topology.group(ROLLOUT_REPLICAS) is None:
        return None
    return EngineRoute(group=ROLLOUT_REPLICAS, steps=tuple(sorted(set(config.steps))),
                       trace_dir=engine.trace_dir, key=engine.key,
                       tokens=TokenWindow(start=engine.token_start or 0, end=engine.token_end))


def _armed(config: ProfilingConfig, topology: Topology, processes: List[ProcessPlan],
           warnings: List[str]) -> List[ProcessPlan]:
    """``processes`` with the ranks of ``on_demand.nsys_ranks`` launched under nsys with an
    open-ended window count: a planned nsys rank keeps its windows, an unplanned one gets a
    plan with none (requests add them)."""
    key = "trainer.profiler.on_demand.nsys_ranks"
    armed = config.on_demand.nsys_ranks
    if armed and not config.serves_requests:
        raise ConfigError(key, "arms ranks for capture requests, which this job does not take; "
                               "set trainer.profiler.on_demand.enabled=true or leave it out")
    out = list(processes)
    nsys = dataclasses.replace(config, tool="nsys",
                               nsys=dataclasses.replace(config.nsys, trigger="nvtx"))
    for name, ranks in armed.items():
        group = topology.group(name)
        if group is None:
            raise ConfigError(f"{key}.{name}", "not a worker group of this run (groups: "
                              f"{', '.join(g.name for g in topology.groups)})")
        for rank in ranks:
            if rank >= group.world_size:
                raise ConfigError(f"{key}.{name}",
                                  f"rank {rank} is outside world size {group.world_size}")
            planned = next((i for i, p in enumerate(out) if (p.group, p.rank) == (name, rank)),
                           None)
            if planned is not None and out[planned].backend != "nsys":
                raise ConfigError(f"{key}.{name}", f"rank {rank} is profiled with "
                                  f"{out[planned].backend} by the plan; one process runs one "
                                  "tool (arm another rank, or plan it with nsys)")
            launch = worker_launch(nsys, topology, group, rank, 0, warnings)
            if planned is not None:
                out[planned] = dataclasses.replace(out[planned], launch_argv=launch.argv,
                                                   launch_env=dict(launch.env),
                                                   trigger=launch.trigger,
                                                   open_ended=launch.open_ended)
                continue
            out.append(ProcessPlan(
                group=name, rank=rank, roles=group.roles, selected_roles=group.roles,
                mode="whole", backend="nsys", windows=(), launch_argv=launch.argv,
                launch_env=dict(launch.env), trigger=launch.trigger,
                open_ended=launch.open_ended, world_size=group.world_size,
                raw_dir=paths.raw_dir(config.output_dir, name, rank),
                window_time=_window_time(nsys)))
    return out


def _has_windows(config: ProfilingConfig, roles: Tuple[str, ...], mode: Mode,
                 group: GroupTopology, rank: int, warnings: List[str]) -> bool:
    """A discrete process opens a window per phase call of its selecting roles: with no such
    phase it would wait for a capture that never comes (nsys needs repeat:N >= 1)."""
    if mode != "discrete" or any(_phases(config, role) for role in roles):
        return True
    keys = ", ".join(config.components.get(r).ranks_key or r for r in roles)
    warnings.append(f"{keys}: {group.name} rank {rank} is selected in discrete mode, but no "
                    f"method of {', '.join(roles)} opens a window (no annotated phase; set "
                    "trainer.profiler.phases), so it is not profiled")
    return False


def _finish_hook(config: ProfilingConfig, processes: List[ProcessPlan],
                 warnings: List[str]) -> Optional[FinishHookPlan]:
    hook = config.finish_hook
    if hook.cmd is None:
        return None
    key = hook.key or "trainer.profiler.finish_hook.cmd"
    targets: Tuple[Target, ...] = ()
    if hook.all_ranks:
        targets = tuple((p.group, p.rank) for p in processes)
    elif hook.ranks:
        targets = tuple((p.group, p.rank) for p in processes if p.rank in hook.ranks)
        missing = sorted(set(hook.ranks) - {p.rank for p in processes})
        if missing:
            warnings.append(f"{key}: rank(s) {missing} named for the finish hook have no "
                            "profiled process; the hook runs where verlprof profiles"
                            + ("" if targets else ": on the controller's host"))
    return FinishHookPlan(cmd=hook.cmd, targets=targets, timeout_s=hook.timeout_s, key=key)


def _component(config: ProfilingConfig, group: GroupTopology, role: str) -> ComponentConfig:
    """The block that selects ``role``'s ranks in ``group``: the rollout's own block for the
    rollout replicas where it was set apart from the actor's (verl's servers read it); a
    distillation teacher's ``inference.profiler`` for its replicas."""
    if group.name == ROLLOUT_REPLICAS and config.rollout_replicas is not None:
        return config.rollout_replicas
    if role == TEACHER:  # a served-only role: each teacher's own block, none when not given
        return config.teachers.get(group.name, ComponentConfig())
    return config.components.get(role)


def _selects(component: ComponentConfig, rank: int, group: GroupTopology) -> bool:
    """The component selects ``rank`` of ``group``; a served group's rank is a server, which
    any global rank of its replica selects."""
    if component.all_ranks:
        return True
    if not group.served:
        return rank in component.ranks
    replica = rank // group.servers_per_replica
    return any(r // group.replica_span == replica for r in component.ranks)


def _check_ranks(config: ProfilingConfig, topology: Topology, warnings: List[str]) -> None:
    served = [(ROLLOUT_REPLICAS, "rollout", config.rollout_replicas),
              *((name, TEACHER, block) for name, block in config.teachers.items())]
    for name, what, selection in served:
        replicas = topology.group(name)
        if selection is None or replicas is None:
            continue
        size = replicas.world_size * replicas.rank_span
        for rank in selection.ranks:
            if rank >= size:
                raise ConfigError(selection.ranks_key,
                                  f"rank {rank} is outside the {what} replicas' {size} GPUs")
    for role in ("actor", "rollout", "ref", "critic", "rm"):
        component = config.components.get(role)
        group = topology.group_of(role)
        if group is None:
            if component.selects_any:
                warnings.append(f"{component.ranks_key or role}: the {role} role is not deployed "
                                f"in this run, so nothing of it is profiled")
            continue
        size = group.world_size * group.rank_span  # a served model's ranks are its GPUs'
        for rank in component.ranks:
            if rank >= size:
                raise ConfigError(component.ranks_key or f"{role}.profile_ranks",
                                  f"rank {rank} is outside world size {size}")


def _group_mode(config: ProfilingConfig, group: GroupTopology) -> Mode:
    """Colocated roles share one process and one capture, so they must agree on discrete."""
    deciding = [config.components.get(r) for r in group.roles
                if config.components.get(r).selects_any]
    for first, other in zip(deciding, deciding[1:]):
        if first.discrete != other.discrete:
            raise ConfigError(other.discrete_key or "profile_discrete",
                              f"{str(other.discrete).lower()}, but {first.discrete_key} is "
                              f"{str(first.discrete).lower()}; roles colocated in {group.name} "
                              f"share one process and one capture, so they must agree")
    return "discrete" if deciding and deciding[0].discrete else "whole"


def _phases(config: ProfilingConfig, role: str) -> Tuple[str, ...]:
    return tuple(sorted(config.phases.get(role, ROLE_PHASES[role]), key=_phase_rank))


def process_windows(config: ProfilingConfig, group: GroupTopology, rank: int,
                     roles: Tuple[str, ...], mode: Mode,
                     step_windows: Tuple[StepWindow, ...],
                     per_process: bool = False) -> Tuple[Window, ...]:
    # a tool writing one output per process at exit (rocprof-sys): every window's report is
    # that output, named for the process's group and its first to last profiled step
    shared = paths.report_relpath(config.filename_template, tuple(s for w in step_windows
                                                                  for s in w),
                                  group.name, rank, config.tool) if per_process else None

    def report(steps: StepWindow, component: str, role: Optional[str] = None,
               phase: Optional[str] = None) -> Report:
        path = shared or paths.report_relpath(config.filename_template, steps, component, rank,
                                              config.tool)
        return Report(steps=steps, group=group.name, rank=rank, component=component,
                      backend=config.tool, path=path, role=role, phase=phase,
                      roles=(role,) if role else group.roles)

    if mode == "whole":
        return tuple(Window(steps=w, report=report(w, group.name)) for w in step_windows)
    calls = sorted(((role, phase) for role in roles for phase in _phases(config, role)),
                   key=lambda call: _phase_rank(call[1]))
    return tuple(Window(steps=(step,), role=role, phase=phase,
                        report=report((step,), paths.discrete_component(role, phase), role,
                                      phase))
                 for (step,) in step_windows for role, phase in calls)


def _process_plan(config: ProfilingConfig, topology: Topology, group: GroupTopology,
                  rank: int, selecting: Tuple[str, ...], mode: Mode,
                  step_windows: Tuple[StepWindow, ...], window_time: WindowTime,
                  warnings: List[str]) -> ProcessPlan:
    windows = process_windows(config, group, rank, selecting, mode, step_windows,
                              TOOL_TRAITS[config.tool].output_at_exit)
    launch = worker_launch(config, topology, group, rank, len(windows), warnings)
    return ProcessPlan(group=group.name, rank=rank, roles=group.roles, selected_roles=selecting,
                       mode=mode, backend=config.tool, windows=windows, launch_argv=launch.argv,
                       launch_env=dict(launch.env), trigger=launch.trigger,
                       open_ended=launch.open_ended,
                       raw_dir=paths.raw_dir(config.output_dir, group.name, rank),
                       world_size=group.world_size,
                       capture_options=capture_options(config, group, launch.capture_options),
                       window_time=window_time)


def capture_options(config: ProfilingConfig, group: GroupTopology,
                    tool_options: TorchCapture) -> TorchCapture:
    """The tool's options for one process, with ``all_threads`` where the work does not run
    on the thread its windows open from, so an in-process profiler (torch) follows every
    thread: a served model's server answers on its event loop, and verl's workers are async
    Ray actors (``update_weights`` is a coroutine), where the controller's calls and the
    phases run on different threads (without it, verl's training ranks wrote torch traces
    with no phase in them)."""
    every_thread = group.served or config.verl_release is not None
    return dataclasses.replace(tool_options, all_threads=True) if every_thread else tool_options


def _window_time(config: ProfilingConfig) -> WindowTime:
    bounds = WindowTime(delay_s=config.window_delay_s, duration_s=config.window_duration_s)
    if bounds.bounded and not TOOL_TRAITS[config.tool].time_windows:
        key = "window_delay_s" if bounds.delay_s else "window_duration_s"
        raise ConfigError(f"trainer.profiler.{key}", f"{config.tool} cannot bound a window "
                                                     "in time; leave it out for this tool")
    return bounds


def _controller_plan(config: ProfilingConfig, topology: Topology,
                     windows: Tuple[StepWindow, ...], warnings: List[str]) -> ControllerPlan:
    launch = controller_launch(config, topology, len(windows), warnings)
    if launch is None:
        return ControllerPlan()
    return ControllerPlan(launch_argv=launch.argv, launch_env=dict(launch.env), windows=windows,
                          output_glob=f"{paths.CONTROLLER_DIR}/controller_*{paths.EXTENSIONS[config.tool]}")
