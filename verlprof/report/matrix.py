"""The compact view shared by the terminal and Markdown outputs: one table per step.

Rows are (group, role/phase) in PPO order, columns are ranks (ms), then min / median / max
across ranks; a straggler's cell is flagged. GPU columns (median kernel ms and count across
ranks) appear only when some report had GPU data.

When the ranks do not fit one column each (more than
:data:`~verlprof.report.table.MANY_RANKS` in a cell, or a narrow terminal) a row is the
phase's distribution across ranks instead: how many ranks, min / median / p95 / max, how many
were stragglers and the slowest ranks by name (``r7!`` when flagged).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from verlprof.report.model import StepSpan
from verlprof.report.stragglers import Straggler
from verlprof.report.table import (
    MANY_RANKS,
    PhaseRow,
    Spread,
    group_order,
    has_gpu_data,
    median,
    phase_order,
)


@dataclass(frozen=True)
class Cell:
    text: str
    flagged: bool = False


@dataclass(frozen=True)
class StepTable:
    step: int
    title: str
    header: Tuple[str, ...]
    rows: Tuple[Tuple[Cell, ...], ...]
    numeric_from: int = 2
    """Columns from this index on are right-aligned numbers."""


def ms(ns: Optional[float], digits: int = 1) -> str:
    """Nanoseconds as milliseconds text; ``-`` for None."""
    return "-" if ns is None else f"{ns / 1e6:.{digits}f}"


def per_rank_fits(rows: Sequence[PhaseRow]) -> bool:
    """Whether every cell has few enough ranks for one column per rank."""
    counts = Counter((row.step, row.group, row.role, row.phase) for row in rows)
    return max(counts.values(), default=0) <= MANY_RANKS


def step_tables(rows: Sequence[PhaseRow], spreads: Sequence[Spread],
                stragglers: Sequence[Straggler], steps: Sequence[StepSpan],
                per_rank: bool = True) -> List[StepTable]:
    """One table per step with rows, in step order.

    ``per_rank`` False (narrow terminals, many ranks): no column per rank; instead the number
    of ranks, min / median / p95 / max, the number of stragglers and the slowest rank (the
    slowest three in a cell of more than ``MANY_RANKS``; ``r3!`` when it is a straggler).
    """
    gpu = has_gpu_data(rows)
    ranks = sorted({r.rank for r in rows})
    flagged = {(s.step, s.group, s.role, s.phase, s.rank) for s in stragglers}
    spread_of = {(s.step, s.group, s.role, s.phase): s for s in spreads}
    span_of = {s.step: s for s in steps}
    by_step: Dict[int, Dict[tuple, Dict[int, PhaseRow]]] = {}
    for row in rows:
        cell = by_step.setdefault(row.step, {}).setdefault((row.group, row.role, row.phase), {})
        cell[row.rank] = row
    rank_cols = ranks if per_rank else []
    header = ["group", "phase"] + ([f"r{rank}" for rank in ranks] if per_rank else
                                   ["ranks"]) + ["min", "median"]
    header += ["max"] if per_rank else ["p95", "max", "stragglers", "slowest"]
    if gpu:
        header += ["kernel ms", "kernels"]
    tables = []
    for step in sorted(by_step):
        lines = []
        keys = sorted(by_step[step], key=lambda k: (group_order(k[0]), phase_order(k[2]), k[1]))
        previous = None
        for group, role, phase in keys:
            members = by_step[step][(group, role, phase)]
            label = phase if role == group else f"{role}/{phase}"
            line = [Cell(group if group != previous else ""), Cell(label)]
            previous = group
            for rank in rank_cols:
                member = members.get(rank)
                if member is None:
                    line.append(Cell(""))
                    continue
                mark = "!" if (step, group, role, phase, rank) in flagged else ""
                calls = f" ×{member.calls}" if member.calls > 1 else ""
                line.append(Cell(ms(member.duration_ns) + calls + mark, bool(mark)))
            spread = spread_of[(step, group, role, phase)]
            # one rank's time is already in its own column in the per-rank view; the compact
            # view has no column per rank, so there its distribution is the only place for it
            if per_rank:
                many = len(spread.ranks) > 1
                line += [Cell(ms(ns) if many else "")
                         for ns in (spread.min_ns, spread.median_ns, spread.max_ns)]
            else:
                line.append(Cell(str(len(spread.ranks))))
                line += [Cell(ms(ns)) for ns in (spread.min_ns, spread.median_ns,
                                                 spread.p95_ns, spread.max_ns)]
                line += _slowest_cells(spread, flagged)
            if gpu:
                kern = [r.kernel_ns for r in members.values() if r.kernel_ns is not None]
                count = [r.kernel_count for r in members.values() if r.kernel_count is not None]
                line += [Cell(ms(median(kern)) if kern else "-"),
                         Cell(str(int(median(count))) if count else "-")]
            lines.append(tuple(line))
        span = span_of.get(step)
        title = f"step {step}"
        if span is not None:
            title += f": {span.duration_ns / 1e9:.3f} s"
            title += " (controller)" if span.source == "controller" else " (extent of phases)"
        tables.append(StepTable(step=step, title=title, header=tuple(header), rows=tuple(lines)))
    return tables


def _slowest_cells(spread: Spread, flagged: set) -> List[Cell]:
    """The stragglers count and the slowest rank(s) of one cell, ``!`` on the flagged."""
    key = (spread.step, spread.group, spread.role, spread.phase)
    count = sum(1 for rank in spread.ranks if key + (rank,) in flagged)
    shown = spread.slowest_ranks if len(spread.ranks) > MANY_RANKS else (spread.slowest_rank,)
    names = [f"r{rank}" + ("!" if key + (rank,) in flagged else "") for rank in shown]
    return [Cell(str(count) if count else "", bool(count)),
            Cell(" ".join(names), any(n.endswith("!") for n in names))]
