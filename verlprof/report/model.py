"""The record model every analysis consumes.

Readers (one per backend; :mod:`verlprof.backends.reading` holds what they produce) turn one
report (nsys or torch) into a :class:`ReportData` of raw ranges with absolute
wall-clock times (ns since the epoch), so that ranks of different processes and nodes line up
on one timeline. :mod:`verlprof.report.load` then assigns each range to a training step and
turns it into a :class:`PhaseRecord`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Tuple

from verlprof.backends.reading import RawRange, ReportData, StepMark

CONTROLLER_GROUP = "controller"
"""Manifest group of the controller's own report."""
CONTROLLER_ROLE = "controller"
"""Role of the controller's ``controller/<phase>`` ranges."""

PROBLEM_MISSING = "missing"
"""The manifest says the report never appeared."""
PROBLEM_INCOMPLETE = "incomplete"
"""The manifest says the report was cut short (it is still read when possible)."""
PROBLEM_UNREADABLE = "unreadable"
"""The report exists but could not be read (truncated, corrupt, export failed)."""
PROBLEM_SKIPPED = "skipped"
"""Its window was not opened on purpose (manifest status ``skipped``: the size budget), or its
backend has no reader (rocprof-sys); the reason says which."""


@dataclass(frozen=True)
class PhaseRecord:
    """One call of one phase on one rank, with absolute wall-clock times."""

    step: int
    """Training step (1-indexed, the trainer's global step)."""
    group: str
    """Worker group (``actor_rollout_ref``, ``critic``, ``rm``) or ``controller``."""
    rank: int
    """Rank in the group (0 for the controller)."""
    role: str
    """Role that ran the phase (``actor``, ``rollout``, ``ref``, ``critic``, ``rm``,
    ``controller``)."""
    phase: str
    """Phase (worker method) name, e.g. ``update_actor``."""
    start_ns: int
    """Wall-clock start, ns since the epoch."""
    end_ns: int
    """Wall-clock end, ns since the epoch."""
    kernel_ns: Optional[int] = None
    """GPU kernel time inside the phase; None when the report has no kernel data."""
    kernel_count: Optional[int] = None
    """GPU kernels inside the phase; None when the report has no kernel data."""
    memcpy_ns: Optional[int] = None
    """GPU memcpy time inside the phase; None when the report has no memcpy data."""
    report_path: str = ""
    """Report the record came from, relative to output_dir."""
    host: str = ""
    pid: int = 0

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def name(self) -> str:
        """``<role>/<phase>``."""
        return f"{self.role}/{self.phase}"


@dataclass(frozen=True)
class StepSpan:
    """Where a step starts and ends on the common timeline."""

    step: int
    start_ns: int
    end_ns: int
    source: str
    """``controller`` (its ``step/<n>`` range) or ``records`` (extent of the step's records)."""

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(frozen=True)
class Window:
    """A capture window of one lane (group, rank), drawn behind its phases."""

    group: str
    rank: int
    start_ns: int
    end_ns: int


@dataclass(frozen=True)
class Problem:
    """A report the summary lacks or had to read with care, and why."""

    kind: str
    """``missing``, ``incomplete``, ``unreadable`` or ``skipped``."""
    steps: Tuple[int, ...]
    group: str
    rank: int
    component: str
    path: str
    """Report path relative to output_dir."""
    reason: str
    backend: str = ""
    role: Optional[str] = None
    phase: Optional[str] = None


@dataclass(frozen=True)
class LoadResult:
    """Everything read from one output directory."""

    records: Tuple[PhaseRecord, ...]
    steps: Tuple[StepSpan, ...]
    windows: Tuple[Window, ...]
    problems: Tuple[Problem, ...]
    notes: Tuple[str, ...] = field(default_factory=tuple)
    """Non-fatal remarks (e.g. a range whose step could only be guessed)."""
    read_seconds: float = 0.0
    warnings: Tuple[str, ...] = field(default_factory=tuple)
    """Range names that cannot be shown and the stand-ins that replace them."""

__all__ = ["CONTROLLER_GROUP", "CONTROLLER_ROLE", "LoadResult", "PhaseRecord", "Problem",
           "RawRange", "ReportData", "StepMark", "StepSpan", "Window"]
