"""``manifest.json``: one entry per expected report, with its status, written by collection.

The manifest is the contract between the runtime (which writes it) and ``verlprof report``
(which reads it). It lists every report the plan expected, including those that never
appeared (``missing``), were cut short (``incomplete``) or whose window was not opened on
purpose (``skipped``: the size budget), each with the reason, so that a
reader never has to guess what a directory should contain.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import dacite

from verlprof import paths
from verlprof.records import (  # noqa: F401 - the statuses are part of this contract
    STATUS_INCOMPLETE,
    STATUS_MISSING,
    STATUS_OK,
    STATUS_SKIPPED,
    ReportIdentity,
    Status,
    Tool,
    Transfer,
)

MANIFEST_FORMAT = 1


@dataclass(frozen=True)
class ReportEntry:
    """One expected report and what became of it."""

    steps: Tuple[int, ...]
    """Training steps the report covers."""
    group: str
    """Worker group (``actor_rollout_ref``, ``critic``, ``rm``, ...) or ``controller``."""
    rank: int
    """Rank in the group (0 for the controller)."""
    component: str
    """Path component: the group for whole-step reports, ``<role>.<phase>`` for discrete."""
    backend: Tool
    """``nsys``, ``torch`` or ``rocprof_sys``."""
    path: str
    """Path relative to output_dir (the planned one, even when the report is missing)."""
    status: Status
    """``ok``, ``missing``, ``incomplete`` or ``skipped`` (not opened on purpose; manifests
    from before it never hold it and still load)."""
    role: Optional[str] = None
    """Role whose phase opened the window (discrete reports)."""
    phase: Optional[str] = None
    """Phase that opened the window (discrete reports)."""
    host: str = ""
    """Host the process ran on."""
    pid: int = 0
    """Process id of the profiled process."""
    node_id: str = ""
    """Ray node id of the process."""
    bytes: int = 0
    """Size of the report on disk (0 when missing)."""
    reason: Optional[str] = None
    """Why the report is missing, incomplete or skipped."""
    window_start_ns: Optional[int] = None
    """Wall-clock time (ns since the epoch) the window opened, as seen by the process."""
    window_end_ns: Optional[int] = None
    """Wall-clock time (ns since the epoch) the window closed."""
    transfer: Optional[Transfer] = None
    """How the file reached output_dir: ``rename`` (same node), ``ray`` (sent over Ray), or
    ``direct`` (written in place)."""
    roles: Tuple[str, ...] = ()
    """Roles whose phases the report holds (manifests before this field: empty)."""
    requested_by: Optional[str] = None
    """``user@host`` who asked for it while the job ran (None: planned)."""
    requested_at: Optional[float] = None
    """When that request was accepted (seconds since the epoch)."""
    origin: Optional[str] = None
    """``verl``: written by verl's own route (its rollout engines' profiler), gathered by
    verlprof; None: written by verlprof."""
    summary: Optional[str] = None
    """Its summary, relative to output_dir (beside the report, ``verlprof/backends/summary.py``),
    made by the run on the node that held the report; ``verlprof report`` reads it instead of the
    report while it matches the report. None: none made by the run (manifests before this
    field too); ``verlprof report`` makes one when it reads the report."""

    @property
    def identity(self) -> ReportIdentity:
        """The report's identity, as the plan and the worker knew it."""
        return ReportIdentity(steps=self.steps, group=self.group, rank=self.rank,
                              component=self.component, backend=self.backend, path=self.path,
                              role=self.role, phase=self.phase, roles=self.roles,
                              requested_by=self.requested_by, requested_at=self.requested_at)

    @classmethod
    def of(cls, report: ReportIdentity, **outcome: Any) -> ReportEntry:
        """The entry of ``report`` with what became of it (status, host, bytes, ...)."""
        fields = {f: getattr(report, f) for f in ("steps", "group", "rank", "component",
                                                   "backend", "path", "role", "phase", "roles",
                                                   "requested_by", "requested_at")}
        fields.update(outcome)
        return cls(**fields)


@dataclass(frozen=True)
class ProcessInfo:
    """A process that took part in the run."""

    group: str
    rank: int
    host: str
    pid: int
    node_id: str = ""
    under_profiler: bool = False
    """True when the process ran under nsys or rocprof-sys (a wrapped launch)."""
    clock_offset_ns: Optional[int] = None
    """This process's wall clock minus the controller's, in ns: an event at time ``t`` on its
    clock happened at ``t - clock_offset_ns`` on the controller's (None: never measured, as in
    manifests before this field)."""
    clock_error_ns: Optional[int] = None
    """How far :attr:`clock_offset_ns` may be off: half the tightest RPC round trip it was
    measured with (``verlprof.runtime.clock_sync``)."""


@dataclass(frozen=True)
class HookRun:
    """One run of the finish hook (``finish_hook.cmd``, verl's ``finish_hook_cmd``)."""

    cmd: str
    """The shell command."""
    where: str
    """``controller`` or ``<group> rank <R>`` (it ran on that process's node)."""
    host: str = ""
    """Host it ran on."""
    exit_status: Optional[int] = None
    """Its exit status; None when it did not finish (timed out, could not start)."""
    output_tail: str = ""
    """The last characters of its standard output and error, interleaved."""
    duration_s: float = 0.0
    """Seconds it ran."""
    error: Optional[str] = None
    """Why it failed, one line (None when it exited with status 0)."""


@dataclass(frozen=True)
class ServedGroup:
    """A served model's replicas (verl's rollout replicas, the served reward model, a
    distillation teacher): rank ``r`` of the group is server ``r % servers_per_replica`` of
    replica ``r // servers_per_replica``; replica ``i`` owns global GPU ranks
    ``i * gpus_per_replica`` to ``(i + 1) * gpus_per_replica - 1``, split evenly over its
    servers (one per node)."""

    engine: str
    """Its inference engine (``vllm``, ``sglang``, ...)."""
    gpus_per_replica: int
    """GPUs (global ranks) of each replica: tensor x data x pipeline parallel."""
    servers_per_replica: int = 1
    """Servers of each replica, one per node it spans (manifests before this field: 1)."""


@dataclass(frozen=True)
class Manifest:
    """Everything collected in one run."""

    tool: Tool
    """Backend of the run."""
    output_dir: str
    """Absolute output directory at collection time."""
    step_windows: Tuple[Tuple[int, ...], ...]
    """Planned step windows."""
    reports: Tuple[ReportEntry, ...]
    """Every expected report (workers and controller)."""
    controller: Optional[ProcessInfo] = None
    """The controller process."""
    processes: Tuple[ProcessInfo, ...] = ()
    """Every selected worker process."""
    groups: Dict[str, int] = field(default_factory=dict)
    """World size of every worker group."""
    source: str = "seed"
    """Config layout the plan came from."""
    warnings: Tuple[str, ...] = ()
    """Plan warnings and problems met while running."""
    created: str = ""
    """ISO-8601 time the manifest was written."""
    format: int = MANIFEST_FORMAT
    """Manifest format version."""
    verlprof_version: str = ""
    """verlprof version that wrote it."""
    finish_hook: Tuple[HookRun, ...] = ()
    """The finish hook's runs, once each report was gathered (manifests before this field, or
    runs without a hook: empty)."""
    verl_release: Optional[str] = None
    """The verl release whose config keys the run used (None: not a verl layout)."""
    run_id: Optional[str] = None
    """The run that wrote it, ``<UTC yyyymmdd-HHMMSS>-<host>-<pid>`` (manifests before this
    field: None). One run, one manifest: see ``verlprof/runtime/ownership.py``."""
    served: Dict[str, ServedGroup] = field(default_factory=dict)
    """The groups of ``groups`` that are a served model's replicas, by name (empty before this
    field, and in runs without one)."""
    running: bool = False
    """True in a manifest written while the job runs, after an on-demand window's reports were
    gathered (it lists those only); the job's end writes the whole one, False."""

    def by_status(self, status: Status) -> List[ReportEntry]:
        """Entries with ``status``."""
        return [r for r in self.reports if r.status == status]

    def to_dict(self) -> Dict[str, Any]:
        """As JSON data. Entries and processes are flat records (strings, numbers, tuples), so
        they are copied as they are: ``asdict`` deep-copies each field of each of them, which
        takes seconds for the 25,000 entries of 8,192 ranks."""
        head = asdict(dataclasses.replace(self, reports=(), processes=()))
        head["reports"] = [dict(vars(e)) for e in self.reports]
        head["processes"] = [dict(vars(p)) for p in self.processes]
        return head

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> Manifest:
        return dacite.from_dict(cls, data, config=dacite.Config(cast=[tuple]))


def write_manifest(manifest: Manifest, output_dir: str) -> str:
    """The one writer of ``manifest.json``, atomic: a reader never sees half a manifest. A
    running manifest is rewritten as windows close, so it is one line; the final one is laid
    out for people, one report per line. Both by json's C encoder: an ``indent`` runs the
    Python one, 3.6 of the 4.8 s that finalize took for the 24,576 entries of 8,192 ranks."""
    return write_json_atomically(output_dir, paths.MANIFEST_NAME, manifest.to_dict(),
                                 for_people=not manifest.running)


def laid_out_for_people(data: Dict[str, Any]) -> str:
    """``data`` as JSON, one top-level key per line and a list of records one record per line
    (each piece written by json's C encoder)."""
    lines = []
    for key, value in data.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            records = ",\n    ".join(json.dumps(v) for v in value)
            lines.append(f"  {json.dumps(key)}: [\n    {records}\n  ]")
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(lines) + "\n}"


def write_json_atomically(folder: str, name: str, data: Any, for_people: bool = False) -> str:
    """``data`` as ``folder/name`` (one line, or laid out by :func:`laid_out_for_people`),
    through a temporary file renamed over it."""
    os.makedirs(folder, exist_ok=True)
    target = os.path.join(folder, name)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write((laid_out_for_people(data) if for_people else json.dumps(data)) + "\n")
        os.replace(tmp, target)
    except BaseException:
        # A full disk fails the write or the close: the temporary file must not stay behind
        # (a 0-byte .manifest.* is all a user would find), and the old file stays whole.
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return target


def free_space(output_dir: str) -> str:
    """``'12.0 KiB free'`` on ``output_dir``'s file system, for messages about a failed write
    (a full disk is the usual cause, and the number tells the user at once)."""
    try:
        free = float(shutil.disk_usage(output_dir).free)
    except OSError:
        return "free space unknown"
    for unit in ("bytes", "KiB", "MiB"):
        if free < 1024:
            return f"{free:.0f} bytes free" if unit == "bytes" else f"{free:.1f} {unit} free"
        free /= 1024
    return f"{free:.1f} GiB free"


def read_manifest(output_dir: str) -> Manifest:
    """Load ``<output_dir>/manifest.json``; a clear ValueError when absent or malformed."""
    path = os.path.join(output_dir, paths.MANIFEST_NAME)
    try:
        with open(path) as handle:
            data = json.load(handle)
    except FileNotFoundError:
        raise ValueError(f"{path}: no manifest here; is this a verlprof output directory?") \
            from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err.msg} at line {err.lineno})") from None
    try:
        return Manifest.from_dict(data)
    except (dacite.DaciteError, TypeError) as err:
        raise ValueError(f"{path}: not a verlprof manifest ({err})") from None
