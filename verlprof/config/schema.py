"""The profiling configuration: frozen dataclasses, one per concept, a docstring per field.

Every supported input layout (the seed layout, verl's 2025-06/07 per-role ``profiler`` blocks,
verl's ``global_profiler`` layout, NeMo RL's ``NRL_*`` variables) is normalised into these
classes by :mod:`verlprof.config.layouts`; nothing downstream knows which layout was used.
Each setting is defined here once: its name, type, default and docstring. The layout readers
only map their spellings onto these fields (``trainer.profiler`` takes its key lists from them),
and the docstring under each field is the user-facing reference (``docs/config_reference.md`` is
generated from it). Closed choices are the ``Literal`` types of :mod:`verlprof.records`; their
valid values are read from the type. Field order matters: a block's valid keys are listed in
that order in error messages, and the reference lists the settings in it.
"""

from __future__ import annotations

from dataclasses import Field, dataclass, field
from types import MappingProxyType
from typing import Any, Dict, Literal, Mapping, Optional, Tuple, Union, get_args

from verlprof.config.engine import EngineTorchConfig
from verlprof.records import EXISTING_RUN as EXISTING_RUN  # re-exported: a config choice
from verlprof.records import ON_RANK_FAILURE as ON_RANK_FAILURE  # re-exported: a config choice
from verlprof.records import PLACE as PLACE  # re-exported: a config choice
from verlprof.records import SUMMARISE as SUMMARISE  # re-exported: a config choice
from verlprof.records import (
    ExistingRun,
    OnRankFailure,
    Place,
    Summarise,
    Tool,
    Trigger,
    VerlRelease,
)

OptionValue = Union[str, int, float, bool, None]

AUTO_BYTES = "auto"
"""``max_total_bytes: auto``: a share of the output file system's free space, found when the
config is loaded (:mod:`verlprof.config.size_budget`)."""

MaxBytes = Union[int, str, None]
"""A byte budget: bytes, ``auto`` (before the loader resolves it) or None (no budget)."""

NsysTrigger = Literal["auto", Trigger]
"""A trigger as configured: ``auto`` becomes ``cuda`` or ``nvtx`` once the devices are known."""

TOOLS: Tuple[Tool, ...] = get_args(Tool)
"""Profiling backends verlprof can drive."""

ROLES: Tuple[str, ...] = ("actor", "rollout", "ref", "critic", "rm")
"""Components (roles) whose ranks can be profiled."""

TRIGGERS: Tuple[NsysTrigger, ...] = get_args(NsysTrigger)
"""How an nsys capture window is opened: ``cuda`` (cudaProfilerApi), ``nvtx`` (a named range)."""

DEFAULT_FILENAME_TEMPLATE = "{component}_step{step}_rank{rank}_{host}_{pid}"
"""Default report base name; fields: component, step, rank, host, pid."""

SET_BY_LOADER: Mapping[str, Any] = MappingProxyType({"set_by_loader": True})
"""Field metadata of a field the loader fills in (a key for messages, the layout read): no
layout reader accepts it from users, and the reference lists it apart from the settings."""


def set_by_loader(spec: Field[Any]) -> bool:
    """True for a field marked :data:`SET_BY_LOADER`."""
    return bool(spec.metadata.get("set_by_loader"))


@dataclass(frozen=True)
class ComponentConfig:
    """Which ranks of one component (role) are profiled, and how."""

    ranks: Tuple[int, ...] = ()
    """Ranks of the component's worker group to profile. Empty (or ``null``): no rank."""

    all_ranks: bool = False
    """Profile every rank of the group; ``ranks`` is then ignored."""

    discrete: bool = False
    """One report per annotated phase call (e.g. ``update_actor``) instead of one per step."""

    ranks_key: str = field(default="", metadata=SET_BY_LOADER)
    """Full key the ranks were read from, e.g. ``actor_rollout_ref.actor.profile_ranks``; used
    in messages (set by the loader, not by users)."""

    discrete_key: str = field(default="", metadata=SET_BY_LOADER)
    """Full key the discrete flag was read from (set by the loader, for messages)."""

    @property
    def selects_any(self) -> bool:
        """True when at least one rank of this component is selected."""
        return self.all_ranks or bool(self.ranks)


@dataclass(frozen=True)
class ComponentsConfig:
    """Per-component rank selection, one block per role."""

    actor: ComponentConfig = field(default_factory=ComponentConfig)
    """``actor_rollout_ref.actor``: the policy being trained."""

    rollout: ComponentConfig = field(default_factory=ComponentConfig)
    """``actor_rollout_ref.rollout``: sequence generation."""

    ref: ComponentConfig = field(default_factory=ComponentConfig)
    """``actor_rollout_ref.ref``: the frozen reference policy."""

    critic: ComponentConfig = field(default_factory=ComponentConfig)
    """``critic`` (alias ``actor_rollout_ref.critic``): the value model."""

    rm: ComponentConfig = field(default_factory=ComponentConfig)
    """``reward_model`` (alias ``rm``, ``actor_rollout_ref.rm``): the reward model."""

    def get(self, role: str) -> ComponentConfig:
        """The block of ``role`` (one of :data:`ROLES`)."""
        return getattr(self, role)


@dataclass(frozen=True)
class NsysConfig:
    """Nsight Systems options for the controller and the workers."""

    trigger: NsysTrigger = "auto"
    """How windows open: ``cuda`` (torch.cuda.profiler start/stop, needs a GPU), ``nvtx`` (a
    named NVTX range, works on CPU), ``auto`` (``cuda`` when the workers have CUDA)."""

    executable: str = "nsys"
    """The nsys binary (a name on PATH or an absolute path) used on every node."""

    worker_options: Dict[str, OptionValue] = field(default_factory=dict)
    """``nsys profile`` options for worker ranks (``trace: cuda,nvtx``); key ``t`` renders as
    ``-t VALUE``, longer keys as ``--key=VALUE``; ``null`` values are left out."""

    worker_flags: Tuple[str, ...] = ()
    """Bare ``nsys profile`` flags for worker ranks, rendered as ``--flag``."""

    controller_options: Dict[str, OptionValue] = field(default_factory=dict)
    """``nsys profile`` options for the controller. Empty: the controller is not profiled."""

    controller_flags: Tuple[str, ...] = ()
    """Bare ``nsys profile`` flags for the controller."""

    worker_options_key: str = field(default="trainer.worker_nsight_options",
                                    metadata=SET_BY_LOADER)
    """Full key the worker options were read from (set by the loader, for messages)."""

    controller_options_key: str = field(default="trainer.controller_nsight_options",
                                        metadata=SET_BY_LOADER)
    """Full key the controller options were read from (set by the loader, for messages)."""


@dataclass(frozen=True)
class TorchProfilerConfig:
    """Options of the PyTorch profiler backend (Chrome traces, ``.pt.trace.json.gz``)."""

    record_shapes: bool = False
    """Record operator input shapes."""

    profile_memory: bool = False
    """Record tensor allocations and frees."""

    with_stack: bool = False
    """Record Python stacks of operators (large traces)."""

    cuda: Optional[bool] = None
    """Trace CUDA activity; ``null``: when CUDA is available."""


@dataclass(frozen=True)
class RocprofSysConfig:
    """Options of the rocprof-sys backend (AMD GPUs; ``rocprof-sys-python <args> -- python``)."""

    args: Dict[str, OptionValue] = field(default_factory=dict)
    """Arguments of ``rocprof-sys-python``, rendered like nsys options."""

    env: Dict[str, str] = field(default_factory=dict)
    """Extra ``ROCPROFSYS_*`` environment; wins over verlprof's output-path defaults."""

    executable: str = "rocprof-sys-python"
    """The rocprof-sys Python launcher."""


@dataclass(frozen=True)
class FinishHookConfig:
    """A command run once at the end of the run, after every report is gathered (verl's
    ``global_profiler.finish_hook_cmd``), typically to upload the output directory."""

    cmd: Optional[str] = None
    """Shell command, run as ``/bin/sh -c CMD`` once ``manifest.json`` is written. Its
    environment adds ``VERLPROF_OUTPUT_DIR`` and ``VERL_PROFILE_SAVE_PATH`` (the output
    directory), ``VERLPROF_MANIFEST`` and ``VERL_PROFILE_TOOL``. Its exit status and the tail of
    its output go into the manifest; a failing hook loses no report. ``null``: no hook."""

    all_ranks: bool = False
    """Run it on the node of every profiled process (once per process, with
    ``VERL_PROFILE_RANK``) instead of once on the controller's host."""

    ranks: Tuple[int, ...] = ()
    """Run it on the nodes of the profiled processes with these ranks instead of on the
    controller's host. Empty (and ``all_ranks`` false): the controller's host."""

    timeout_s: float = 600.0
    """Seconds the command may run before it is killed (and recorded as failed)."""

    key: str = field(default="", metadata=SET_BY_LOADER)
    """Full key the command was read from (set by the loader, for messages)."""


@dataclass(frozen=True)
class OnDemandConfig:
    """Capture on demand: ``verlprof capture <output_dir>`` asks the running job for windows
    at its next step boundaries (docs/user_guide.md, "Profile a running job")."""

    enabled: bool = False
    """Serve capture requests while the job runs: the controller starts a small named Ray
    actor that queues them and writes ``.verlprof-token`` (owner-only) and
    ``.verlprof-on-demand.json`` into the output directory. Off: nothing is started and a
    step pays nothing."""

    max_steps_per_request: int = 4
    """Most consecutive steps one request may capture (``--steps next:N``)."""

    max_reports_per_request: int = 16
    """Most reports one request may produce (ranks x windows)."""

    max_requests_per_hour: int = 12
    """Accepted requests per rolling hour; more are refused until the hour has passed."""

    max_reports_per_hour: int = 64
    """Reports accepted per rolling hour, over every request."""

    nsys_ranks: Dict[str, Tuple[int, ...]] = field(default_factory=dict)
    """Ranks armed for nsys on demand, per worker group (``{actor_rollout_ref: [0]}``): they
    run under ``nsys profile`` from launch with an open-ended window count
    (``--capture-range-end=repeat``) and the NVTX trigger, so ``verlprof capture --tool nsys``
    can open windows there later; their planned windows, if any, still open. Only these ranks
    take nsys requests. Needs ``enabled``."""


@dataclass(frozen=True)
class ProfilingConfig:
    """Everything verlprof needs to plan a profiled run, from any supported layout."""

    steps: Tuple[int, ...] = ()
    """Training steps to profile (1-indexed, like the trainer's global step). Empty: off."""

    continuous_steps: bool = False
    """Consecutive listed steps share one capture window ([1,2,5] → [1-2], [5])."""

    tool: Tool = "nsys"
    """Backend: ``nsys``, ``torch`` or ``rocprof_sys``."""

    enabled: bool = True
    """Master switch; ``false`` keeps the rest of the settings but profiles nothing."""

    output_dir: str = "outputs/profiling"
    """Where every report, the manifest and the summary end up (on the controller's node)."""

    filename_template: str = DEFAULT_FILENAME_TEMPLATE
    """Base name of each report; fields ``{component}``, ``{step}``, ``{rank}``, ``{host}``,
    ``{pid}``. ``{step}`` is ``5`` or, for a continuous window, ``1-2``."""

    components: ComponentsConfig = field(default_factory=ComponentsConfig)
    """Per-role rank selection."""

    nsys: NsysConfig = field(default_factory=NsysConfig)
    """Nsight Systems options."""

    torch: TorchProfilerConfig = field(default_factory=TorchProfilerConfig)
    """PyTorch profiler options."""

    rocprof_sys: RocprofSysConfig = field(default_factory=RocprofSysConfig)
    """rocprof-sys options."""

    phases: Dict[str, Tuple[str, ...]] = field(default_factory=dict)
    """Annotated phases per role that open a window in discrete mode (each once per step);
    roles left out use verlprof's PPO defaults (``actor: [compute_log_prob, update_actor]``)."""

    rpc_timeout_s: float = 120.0
    """Seconds the controller waits for one start/stop fan-out before naming the late rank."""

    finalize_timeout_s: float = 300.0
    """Seconds to wait for reports to be finalised at the end of a run."""

    on_rank_failure: OnRankFailure = "continue"
    """When a rank dies or an RPC to it fails or times out: ``continue`` names it, marks its
    reports missing with the reason and goes on training; ``raise`` stops every other window
    and raises ``ProfilingRuntimeError`` naming the rank at the step boundary."""

    finish_hook: FinishHookConfig = field(default_factory=FinishHookConfig)
    """A command run once after every report is gathered."""

    on_demand: OnDemandConfig = field(default_factory=OnDemandConfig)
    """Windows asked for while the job runs (``verlprof capture``)."""

    existing_run: ExistingRun = "move_aside"
    """When ``output_dir`` already holds another run (its ``manifest.json``, reports no manifest
    lists, or the lock of a run still going): ``move_aside`` moves that run's files into
    ``<output_dir>/<its run id>/`` and writes this run into ``output_dir``, so ``output_dir``
    always holds the newest run (the paths ``verlprof plan`` prints stay true) and every earlier
    run is kept beside it (``verlprof report --run ID``); ``new_subdir`` writes this run into
    ``<output_dir>/<run id>/`` and leaves the rest untouched; ``refuse`` stops before any worker
    starts, with one line naming that run; ``reuse`` writes into ``output_dir`` anyway (the old
    manifest is replaced, its reports stay on disk unlisted). A run still going there is never
    moved or shared: ``move_aside`` and ``new_subdir`` take a subdirectory, ``refuse`` and
    ``reuse`` stop."""

    summarise: Summarise = "at_end"
    """When each report's summary (what ``verlprof report`` reads out of it) is made on the Ray
    node that holds the report, as a task there (two at once per node, each reserving no CPU:
    the job's actors hold them), so that only the small summary travels and ``verlprof
    report`` reads it instead of the report:
    ``at_end`` after the job (in finalize, on every node at once), ``per_window`` also while
    the job runs, as each window's reports reach the output directory, ``off`` never (then
    ``verlprof report`` reads every report itself, and keeps a summary of each for next time)."""

    place: Place = "per_window"
    """When a closed window's reports leave the node that wrote them for ``output_dir``:
    ``per_window`` while the job runs, by a background thread of the controller (at the lowest
    CPU priority), which also keeps ``manifest.json`` current and the journal ``verlprof
    collect`` reads if the controller dies; ``at_end`` only in finalize, as before any of that
    existed: no thread and no bytes moved while the job runs (say, when moving reports over
    the network could disturb the steps after a window), but a job that dies before finalize
    leaves its reports where they were written, unlisted."""

    window_delay_s: float = 0.0
    """Seconds after its step starts (discrete: after its phase call starts) that each window
    opens on every planned rank; 0 opens it at once. A window whose step ends first captures
    nothing (its report is missing, with the reason). nsys' own ``delay`` option is read as
    this key (nsys would count it from process start, not from the step)."""

    window_duration_s: Optional[float] = None
    """Seconds each window stays open at most; it closes then or at the end of its step
    (phase call), whichever comes first; null: until the step ends. Bounds the size of the
    reports of long steps. nsys' own ``duration`` option is read as this key. The torch
    profiler opens and closes only on its own thread: there the bounds take effect at the
    first phase boundary after them."""

    max_total_bytes: MaxBytes = AUTO_BYTES
    """Most bytes of reports the run may write: a number of bytes or a size (``20GiB``,
    ``500M``); ``auto``: a tenth of the free space of ``output_dir``'s file system when the
    config is loaded, raised to hold the first window while that is at most half of it
    (``verlprof report`` later adds a SQLite export about 3x each nsys report, and the trainer
    writes checkpoints there); ``null``: no budget. ``verlprof plan`` prints the estimate per
    window; while the job runs, the controller measures the reports written and opens no window
    that would go past the budget (its reports are listed as ``skipped``, with the reason). A
    budget that holds not even the first window is refused before the run."""

    max_total_bytes_basis: str = field(default="", metadata=SET_BY_LOADER)
    """How an ``auto`` budget was found (the share, the free space, the directory measured);
    empty when the budget was given (set by the loader, for ``verlprof plan``)."""

    source: str = field(default="seed", metadata=SET_BY_LOADER)
    """Which input layout was read: ``seed``, ``verl_profiler``, ``verl_global_profiler``,
    ``nemo_env`` (recorded in the manifest)."""

    verl_release: Optional[VerlRelease] = field(default=None, metadata=SET_BY_LOADER)
    """The verl release whose keys a verl-layout config uses, recognised from the keys present
    (None for the seed layout); it decides that release's semantics."""

    rollout_engine: Optional[EngineTorchConfig] = field(default=None, metadata=SET_BY_LOADER)
    """verl's own torch profiling of its rollout engines, when the rollout's profiler block
    asks for it (tool torch, enabled, ``discrete: true``); verlprof drives it on its steps and
    gathers the engines' traces."""

    rollout_replicas: Optional[ComponentConfig] = field(default=None, metadata=SET_BY_LOADER)
    """The rollout's own profiler block where it is set apart from the actor's (verl 0.7+):
    verl's rollout servers read it, so it selects the rollout replicas, while the hybrid
    worker's rollout phases follow the actor's block. None: the replicas follow the rollout
    role."""

    teachers: Dict[str, ComponentConfig] = field(default_factory=dict,
                                                 metadata=SET_BY_LOADER)
    """The distillation teachers' selections (verl 0.8+), by plan group (``teacher_replicas``):
    each teacher's ``inference.profiler`` block, which verl itself never reads. A teacher
    without one is not profiled."""

    disabled_reason: str = field(default="", metadata=SET_BY_LOADER)
    """Why ``enabled`` is false, naming the key (``trainer.profiler.enabled is false``); empty
    while enabled. ``verlprof plan`` prints it instead of a bare "off"."""

    @property
    def active(self) -> bool:
        """True when anything at all will be profiled."""
        return self.enabled and bool(self.steps)

    @property
    def serves_requests(self) -> bool:
        """True when the running job takes capture requests (``on_demand.enabled``)."""
        return self.enabled and self.on_demand.enabled
