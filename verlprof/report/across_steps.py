"""The view across steps: one row per (group, role/phase) over every profiled step.

Twenty or two hundred profiled steps read like two: the table has one row per phase, not one
table per step, so its length does not grow with the steps. A row pools the phase's time on
every (step, rank) it ran: median, p5 / p95, max, the median of its first and last step (did
it get slower?), the slowest (step, rank) and how many of its cells had a straggler. The
stragglers themselves are grouped by rank: a rank that straggles in every step is one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Sequence, Tuple

from verlprof.report.matrix import Cell, StepTable, ms
from verlprof.report.stragglers import Straggler
from verlprof.report.table import PhaseRow, group_by, group_order, median, phase_order, quantile

ACROSS_HEADER = ("group", "phase", "steps", "median", "p5", "p95", "max", "first", "last",
                 "slowest", "stragglers")
"""Columns of the across-steps table; ``first`` / ``last``: median across ranks in the first
and last step that ran the phase; ``slowest``: ``s<step> r<rank>`` of the longest time."""
MAX_STRAGGLER_LINES = 12
"""Grouped straggler lines printed; the rest are counted (summary.md lists every one)."""


@dataclass(frozen=True)
class RankStraggler:
    """One rank flagged in one phase, over the steps it was flagged in."""

    group: str
    role: str
    phase: str
    rank: int
    host: str
    steps: Tuple[int, ...]
    worst_ratio: float
    """Largest duration / others' median among those steps."""

    @property
    def name(self) -> str:
        return f"{self.role}/{self.phase}"


def profiled_steps(rows: Sequence[PhaseRow]) -> List[int]:
    """Steps that hold at least one phase row, ascending."""
    return sorted({row.step for row in rows})


def across_table(rows: Sequence[PhaseRow], stragglers: Sequence[Straggler]) -> StepTable:
    """The across-steps table (``step`` 0: it belongs to no step)."""
    cells = group_by(rows, lambda r: (r.group, r.role, r.phase))
    flagged = {(s.step, s.group, s.role, s.phase, s.rank) for s in stragglers}
    lines = []
    previous = None
    for group, role, phase in sorted(cells, key=lambda k: (group_order(k[0]),
                                                           phase_order(k[2]), k[1])):
        members = cells[(group, role, phase)]
        ordered = sorted(r.duration_ns for r in members)
        by_step = group_by(members, lambda r: r.step)
        steps = sorted(by_step)
        slow = max(members, key=lambda r: (r.duration_ns, -r.step, -r.rank))
        slow_flag = (slow.step, group, role, phase, slow.rank) in flagged
        count = sum(1 for r in members if (r.step, group, role, phase, r.rank) in flagged)
        in_steps = len({r.step for r in members if (r.step, group, role, phase, r.rank)
                        in flagged})
        label = phase if role == group else f"{role}/{phase}"
        lines.append((
            Cell(group if group != previous else ""), Cell(label), Cell(str(len(steps))),
            Cell(ms(median(ordered))), Cell(ms(quantile(ordered, 0.05))),
            Cell(ms(quantile(ordered, 0.95))), Cell(ms(ordered[-1])),
            Cell(ms(median([r.duration_ns for r in by_step[steps[0]]]))),
            Cell(ms(median([r.duration_ns for r in by_step[steps[-1]]]))),
            Cell(f"s{slow.step} r{slow.rank}" + ("!" if slow_flag else ""), slow_flag),
            Cell(f"{count} in {in_steps} step{'' if in_steps == 1 else 's'}" if count else "",
                 bool(count))))
        previous = group
    steps = profiled_steps(rows)
    span = f"steps {steps[0]}-{steps[-1]}" if steps else "no steps"
    title = f"across {len(steps)} profiled steps ({span}), every step × rank"
    return StepTable(step=0, title=title, header=ACROSS_HEADER, rows=tuple(lines))


def stragglers_by_rank(stragglers: Sequence[Straggler]) -> List[RankStraggler]:
    """Stragglers grouped by (group, role, phase, rank), most steps first."""
    groups = group_by(stragglers, lambda s: (s.group, s.role, s.phase, s.rank))
    out = [RankStraggler(group=g, role=r, phase=p, rank=rank, host=members[0].host,
                         steps=tuple(sorted(s.step for s in members)),
                         worst_ratio=max(s.ratio for s in members))
           for (g, r, p, rank), members in groups.items()]
    out.sort(key=lambda x: (-len(x.steps), -x.worst_ratio, group_order(x.group),
                            phase_order(x.phase), x.rank))
    return out


def step_list(steps: Sequence[int], shown: int = 6) -> str:
    """``2, 4, 6`` or, for many steps, ``2, 4, 6, … 40`` (bounded length)."""
    if len(steps) <= shown:
        return ", ".join(map(str, steps))
    return ", ".join(map(str, steps[:shown - 1])) + f", … {steps[-1]}"
