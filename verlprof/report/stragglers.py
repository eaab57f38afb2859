"""Stragglers: the rank that makes the others wait in one (step, phase).

For every (step, group, role, phase) run by at least two ranks, the slowest rank is flagged
when its duration exceeds ``threshold`` × the median of the *other* ranks **and** exceeds it
by at least ``min_excess_ms``. The median of the others (not of all) keeps one slow rank from
raising its own bar; the absolute floor keeps millisecond jitter on short phases from being
flagged. In a cell of up to :data:`~verlprof.report.table.MANY_RANKS` ranks only the slowest
rank can be flagged, so one row per cell at most. In a larger cell (hundreds of ranks, where a
slow node holds several ranks) every rank that passes both tests against the median of the
others is flagged: one slow node's 8 ranks are 8 stragglers, not 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Sequence

from verlprof.report.table import MANY_RANKS, PhaseRow, group_by, group_order, phase_order

DEFAULT_THRESHOLD = 1.5
"""Flag when slowest > threshold × median of the other ranks..."""
DEFAULT_MIN_EXCESS_MS = 20.0
"""...and slowest - that median >= this many milliseconds."""


@dataclass(frozen=True)
class Straggler:
    """A rank flagged as the straggler of one (step, group, role, phase)."""

    step: int
    group: str
    role: str
    phase: str
    rank: int
    duration_ns: int
    others_median_ns: int
    """Median duration of the other ranks of the same cell."""
    ratio: float
    """duration / others_median (inf when the others took no time)."""
    host: str = ""

    @property
    def name(self) -> str:
        return f"{self.role}/{self.phase}"


def find_stragglers(rows: Sequence[PhaseRow], threshold: float = DEFAULT_THRESHOLD,
                    min_excess_ms: float = DEFAULT_MIN_EXCESS_MS) -> List[Straggler]:
    """Flag the slowest rank of every multi-rank cell that passes both tests."""
    if threshold <= 0:
        raise ValueError(f"straggler threshold must be positive, got {threshold}")
    if min_excess_ms < 0:
        raise ValueError(f"straggler minimum excess must be >= 0 ms, got {min_excess_ms}")
    min_excess_ns = int(min_excess_ms * 1e6)
    cells = group_by(rows, lambda r: (r.step, r.group, r.role, r.phase))
    out = []
    for (step, group, role, phase), members in cells.items():
        if len(members) < 2:
            continue
        members.sort(key=lambda r: (-r.duration_ns, r.rank))  # slowest first
        ascending = [r.duration_ns for r in reversed(members)]
        candidates = members if len(members) > MANY_RANKS else members[:1]
        for place, row in enumerate(candidates):
            median = _median_without(ascending, len(ascending) - 1 - place)
            excess = row.duration_ns - median
            if not (row.duration_ns > threshold * median and excess >= min_excess_ns):
                break  # the next one is no slower, and the others' median no lower
            ratio = row.duration_ns / median if median > 0 else float("inf")
            out.append(Straggler(step=step, group=group, role=role, phase=phase,
                                 rank=row.rank, duration_ns=row.duration_ns,
                                 others_median_ns=int(median), ratio=ratio, host=row.host))
    out.sort(key=lambda s: (s.step, group_order(s.group), phase_order(s.phase), s.role, s.rank))
    return out


def _median_without(ascending: Sequence[int], index: int) -> float:
    """Median of ``ascending`` (sorted) without its element at ``index``, in O(1)."""
    count = len(ascending) - 1

    def at(k: int) -> int:
        return ascending[k if k < index else k + 1]

    return (at((count - 1) // 2) + at(count // 2)) / 2
