"""Lanes, colours and the time origin shared by the PNG and HTML timelines.

One lane per (group, rank), the controller on top, then groups in display order and ranks
ascending. One colour per phase name (the controller's ``controller/<phase>`` bar gets the
colour of the worker phase it fanned out), in PPO order, so a phase keeps its colour across
lanes, steps and runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

from verlprof.report.model import CONTROLLER_GROUP, PhaseRecord, StepSpan, Window
from verlprof.report.stragglers import Straggler
from verlprof.report.table import group_order, phase_order

PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
    "#bcbd22", "#7f7f7f", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94",
    "#f7b6d2", "#9edae5", "#dbdb8d", "#c7c7c7",
)
"""Matplotlib's tab10 then tab20's light shades: distinct for up to 20 phases."""


@dataclass(frozen=True)
class Bar:
    lane: int
    start_s: float
    end_s: float
    phase: str
    label: str
    """Tooltip text."""
    straggler: bool


@dataclass(frozen=True)
class TimelineData:
    lanes: Tuple[str, ...]
    lane_groups: Tuple[str, ...]
    bars: Tuple[Bar, ...]
    windows: Tuple[Tuple[int, float, float], ...]
    """(lane, start s, end s) of capture windows."""
    steps: Tuple[Tuple[int, float, float], ...]
    """(step, start s, end s)."""
    colours: Dict[str, str]
    """Phase name → colour, in legend order."""
    t0_ns: int
    end_s: float


def lane_label(group: str, rank: int) -> str:
    return CONTROLLER_GROUP if group == CONTROLLER_GROUP else f"{group} r{rank}"


def phase_colours(phases: Sequence[str]) -> Dict[str, str]:
    ordered = sorted(set(phases), key=phase_order)
    return {p: PALETTE[i % len(PALETTE)] for i, p in enumerate(ordered)}


def build_timeline(records: Sequence[PhaseRecord], steps: Sequence[StepSpan],
                   windows: Sequence[Window], stragglers: Sequence[Straggler],
                   t0_ns: int) -> TimelineData:
    keys = {(r.group, r.rank) for r in records} | {(w.group, w.rank) for w in windows}
    lanes: List[Tuple[str, int]] = sorted(keys, key=lambda k: (group_order(k[0]), k[1]))
    index = {k: i for i, k in enumerate(lanes)}
    flagged = {(s.step, s.group, s.role, s.phase, s.rank) for s in stragglers}

    def sec(ns: int) -> float:
        return (ns - t0_ns) / 1e9

    bars = []
    for r in records:
        slow = (r.step, r.group, r.role, r.phase, r.rank) in flagged
        label = (f"{r.role}/{r.phase} step {r.step} {lane_label(r.group, r.rank)}: "
                 f"{r.duration_ns / 1e6:.1f} ms" + (" (straggler)" if slow else ""))
        bars.append(Bar(index[(r.group, r.rank)], sec(r.start_ns), sec(r.end_ns), r.phase,
                        label, slow))
    wins = tuple((index[(w.group, w.rank)], sec(w.start_ns), sec(w.end_ns)) for w in windows)
    spans = tuple((s.step, sec(s.start_ns), sec(s.end_ns)) for s in steps)
    ends = [b.end_s for b in bars] + [w[2] for w in wins] + [s[2] for s in spans]
    return TimelineData(
        lanes=tuple(lane_label(g, r) for g, r in lanes), lane_groups=tuple(g for g, _ in lanes),
        bars=tuple(bars), windows=wins, steps=spans,
        colours=phase_colours([r.phase for r in records]), t0_ns=t0_ns,
        end_s=max(ends) if ends else 1.0)
