"""The per step × group/role/phase × rank table, and the spread of each cell across ranks.

A row sums every call of one phase on one rank in one step (``calls`` says how many). GPU
columns stay None when no report of the row had kernel/memcpy data, so "not measured" and
"zero" stay distinct.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple, TypeVar

from verlprof.report.model import CONTROLLER_GROUP, PhaseRecord

KNOWN_PHASES = (
    "generate_sequences", "compute_log_prob", "compute_ref_log_prob", "compute_values",
    "compute_rm_score", "update_critic", "update_actor",
)
"""verl's worker phases in the order a PPO step calls them: rows and colours follow it."""
GROUP_ORDER = (CONTROLLER_GROUP, "actor_rollout_ref", "actor", "rollout", "ref", "critic", "rm")
"""Groups in display order; others follow alphabetically."""
MANY_RANKS = 16
"""A cell run by more ranks than this is shown as its distribution across ranks (min, median,
p95, max, the slowest ranks, the stragglers) instead of one column or lane per rank: 16 ranks
still fit a terminal and a picture one by one, 1,024 do not."""
SLOWEST_SHOWN = 3
"""Slowest ranks named per cell when it is shown as a distribution."""


@dataclass(frozen=True)
class PhaseRow:
    """One (step, group, rank, role, phase): the summed calls of that phase."""

    step: int
    group: str
    rank: int
    role: str
    phase: str
    calls: int
    duration_ns: int
    start_ns: int
    """First call's start (wall clock)."""
    kernel_ns: Optional[int] = None
    kernel_count: Optional[int] = None
    memcpy_ns: Optional[int] = None
    host: str = ""
    report_path: str = ""
    """Report of the first call (relative to output_dir)."""


@dataclass(frozen=True)
class Spread:
    """Durations of one (step, group, role, phase) across the ranks that ran it."""

    step: int
    group: str
    role: str
    phase: str
    ranks: Tuple[int, ...]
    min_ns: int
    median_ns: int
    max_ns: int
    slowest_rank: int
    p95_ns: int = 0
    """95th percentile across ranks (nearest rank: a duration some rank really had)."""
    slowest_ranks: Tuple[int, ...] = ()
    """Up to :data:`SLOWEST_SHOWN` ranks, slowest first."""


T = TypeVar("T")
K = TypeVar("K")


def group_by(items: Iterable[T], key: Callable[[T], K]) -> Dict[K, List[T]]:
    """``items`` in lists by ``key``, keys and lists in the order met."""
    out: Dict[K, List[T]] = {}
    for item in items:
        out.setdefault(key(item), []).append(item)
    return out


def median(values: Sequence[float]) -> float:
    """The median, as ``statistics.median`` gives it (the mean of the two middle values of an
    even count); ``statistics`` itself costs ``verlprof report`` an import of ``random``,
    ``fractions`` and ``decimal`` for this one function."""
    data = sorted(values)
    if not data:
        raise ValueError("no median for empty data")
    middle = len(data) // 2
    return data[middle] if len(data) % 2 else (data[middle - 1] + data[middle]) / 2


def quantile(ordered: Sequence[int], q: float) -> int:
    """Nearest-rank ``q`` quantile (0..1) of an ascending, non-empty sequence."""
    index = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[index]


def phase_order(phase: str) -> Tuple[int, str]:
    """Sort key placing known phases in PPO order, others after, alphabetically."""
    return (KNOWN_PHASES.index(phase), "") if phase in KNOWN_PHASES else (len(KNOWN_PHASES), phase)


def group_order(group: str) -> Tuple[int, str]:
    return (GROUP_ORDER.index(group), "") if group in GROUP_ORDER else (len(GROUP_ORDER), group)


def row_key(row: PhaseRow) -> tuple:
    """Display order: step, group, phase (PPO order), role, rank."""
    return (row.step, group_order(row.group), phase_order(row.phase), row.role, row.rank)


def build_rows(records: Sequence[PhaseRecord]) -> List[PhaseRow]:
    """Sum the calls of each (step, group, rank, role, phase)."""
    cells = group_by(records, lambda r: (r.step, r.group, r.rank, r.role, r.phase))
    rows = []
    for (step, group, rank, role, phase), recs in cells.items():
        recs.sort(key=lambda r: r.start_ns)
        rows.append(PhaseRow(
            step=step, group=group, rank=rank, role=role, phase=phase, calls=len(recs),
            duration_ns=sum(r.duration_ns for r in recs), start_ns=recs[0].start_ns,
            kernel_ns=_total(r.kernel_ns for r in recs),
            kernel_count=_total(r.kernel_count for r in recs),
            memcpy_ns=_total(r.memcpy_ns for r in recs),
            host=recs[0].host, report_path=recs[0].report_path))
    rows.sort(key=row_key)
    return rows


def build_spreads(rows: Sequence[PhaseRow]) -> List[Spread]:
    """Min/median/max across ranks for every cell that ran on at least one rank."""
    cells = group_by(rows, lambda r: (r.step, r.group, r.role, r.phase))
    out = []
    for (step, group, role, phase), members in cells.items():
        members.sort(key=lambda r: r.rank)
        durations = sorted(r.duration_ns for r in members)
        slow = sorted(members, key=lambda r: (-r.duration_ns, r.rank))[:SLOWEST_SHOWN]
        out.append(Spread(step=step, group=group, role=role, phase=phase,
                          ranks=tuple(r.rank for r in members), min_ns=durations[0],
                          median_ns=int(median(durations)), max_ns=durations[-1],
                          slowest_rank=slow[0].rank, p95_ns=quantile(durations, 0.95),
                          slowest_ranks=tuple(r.rank for r in slow)))
    out.sort(key=lambda s: (s.step, group_order(s.group), phase_order(s.phase), s.role))
    return out


def has_gpu_data(rows: Sequence[PhaseRow]) -> bool:
    """Whether any row carries kernel or memcpy data (GPU columns are shown only then)."""
    return any(r.kernel_ns is not None or r.memcpy_ns is not None for r in rows)


def _total(values) -> Optional[int]:
    present = [v for v in values if v is not None]
    return sum(present) if present else None
