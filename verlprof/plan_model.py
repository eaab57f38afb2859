"""The plan's model: what will be profiled, as frozen records (the output of ``build_plan``).

A :class:`ProfilePlan` is built once, on the driver, by :func:`verlprof.plan.build.build_plan`;
everything downstream (launch, controller, workers, collection) reads it and decides nothing.
Each selected process receives its :class:`ProcessPlan` over Ray.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Optional, Tuple

import dacite

from verlprof.config.schema import OnDemandConfig, ProfilingConfig
from verlprof.config.topology import GroupTopology, Topology, UnprofiledGroup
from verlprof.records import (
    ExistingRun,
    Mode,
    OnRankFailure,
    Place,
    ReportIdentity,
    StepWindow,
    Summarise,
    Target,
    Tool,
    Trigger,
    VerlRelease,
)


@dataclass(frozen=True)
class TorchCapture:
    """What the torch profiler records in each window of one process (the config's
    ``trainer.profiler.torch``, plus what the plan adds)."""

    record_shapes: bool = False
    profile_memory: bool = False
    with_stack: bool = False
    cuda: Optional[bool] = None
    """Trace CUDA activity; None: when CUDA is available."""
    all_threads: bool = False
    """Every thread of the process, not only the one its windows open from (a served model's
    event loop, verl's async workers)."""


@dataclass(frozen=True)
class Launch:
    """How one process is started under the profiler (all empty: not wrapped)."""

    argv: Tuple[str, ...] = ()
    """Command prefix placed before the interpreter."""
    env: Dict[str, str] = field(default_factory=dict)
    """Environment the wrapped process needs."""
    capture_options: TorchCapture = field(default_factory=TorchCapture)
    """What an in-process capture (torch) records in each window."""
    trigger: Optional[Trigger] = None
    """nsys: how a window opens (see :attr:`ProcessPlan.trigger`)."""
    open_ended: bool = False
    """nsys: an armed rank's session (see :attr:`ProcessPlan.open_ended`)."""


OPEN_ENDED = "--capture-range-end=repeat"
"""An armed nsys rank's window count in its argv: as many as requests open (no ``:N``);
:attr:`ProcessPlan.open_ended` says so to the code that runs the plan."""

NSYS_NVTX_ENV = {"NSYS_NVTX_PROFILER_REGISTER_ONLY": "0"}
"""Lets the capture range name match an unregistered NVTX string (else: no report, exit 0)."""

ROLE_PHASES: Dict[str, Tuple[str, ...]] = {
    "rollout": ("generate_sequences",),
    "actor": ("compute_log_prob", "update_actor"),
    "ref": ("compute_ref_log_prob",),
    "critic": ("compute_values", "update_critic"),
    "rm": ("compute_rm_score",),
}
"""Annotated phases of each role in a PPO step (``trainer.profiler.phases`` overrides)."""

PHASE_ORDER = ("generate_sequences", "compute_log_prob", "compute_ref_log_prob",
               "compute_values", "compute_rm_score", "update_critic", "train_batch",
               "update_actor")
"""The order phases run in within a PPO step (plan listings follow it)."""


Report = ReportIdentity
"""One report the plan expects to exist when the run ends (see :class:`ReportIdentity`)."""


@dataclass(frozen=True)
class RunPolicy:
    """How the controller behaves under faults (``trainer.profiler.*``; arguments of
    :class:`~verlprof.runtime.controller.ProfileController` override them)."""

    # the defaults are the schema's: each key is defined once (verlprof/config/schema.py)
    on_rank_failure: OnRankFailure = ProfilingConfig.on_rank_failure
    """``continue``: record a failed rank and carry on; ``raise``: stop every window and raise."""
    rpc_timeout_s: float = ProfilingConfig.rpc_timeout_s
    """Seconds a start/stop RPC to a rank is waited for."""
    finalize_timeout_s: float = ProfilingConfig.finalize_timeout_s
    """Seconds each rank may take to finish writing its reports at the end."""
    existing_run: ExistingRun = ProfilingConfig.existing_run
    """What a run does when output_dir already holds another run (runtime/ownership.py)."""
    summarise: Summarise = ProfilingConfig.summarise
    """When reports are summarised on their nodes (runtime/summarise.py)."""
    place: Place = ProfilingConfig.place
    """When closed windows' reports leave their nodes (runtime/placement.py)."""


@dataclass(frozen=True)
class WindowTime:
    """Time bounds inside every window (``trainer.profiler.window_delay_s`` and
    ``window_duration_s``), counted from the start of its step or phase call."""

    delay_s: float = 0.0
    """The window opens this long after its step (phase call) starts."""
    duration_s: Optional[float] = None
    """It closes this long after it opened, or at the step's end if sooner (None: the end)."""

    @property
    def bounded(self) -> bool:
        return self.delay_s > 0 or self.duration_s is not None

    def describe(self) -> str:
        """``opens 30 s into its step, closes 60 s later or at the step's end``."""
        opens = f"opens {self.delay_s:g} s into its step" if self.delay_s else \
            "opens when its step starts"
        closes = (f"closes {self.duration_s:g} s later or at the step's end, whichever comes "
                  "first" if self.duration_s is not None else "closes at the step's end")
        return f"{opens}, {closes}"


@dataclass(frozen=True)
class Window:
    """One capture window a process opens, in the order it opens them."""

    steps: StepWindow
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
    mode: Mode
    """``whole`` (one window per step window) or ``discrete`` (one per phase call)."""
    backend: Tool
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
    capture_options: TorchCapture = field(default_factory=TorchCapture)
    """What the in-process backend records in each window (torch; unused by the others)."""
    window_time: WindowTime = field(default_factory=WindowTime)
    """Time bounds inside each window of this process."""
    trigger: Optional[Trigger] = None
    """nsys: how a window opens, ``nvtx`` (a capture range) or ``cuda``
    (``cudaProfilerStart``), as the launch argv's ``--capture-range`` says; None for other
    tools."""
    open_ended: bool = False
    """nsys: launched for as many windows as requests open (an armed rank,
    :data:`OPEN_ENDED`): its reports come at exit, unnumbered by window."""

    @property
    def reports(self) -> Tuple[Report, ...]:
        """Reports this process is expected to produce."""
        return tuple(w.report for w in self.windows)


@dataclass(frozen=True)
class TokenWindow:
    """Which engine iterations of a profiled step an engine's profiler records (verl's
    ``profile_token_start/end``: one iteration generates one token per running sequence;
    vLLM's ``delay_iterations`` / ``max_iterations``, SGLang's ``start_step`` / ``num_steps``)."""

    start: int = 0
    """Iterations after ``start_profile`` before recording begins."""
    end: Optional[int] = None
    """Iteration at which recording ends (exclusive); None: at ``stop_profile``."""

    def describe(self) -> str:
        if self.start == 0 and self.end is None:
            return "every engine iteration"
        return f"engine iterations {self.start} to {'the end' if self.end is None else self.end}"


@dataclass(frozen=True)
class EngineRoute:
    """verl's own engine profiling on a served group's replicas, driven by verlprof: on each of
    ``steps`` the replicas' servers get verl's ``start_profile`` / ``stop_profile`` (each server
    decides by verl's rollout profiler block whether its engine profiles), and the traces the
    engines write into ``<trace_dir>/agent_loop_rollout_replica_<r>/`` are moved into
    ``<output_dir>/step<N>/<group>/verl_engine/replica<r>/`` and listed in the manifest."""

    group: str
    steps: Tuple[int, ...]
    trace_dir: str
    tokens: TokenWindow
    key: str
    """The config block it was read from (``...rollout.profiler.tool_config.torch``)."""


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
class FinishHookPlan:
    """The command the controller runs once every report is gathered (``finish_hook``)."""

    cmd: str
    """Shell command (``/bin/sh -c``)."""
    targets: Tuple[Target, ...] = ()
    """Profiled processes on whose nodes it runs, once each; empty: the controller's host."""
    timeout_s: float = 600.0
    """Seconds it may run before it is killed."""
    key: str = "trainer.profiler.finish_hook.cmd"
    """Config key of the command (named by messages about it)."""


@dataclass(frozen=True)
class SizeKind:
    """One kind of report in the size estimate (a row of :data:`verlprof.plan.size.REPORT_BYTES`)
    and how many of it the run writes."""

    kind: str
    """``nsys whole-step, CUDA traced``, ``torch discrete, CPU only``, ``nsys controller``."""
    reports: int
    """Reports of this kind over the run."""
    bytes_per_step: int
    """Estimated bytes of one such report per step its window covers."""
    basis: str
    """Where the figure comes from (a measurement, a published size)."""


@dataclass(frozen=True)
class SizePlan:
    """The run's size budget and the estimate it is held against, per step window."""

    max_total_bytes: Optional[int] = None
    """The budget in bytes (``trainer.profiler.max_total_bytes``, ``auto`` resolved); None: none."""
    basis: str = ""
    """How an ``auto`` budget was found; empty when it was given."""
    window_bytes: Tuple[int, ...] = ()
    """Estimated bytes of each of the plan's step windows, in order (every report it makes)."""
    kinds: Tuple[SizeKind, ...] = ()
    """The estimate by kind of report."""
    key: str = "trainer.profiler.max_total_bytes"
    """The setting (named by every message about the budget)."""

    @property
    def total_bytes(self) -> int:
        """Estimated bytes of every planned window."""
        return sum(self.window_bytes)


@dataclass(frozen=True)
class PlanInputs:
    """The arguments of ``build_plan`` (it is pure: they give the plan again)."""

    config: ProfilingConfig
    topology: Topology


@dataclass(frozen=True)
class ProfilePlan:
    """Everything that will be profiled, decided before the run starts."""

    enabled: bool
    """False when nothing is profiled (no steps, disabled, or no rank selected)."""
    tool: Tool
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
    policy: RunPolicy = field(default_factory=RunPolicy)
    """How the controller behaves under faults (from ``trainer.profiler``)."""
    finish_hook: Optional[FinishHookPlan] = None
    """Run once after every report is gathered (None: no hook)."""
    unprofiled: Tuple[UnprofiledGroup, ...] = ()
    """Processes of the run that no setting can profile, with the reason."""
    verl_release: Optional[VerlRelease] = None
    """The verl release whose keys the config uses (None: not a verl layout)."""
    window_time: WindowTime = field(default_factory=WindowTime)
    """Time bounds inside every window (the same on every planned rank)."""
    engine_route: Optional[EngineRoute] = None
    """verl's own engine profiling of the rollout replicas (tool torch), when asked for."""
    disabled_reason: str = ""
    """Why profiling is off though steps may be set, naming the key
    (``trainer.profiler.enabled is false``); empty while profiling is on."""
    on_demand: OnDemandConfig = field(default_factory=OnDemandConfig)
    """Capture requests while the job runs (``enabled``) and their caps
    (:mod:`verlprof.plan.request_plan` plans each one)."""
    size: SizePlan = field(default_factory=SizePlan)
    """The size budget and the estimate per window (:mod:`verlprof.plan.size`)."""
    built_from: Optional[PlanInputs] = field(default=None, compare=False)
    """What ``build_plan`` was given: the same plan for another output directory is built
    from it (:func:`verlprof.runtime.ownership.retarget`). Not compared: two configs that
    give the same plan give equal plans."""

    @property
    def steps(self) -> Tuple[int, ...]:
        """Every profiled step."""
        return tuple(s for window in self.step_windows for s in window)

    def group(self, name: str) -> Optional[GroupTopology]:
        """The worker group called ``name``, or None when the plan has none."""
        return next((g for g in self.groups if g.name == name), None)

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
