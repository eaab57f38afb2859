"""The profiling plan: a pure function from (config, topology) to everything that will happen.

``build_plan`` decides, before any process starts: which steps are captured and how they group
into windows, which rank of which group is selected and in which mode, which roles' phases open
discrete windows, the exact launch argv of each wrapped rank (with ``repeat:N`` equal to the
windows that process will open), and the contract path of every report. The controller, the
workers and collection only execute it; none of them re-derives a decision.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import dacite

from verlprof import commands, paths
from verlprof.config.schema import ComponentConfig, ProfilingConfig
from verlprof.errors import ConfigError
from verlprof.topology import GroupTopology, Topology

ROLE_PHASES: Dict[str, Tuple[str, ...]] = {
    "rollout": ("generate_sequences",),
    "actor": ("compute_log_prob", "update_actor"),
    "ref": ("compute_ref_log_prob",),
    "critic": ("compute_values", "update_critic"),
    "rm": ("compute_rm_score",),
}
"""Annotated phases of each role in a PPO step (``trainer.profiler.phases`` overrides)."""

PHASE_ORDER = ("generate_sequences", "compute_log_prob", "compute_ref_log_prob",
               "compute_values", "compute_rm_score", "update_critic", "update_actor")
"""The order phases run in within a PPO step (plan listings follow it)."""


@dataclass(frozen=True)
class Report:
    """One report the plan expects to exist when the run ends."""

    steps: Tuple[int, ...]
    """Steps the report covers (several for a continuous window)."""
    group: str
    """Worker group of the process, or ``controller``."""
    rank: int
    """Rank within the group (0 for the controller)."""
    component: str
    """Path component: the group (whole-step) or ``<role>.<phase>`` (discrete)."""
    backend: str
    """``nsys``, ``torch`` or ``rocprof_sys``."""
    path: str
    """Contract path relative to output_dir, with ``{host}``/``{pid}`` still to fill."""
    role: Optional[str] = None
    """Role whose phase opened the window (discrete only)."""
    phase: Optional[str] = None
    """Phase (annotated method) that opened the window (discrete only)."""


@dataclass(frozen=True)
class Window:
    """One capture window a process opens, in the order it opens them."""

    steps: Tuple[int, ...]
    """Training steps of the window (one, or a consecutive run when continuous)."""
    report: Report
    """The report this window produces."""
    role: Optional[str] = None
    """Discrete windows: the role whose phase opens it."""
    phase: Optional[str] = None
    """Discrete windows: the phase that opens it (the first call of it in the step)."""


@dataclass(frozen=True)
class ProcessPlan:
    """What one selected worker process does. Unselected processes have no plan at all."""

    group: str
    """Worker group (``actor_rollout_ref``, ``critic``, ``rm``, or a role without hybrid)."""
    rank: int
    """Rank within the group."""
    roles: Tuple[str, ...]
    """Roles colocated in this process."""
    selected_roles: Tuple[str, ...]
    """Roles whose config selects this rank (only their phases open discrete windows)."""
    mode: str
    """``whole`` (one window per step window) or ``discrete`` (one per phase call)."""
    backend: str
    """Backend of this process."""
    windows: Tuple[Window, ...]
    """Every window this process opens, in order."""
    launch_argv: Tuple[str, ...] = ()
    """Command prefix placed before the interpreter (empty: not wrapped)."""
    launch_env: Dict[str, str] = field(default_factory=dict)
    """Environment the wrapped process needs."""
    raw_dir: str = ""
    """Where the process writes before collection renames its reports."""
    world_size: int = 1
    """World size of the process's group (recorded in torch traces)."""
    capture_options: Dict[str, Any] = field(default_factory=dict)
    """Settings the in-process backend applies to each window (torch: ``record_shapes``,
    ``profile_memory``, ``with_stack``, ``cuda``)."""

    @property
    def reports(self) -> Tuple[Report, ...]:
        """Reports this process is expected to produce."""
        return tuple(w.report for w in self.windows)


@dataclass(frozen=True)
class ControllerPlan:
    """The controller's own capture (only when controller options are set, nsys only)."""

    launch_argv: Tuple[str, ...] = ()
    """``nsys profile ...`` prefix for the controller process (empty: not profiled)."""
    launch_env: Dict[str, str] = field(default_factory=dict)
    """Environment for the wrapped controller."""
    windows: Tuple[Tuple[int, ...], ...] = ()
    """Step windows the controller captures (bounded to the profiled steps)."""
    output_glob: str = ""
    """Glob (relative to output_dir) matching the controller's reports."""


@dataclass(frozen=True)
class ProfilePlan:
    """Everything that will be profiled, decided before the run starts."""

    enabled: bool
    """False when nothing is profiled (no steps, disabled, or no rank selected)."""
    tool: str
    """Backend for every selected process."""
    output_dir: str
    """Absolute output directory."""
    step_windows: Tuple[Tuple[int, ...], ...]
    """Step windows in order: ``((1, 2), (5,))`` when continuous, else one step each."""
    groups: Tuple[GroupTopology, ...]
    """All worker groups of the run (selected or not)."""
    processes: Tuple[ProcessPlan, ...]
    """Selected processes only."""
    controller: ControllerPlan
    """The controller's own capture."""
    source: str = "seed"
    """Config layout the plan was built from."""
    warnings: Tuple[str, ...] = ()
    """Settings that had no effect, one line each."""
    worker_options_key: str = "trainer.worker_nsight_options"
    """Config key of the workers' launch options (named by errors about their command)."""
    controller_options_key: str = "trainer.controller_nsight_options"
    """Config key of the controller's launch options (named by errors about its command)."""

    @property
    def steps(self) -> Tuple[int, ...]:
        """Every profiled step."""
        return tuple(s for window in self.step_windows for s in window)

    def process(self, group: str, rank: int) -> Optional[ProcessPlan]:
        """The plan of (group, rank), or None when that process is not profiled."""
        return next((p for p in self.processes if p.group == group and p.rank == rank), None)

    def window_starting_at(self, step: int) -> Optional[Tuple[int, ...]]:
        """The step window that opens at ``step``, if any."""
        return next((w for w in self.step_windows if w[0] == step), None)

    def window_after(self, window: Tuple[int, ...]) -> Optional[Tuple[int, ...]]:
        """The step window that follows ``window`` in order (None after the last)."""
        if window not in self.step_windows:
            return None
        index = self.step_windows.index(window) + 1
        return self.step_windows[index] if index < len(self.step_windows) else None

    def window_ending_at(self, step: int) -> Optional[Tuple[int, ...]]:
        """The step window that closes after ``step``, if any."""
        return next((w for w in self.step_windows if w[-1] == step), None)

    @property
    def reports(self) -> Tuple[Report, ...]:
        """Every worker report expected, in plan order."""
        return tuple(r for p in self.processes for r in p.reports)

    def to_dict(self) -> Dict[str, Any]:
        """A JSON-ready dict; :meth:`from_dict` inverts it exactly."""
        return asdict(self)

    def to_json(self, indent: int = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> ProfilePlan:
        return dacite.from_dict(cls, data, config=dacite.Config(cast=[tuple], strict=True))


def group_step_windows(steps: Tuple[int, ...], continuous: bool) -> Tuple[Tuple[int, ...], ...]:
    """Split sorted steps into windows: runs of consecutive steps when continuous."""
    windows: List[List[int]] = []
    for step in sorted(steps):
        if continuous and windows and windows[-1][-1] == step - 1:
            windows[-1].append(step)
        else:
            windows.append([step])
    return tuple(tuple(w) for w in windows)


def build_plan(config: ProfilingConfig, topology: Topology) -> ProfilePlan:
    """The plan for ``config`` on ``topology``. Pure: no Ray, no I/O, no clock.

    Raises :class:`ConfigError` naming the full key for choices the topology makes invalid
    (a rank beyond its group's world size, colocated roles disagreeing on discrete mode).
    """
    warnings: List[str] = []
    _check_ranks(config, topology, warnings)
    windows = group_step_windows(config.steps, config.continuous_steps)
    if not config.active:
        return ProfilePlan(False, config.tool, config.output_dir, windows, topology.groups, (),
                           ControllerPlan(), config.source, tuple(warnings),
                           config.nsys.worker_options_key, config.nsys.controller_options_key)
    trigger = None
    if config.tool == "nsys":
        key = config.nsys.worker_options_key
        commands.check_trace_has_nvtx(config.nsys.worker_options, key)
        trigger, _ = commands.resolve_trigger(config.nsys, key, topology.cuda)
    processes = []
    for group in topology.groups:
        mode = _group_mode(config, group)
        for rank in range(group.world_size):
            selecting = tuple(r for r in group.roles if _selects(config.components.get(r), rank))
            if selecting:
                processes.append(_process_plan(config, topology, group, rank, selecting, mode,
                                               windows, trigger, warnings))
    return ProfilePlan(bool(processes), config.tool, config.output_dir, windows, topology.groups,
                       tuple(processes), _controller_plan(config, topology, windows, warnings),
                       config.source, tuple(dict.fromkeys(warnings)),
                       config.nsys.worker_options_key, config.nsys.controller_options_key)


def _selects(component: ComponentConfig, rank: int) -> bool:
    return component.all_ranks or rank in component.ranks


def _check_ranks(config: ProfilingConfig, topology: Topology, warnings: List[str]) -> None:
    for role in ("actor", "rollout", "ref", "critic", "rm"):
        component = config.components.get(role)
        group = topology.group_of(role)
        if group is None:
            if component.selects_any:
                warnings.append(f"{component.ranks_key or role}: the {role} role is not deployed "
                                f"in this run, so nothing of it is profiled")
            continue
        for rank in component.ranks:
            if rank >= group.world_size:
                raise ConfigError(component.ranks_key or f"{role}.profile_ranks",
                                  f"rank {rank} is outside world size {group.world_size}")


def _group_mode(config: ProfilingConfig, group: GroupTopology) -> str:
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
    phases = config.phases.get(role, ROLE_PHASES[role])
    rank = {p: i for i, p in enumerate(PHASE_ORDER)}
    return tuple(sorted(phases, key=lambda p: rank.get(p, len(PHASE_ORDER))))


def _process_windows(config: ProfilingConfig, group: GroupTopology, rank: int,
                     roles: Tuple[str, ...], mode: str,
                     step_windows: Tuple[Tuple[int, ...], ...]) -> Tuple[Window, ...]:
    def report(steps, component, role=None, phase=None):
        path = paths.report_relpath(config.filename_template, steps, component, rank, config.tool)
        return Report(steps, group.name, rank, component, config.tool, path, role, phase)

    if mode == "whole":
        return tuple(Window(w, report(w, group.name)) for w in step_windows)
    calls = [(role, phase) for role in roles for phase in _phases(config, role)]
    order = {p: i for i, p in enumerate(PHASE_ORDER)}
    calls.sort(key=lambda rp: order.get(rp[1], len(PHASE_ORDER)))
    return tuple(Window((step,), report((step,), paths.discrete_component(role, phase), role,
                                        phase), role, phase)
                 for (step,) in step_windows for role, phase in calls)


def _process_plan(config: ProfilingConfig, topology: Topology, group: GroupTopology, rank: int,
                  selecting: Tuple[str, ...], mode: str,
                  step_windows: Tuple[Tuple[int, ...], ...], trigger: Optional[str],
                  warnings: List[str]) -> ProcessPlan:
    windows = _process_windows(config, group, rank, selecting, mode, step_windows)
    argv: Tuple[str, ...] = ()
    env: Dict[str, str] = {}
    options: Dict[str, Any] = {}
    if config.tool == "nsys":
        argv = commands.nsys_argv(
            config.nsys, options=config.nsys.worker_options, flags=config.nsys.worker_flags,
            options_key=config.nsys.worker_options_key, trigger=trigger, windows=len(windows),
            output=paths.raw_prefix(config.output_dir, group.name, rank),
            cpu_only=not topology.cuda, warnings=warnings)
        env = dict(commands.NSYS_NVTX_ENV) if trigger == "nvtx" else {}
    elif config.tool == "torch":
        options = asdict(config.torch)
    elif config.tool == "rocprof_sys":
        argv = commands.rocprof_argv(config.rocprof_sys, "trainer.profiler.rocprof_sys.args")
        env = commands.rocprof_env(config.rocprof_sys, config.output_dir, group.name, rank)
    return ProcessPlan(group.name, rank, group.roles, selecting, mode, config.tool, windows, argv,
                       env, paths.raw_dir(config.output_dir, group.name, rank), group.world_size,
                       options)


def _controller_plan(config: ProfilingConfig, topology: Topology,
                     windows: Tuple[Tuple[int, ...], ...], warnings: List[str]) -> ControllerPlan:
    """The controller always uses the nvtx trigger: it does no GPU work of its own."""
    if config.tool != "nsys" or not config.nsys.controller_options:
        return ControllerPlan()
    key = config.nsys.controller_options_key
    commands.check_trace_has_nvtx(config.nsys.controller_options, key)
    argv = commands.nsys_argv(
        config.nsys, options=config.nsys.controller_options, flags=config.nsys.controller_flags,
        options_key=key, trigger="nvtx", windows=len(windows),
        output=paths.controller_prefix(config.output_dir), cpu_only=not topology.cuda,
        warnings=warnings)
    return ControllerPlan(argv, dict(commands.NSYS_NVTX_ENV), windows,
                          f"{paths.CONTROLLER_DIR}/controller_*{paths.EXTENSIONS['nsys']}")
