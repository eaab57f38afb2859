"""Typed records that cross a process boundary or a file, and the closed choices they use.

Everything the controller sends a worker, every reply a worker sends back, and every entry of
``manifest.json`` is one of these frozen dataclasses, built by keyword. A report has one
identity (:class:`ReportIdentity`) from the plan through the worker's reply into the manifest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Literal, Optional, Tuple, get_args

Tool = Literal["nsys", "torch", "rocprof_sys"]
"""A profiling backend."""
Mode = Literal["whole", "discrete"]
"""``whole``: one window per step window; ``discrete``: one per planned phase call."""
Trigger = Literal["cuda", "nvtx"]
"""What opens an nsys capture range: ``cudaProfilerApi`` or the verlprof NVTX range."""
Status = Literal["ok", "missing", "incomplete", "skipped"]
"""What became of a planned report (``skipped``: its window was not opened on purpose, e.g.
it would have gone past ``trainer.profiler.max_total_bytes``; the reason says why)."""
OnRankFailure = Literal["continue", "raise"]
"""What the controller does when a rank fails or dies."""
ExistingRun = Literal["move_aside", "new_subdir", "refuse", "reuse"]
"""What a run does when its output directory already holds another run's manifest or reports."""
Summarise = Literal["at_end", "per_window", "off"]
"""When a run summarises reports on the nodes that hold them (``trainer.profiler.summarise``)."""
Place = Literal["per_window", "at_end"]
"""When a closed window's reports leave their node (``trainer.profiler.place``)."""
Transfer = Literal["rename", "ray", "direct", "shared"]
"""How a report reached output_dir: renamed on the controller's node, read over Ray from its
node, written there by the tool, or renamed where it was because every node mounts output_dir
(a shared file system: no byte travels)."""
StartReply = Literal["started", "already-started", "not-planned", "finalized", "not-configured"]
"""A worker's answer to ``verlprof_start``."""
StopOutcome = Literal["stopped", "not-started", "not-configured"]
"""What a worker did on ``verlprof_stop``."""
VerlRelease = Literal["0.4.1", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "0.9.0", "0.9.1"]
"""The verl release whose config keys a verl-layout config uses (recognised from the keys; each
release has its own semantics: which block the hybrid worker reads, which rank ``enable`` with
no ranks selects, which methods verl annotates)."""

@dataclass(frozen=True)
class ToolTraits:
    """What the plan must know of a tool, and the backend executes (one place for both)."""

    output_at_exit: bool = False
    """The tool writes one output per process, when the process exits, covering all its
    windows (rocprof-sys): the plan gives every window of a process the same report path,
    finalize records the entries as pending, and ``ProfileController.wait_for_profilers``
    collects them after the workers exit."""
    time_windows: bool = True
    """Whether a window can open late and close early (``window_delay_s``/``_duration_s``)."""


TOOL_TRAITS: Dict[Tool, ToolTraits] = {
    "nsys": ToolTraits(),
    "torch": ToolTraits(),
    # rocprof-sys: one set of files per process, written at exit; time bounds not tried
    # without an AMD GPU, so refused rather than guessed
    "rocprof_sys": ToolTraits(output_at_exit=True, time_windows=False),
}

NSYS_OWNER_ENV = "VERLPROF_NSYS_OWNER"
"""Set to the run's output directory in every nsys launch this run plans, so its teardown ends
those nsys processes (and the agents they leave) and never another job's."""

NVTX_DOMAIN = "verlprof"
"""NVTX domain of every range verlprof emits (the nsys launch and the capture agree on it)."""

CAPTURE_RANGE = "VERLPROF_CAPTURE"
"""Name of the range that opens an nsys capture window (``-p VERLPROF_CAPTURE@verlprof``)."""

STATUS_OK: Status = "ok"
STATUS_MISSING: Status = "missing"
STATUS_INCOMPLETE: Status = "incomplete"
STATUS_SKIPPED: Status = "skipped"
ON_RANK_FAILURE: Tuple[OnRankFailure, ...] = get_args(OnRankFailure)
"""The valid ``on_rank_failure`` values, read from the Literal so they are written once."""
EXISTING_RUN: Tuple[ExistingRun, ...] = get_args(ExistingRun)
"""The valid ``existing_run`` values."""
SUMMARISE: Tuple[Summarise, ...] = get_args(Summarise)
"""The valid ``summarise`` values."""
PLACE: Tuple[Place, ...] = get_args(Place)
"""The valid ``place`` values."""

StepWindow = Tuple[int, ...]
"""Training steps one window covers: one step, or a consecutive run when continuous."""
Target = Tuple[str, int]
"""(group, rank) of a worker process."""


@dataclass(frozen=True)
class ReportIdentity:
    """Which report this is: the same record in the plan, a worker's reply and the manifest."""

    steps: StepWindow
    """Steps the report covers (several for a continuous window)."""
    group: str
    """Worker group of the process (``actor_rollout_ref``, ``critic``, ...) or ``controller``."""
    rank: int
    """Rank within the group (0 for the controller)."""
    component: str
    """Path component: the group (whole-step) or ``<role>.<phase>`` (discrete)."""
    backend: Tool
    """Backend that writes it."""
    path: str
    """Contract path relative to output_dir (``{host}``/``{pid}`` still to fill in the plan)."""
    role: Optional[str] = None
    """Role whose phase opened the window (discrete only)."""
    phase: Optional[str] = None
    """Phase (annotated method) that opened the window (discrete only)."""
    roles: Tuple[str, ...] = ()
    """Roles whose phases the report holds: every role colocated in the process for a
    whole-step report (the window is the process's), the one role for a discrete report."""
    requested_by: Optional[str] = None
    """``user@host`` who asked for the window while the job ran (``verlprof capture``);
    None for a planned window."""
    requested_at: Optional[float] = None
    """When that request was accepted (seconds since the epoch)."""


@dataclass(frozen=True)
class StopReply:
    """A worker's answer to ``verlprof_stop``: what it did, and its wall clock when it
    answered, so that every window gives the controller a clock reading without a call of its
    own (``verlprof.runtime.clock_sync``)."""

    outcome: StopOutcome
    clock_ns: int


@dataclass(frozen=True)
class ProcessIdentity:
    """Where a worker process runs, and whether a profiler wraps it."""

    host: str
    pid: int
    node_id: str = ""
    """Ray node id ("" outside Ray)."""
    under_profiler: bool = False
    """True when nsys or rocprof-sys launched the process."""
    profiler_pid: Optional[int] = None
    """Pid of that nsys / rocprof-sys process."""


@dataclass(frozen=True)
class SessionStatus:
    """A worker's answer to ``verlprof_configure`` and ``verlprof_status``."""

    identity: ProcessIdentity
    configured: bool = False
    """False on a process the controller never configured (not selected)."""
    armed: Optional[StepWindow] = None
    """The step window armed (discrete) or open (whole), if any."""
    open_window: Optional[str] = None
    """Contract path of the window open right now."""
    opened: int = 0
    """Windows opened so far."""
    pending: int = 0
    """Planned windows not opened yet."""
    next: Optional[StepWindow] = None
    """The step window a start without arguments would open."""
    ignored: Tuple[str, ...] = ()
    """Starts that were ignored, one line each (repeats, unplanned steps)."""
    finalized: bool = False
    """The worker handed its reports over; nothing opens again."""


@dataclass(frozen=True)
class FileStamp:
    """A report file as the node that wrote it sees it. On a file system every node mounts
    (NFS, Lustre, GPFS...) the controller's node sees the same inode, size and modification
    time at the same path, and takes the file where it is instead of reading it over Ray."""

    inode: int
    size: int
    mtime_ns: int


@dataclass(frozen=True)
class WorkerReport:
    """A worker's account of one planned report, before collection moves the file."""

    report: ReportIdentity
    status: Status
    raw_path: Optional[str] = None
    """Where the backend wrote it on the worker's node (None when missing)."""
    bytes: int = 0
    reason: Optional[str] = None
    """Why it is missing or incomplete."""
    window_start_ns: Optional[int] = None
    window_end_ns: Optional[int] = None
    where: ProcessIdentity = field(default_factory=lambda: ProcessIdentity(host="", pid=0))
    """The process that wrote it."""
    stamp: Optional[FileStamp] = None
    """The raw file as its node saw it when the report was described (None: not a file)."""
    notes: Tuple[str, ...] = ()
    """What the process has to say about the run, one line each (on its first report only):
    an annotated phase that ran in a profiled step without a window of its own."""


@dataclass(frozen=True)
class CaptureRequest:
    """``verlprof capture``: windows asked of a running job (checked by
    :func:`verlprof.plan.request_plan.screen`, planned by
    :func:`~verlprof.plan.request_plan.plan_request`)."""

    id: str
    """Chosen by the asker (hex), to find the decision again."""
    token: str
    """The job's token (``<output_dir>/.verlprof-token``, owner-only)."""
    steps: str
    """``next:N`` (the N steps from the next boundary), ``S`` or ``S-T``."""
    group: str = ""
    """Worker group ("": the plan's first group)."""
    ranks: Tuple[int, ...] = (0,)
    """Ranks in that group."""
    tool: Optional[Tool] = None
    """Backend of the windows (None: the run's tool)."""
    discrete: bool = False
    """One window per annotated phase call instead of one per step."""
    requested_by: str = ""
    """``user@host`` of the asker."""


@dataclass(frozen=True)
class CaptureDecision:
    """The job's answer to a :class:`CaptureRequest`, made at a step boundary."""

    id: str
    accepted: bool
    reason: str = ""
    """Why it was refused: one line."""
    steps: Tuple[int, ...] = ()
    targets: Tuple[Target, ...] = ()
    tool: Optional[Tool] = None
    reports: Tuple[str, ...] = ()
    """Contract paths of the reports it will produce (``{host}``/``{pid}`` still open)."""
    at_step: int = 0
    """The step boundary where it was decided."""


@dataclass(frozen=True)
class JobProgress:
    """What ``verlprof status`` shows of a running job."""

    step: int = 0
    """The last step entered (0: none yet)."""
    open_windows: Tuple[str, ...] = ()
    """On-demand windows open now, ``<group> rank <R> steps <S>``."""
    scheduled: int = 0
    """Accepted windows not opened yet."""
    pending: int = 0
    """Requests queued, not decided yet."""
    accepted: int = 0
    """Requests accepted so far."""
    reports: int = 0
    """On-demand reports whose window has closed (gathered into the manifest at the end)."""
    ended: bool = False
    """The job has finalised: no request is taken any more."""
