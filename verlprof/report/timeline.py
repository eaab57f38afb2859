"""Lanes, colours and the time origin shared by the PNG and HTML timelines.

One lane per (group, rank), the controller on top, then groups in display order and ranks
ascending. A group of more than :data:`~verlprof.report.table.MANY_RANKS` ranks (1,024 lanes
would be one pixel each) gets one *band* lane instead: per step and phase, the distribution
across its ranks (first start, median start and end, p95 and last end), followed by the own
lanes of its outlier ranks (its stragglers, most often flagged first, at most
:data:`OUTLIER_LANES` per group). One colour per phase name (the controller's
``controller/<phase>`` bar gets the colour of the worker phase it fanned out), in PPO order,
so a phase keeps its colour across lanes, steps and runs.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Dict, Iterable, List, Sequence, Tuple, TypeVar, Union

from verlprof.report.model import CONTROLLER_GROUP, PhaseRecord, StepSpan, Window
from verlprof.report.stragglers import Straggler
from verlprof.report.table import (
    KNOWN_PHASES,
    MANY_RANKS,
    group_order,
    median,
    phase_order,
    quantile,
)

PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
    "#bcbd22", "#7f7f7f", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94",
    "#f7b6d2", "#9edae5", "#dbdb8d", "#c7c7c7",
)
"""Matplotlib's tab10 then tab20's light shades. verl's 7 phases take the first 7; other
names hash into the other 13 (two such names may share one)."""


@dataclass(frozen=True)
class Bar:
    lane: int
    start_s: float
    end_s: float
    phase: str
    label: str
    """Tooltip text."""
    straggler: bool


OUTLIER_LANES = 4
"""Own lanes per banded group, for its most often flagged stragglers."""
BAND_RANK = -1
"""The rank of a group's band lane in the lane keys (no real rank is negative)."""


@dataclass(frozen=True)
class Band:
    """One (step, group, role, phase) across the ranks of a banded group, in seconds."""

    lane: int
    phase: str
    label: str
    """Tooltip text."""
    first_start_s: float
    median_start_s: float
    median_end_s: float
    p95_end_s: float
    last_end_s: float
    ranks: int
    stragglers: int
    """Ranks of this cell flagged as stragglers."""


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
    bands: Tuple[Band, ...] = ()
    """Distributions drawn on the band lanes of groups with many ranks."""


def lane_label(group: str, rank: int, ranks: int = 0, slow: int = 0) -> str:
    """``critic r3``; a band lane (``rank`` :data:`BAND_RANK`): ``critic: 1024 ranks``, and
    ``, 8 stragglers`` when ``slow`` ranks of it were flagged (more than get their own lane)."""
    if group == CONTROLLER_GROUP:
        return CONTROLLER_GROUP
    if rank != BAND_RANK:
        return f"{group} r{rank}"
    return f"{group}: {ranks} ranks" + (f", {slow} straggler{'s' * (slow > 1)}" if slow else "")


def phase_colour(phase: str) -> str:
    """The colour of ``phase``, from its name alone, so it is the same in every run whatever
    other phases the run has: verl's phases (KNOWN_PHASES) have the first colours, in PPO
    order (always distinct); any other name is hashed (crc32, stable across processes, unlike
    ``hash``) into the rest of the palette."""
    if phase in KNOWN_PHASES:
        return PALETTE[KNOWN_PHASES.index(phase)]
    rest = PALETTE[len(KNOWN_PHASES):]
    return rest[zlib.crc32(phase.encode("utf-8", "surrogatepass")) % len(rest)]


def phase_colours(phases: Sequence[str]) -> Dict[str, str]:
    """Phase name → colour (:func:`phase_colour`), in legend (PPO) order."""
    return {p: phase_colour(p) for p in sorted(set(phases), key=phase_order)}


def build_timeline(records: Sequence[PhaseRecord], steps: Sequence[StepSpan],
                   windows: Sequence[Window], stragglers: Sequence[Straggler],
                   t0_ns: int) -> TimelineData:
    ranks_of: Dict[str, set] = {}
    # sorted: the order of the sets would follow the hash seed into the page's window list
    for group, rank in sorted({(x.group, x.rank) for x in records} |
                              {(w.group, w.rank) for w in windows}):
        ranks_of.setdefault(group, set()).add(rank)
    banded = {g: _outliers(g, stragglers) for g, ranks in ranks_of.items()
              if g != CONTROLLER_GROUP and len(ranks) > MANY_RANKS}
    keys = set()
    for group, ranks in ranks_of.items():
        shown = [BAND_RANK, *banded[group]] if group in banded else ranks
        keys |= {(group, rank) for rank in shown}
    lanes: List[Tuple[str, int]] = sorted(keys, key=lambda k: (group_order(k[0]), k[1]))
    index = {k: i for i, k in enumerate(lanes)}
    flagged = {(s.step, s.group, s.role, s.phase, s.rank) for s in stragglers}

    def sec(ns: Union[int, float]) -> float:
        return (ns - t0_ns) / 1e9

    bars = []
    in_band: Dict[tuple, Dict[int, List[int]]] = {}
    for r in records:
        if r.group in banded:
            span = in_band.setdefault((r.step, r.group, r.role, r.phase), {}).setdefault(
                r.rank, [r.start_ns, r.end_ns])
            span[0], span[1] = min(span[0], r.start_ns), max(span[1], r.end_ns)
        if (r.group, r.rank) not in index:
            continue
        slow = (r.step, r.group, r.role, r.phase, r.rank) in flagged
        label = (f"{r.role}/{r.phase} step {r.step} {lane_label(r.group, r.rank)}: "
                 f"{r.duration_ns / 1e6:.1f} ms" + (" (straggler)" if slow else ""))
        bars.append(Bar(index[(r.group, r.rank)], sec(r.start_ns), sec(r.end_ns), r.phase,
                        label, slow))
    bands = [_band(key, spans, index[(key[1], BAND_RANK)], flagged, sec)
             for key, spans in in_band.items()]
    wins = [(index[(w.group, w.rank)], sec(w.start_ns), sec(w.end_ns)) for w in windows
            if (w.group, w.rank) in index]
    for group in banded:  # the band's window: the union of its ranks' windows
        wins += [(index[(group, BAND_RANK)], sec(a), sec(b)) for a, b in
                 merged([(w.start_ns, w.end_ns) for w in windows if w.group == group])]
    spans = tuple((s.step, sec(s.start_ns), sec(s.end_ns)) for s in steps)
    ends = [b.end_s for b in bars] + [b.last_end_s for b in bands] + [w[2] for w in wins] + \
        [s[2] for s in spans]
    return TimelineData(
        lanes=tuple(lane_label(g, r, len(ranks_of[g]),
                               len({s.rank for s in stragglers if s.group == g}))
                    for g, r in lanes),
        lane_groups=tuple(g for g, _ in lanes), bars=tuple(bars), windows=tuple(wins),
        steps=spans, colours=phase_colours([r.phase for r in records]), t0_ns=t0_ns,
        end_s=max(ends) if ends else 1.0, bands=tuple(bands))


def _outliers(group: str, stragglers: Sequence[Straggler]) -> List[int]:
    """A banded group's ranks that get their own lane: its stragglers, most flagged first."""
    count: Dict[int, int] = {}
    worst: Dict[int, float] = {}
    for s in stragglers:
        if s.group == group:
            count[s.rank] = count.get(s.rank, 0) + 1
            worst[s.rank] = max(worst.get(s.rank, 0.0), s.ratio)
    return sorted(count, key=lambda r: (-count[r], -worst[r], r))[:OUTLIER_LANES]


def _band(key: tuple, spans: Dict[int, List[int]], lane: int, flagged: set, sec) -> Band:
    step, group, role, phase = key
    starts = sorted(a for a, _ in spans.values())
    ends = sorted(b for _, b in spans.values())
    durations = sorted(b - a for a, b in spans.values())
    slow = sum(1 for rank in spans if key + (rank,) in flagged)
    label = (f"{role}/{phase} step {step} {group}, {len(spans)} ranks: median "
             f"{median(durations) / 1e6:.1f} ms, p95 "
             f"{quantile(durations, 0.95) / 1e6:.1f} ms, max {durations[-1] / 1e6:.1f} ms"
             + (f", {slow} straggler(s)" if slow else ""))
    return Band(lane=lane, phase=phase, label=label, first_start_s=sec(starts[0]),
                median_start_s=sec(median(starts)),
                median_end_s=sec(median(ends)), p95_end_s=sec(quantile(ends, 0.95)),
                last_end_s=sec(ends[-1]), ranks=len(spans), stragglers=slow)


T = TypeVar("T", int, float)


def merged(intervals: Iterable[Tuple[T, T]]) -> List[Tuple[T, T]]:
    """Overlapping intervals merged, in order."""
    out: List[Tuple[T, T]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out
