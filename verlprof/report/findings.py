"""What ``verlprof report`` found in one output directory: the :class:`Summary` record that
the analyses fill and every output (console, files, pictures) renders."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

from verlprof.manifest import Manifest
from verlprof.report.anatomy import Anatomy
from verlprof.report.model import PhaseRecord, Problem, StepSpan, Window
from verlprof.report.stragglers import Straggler
from verlprof.report.table import PhaseRow, Spread


@dataclass(frozen=True)
class Summary:
    """What ``verlprof report`` found in one output directory."""

    output_dir: str
    manifest: Manifest
    records: Tuple[PhaseRecord, ...]
    """Every phase call, wall-clock times, sorted by start."""
    rows: Tuple[PhaseRow, ...]
    """One per (step, group, rank, role, phase): calls summed (summary.csv)."""
    spreads: Tuple[Spread, ...]
    """Min/median/max across ranks per (step, group, role, phase)."""
    stragglers: Tuple[Straggler, ...]
    missing: Tuple[Problem, ...]
    """Reports missing or incomplete per the manifest, unreadable, or without a reader."""
    steps: Tuple[StepSpan, ...]
    windows: Tuple[Window, ...]
    notes: Tuple[str, ...]
    threshold: float
    min_excess_ms: float
    t0_ns: int
    """Time origin of the timeline and of ``start_s`` in the CSV: the first event."""
    paths: Dict[str, str] = field(default_factory=dict)
    """Written files: ``summary.csv``, ``summary.md``, ``timeline.png``, ``timeline.html``."""
    read_seconds: float = 0.0
    warnings: Tuple[str, ...] = ()
    """Range names that cannot be shown, and their stand-ins (printed as warnings)."""
    anatomy: Optional[Anatomy] = None
    """Where each step went (:mod:`verlprof.report.anatomy`)."""
