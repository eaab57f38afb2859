"""Where each profiled step went: the step's wall time split into rows that add up to it.

A pure function of the loaded report data (:func:`anatomize`): no I/O, no printing. Every
time is first put on the controller's clock with the offsets the controller measured during
the run (:mod:`verlprof.trace.clock`, the same alignment the Perfetto trace uses), so a gap
between the controller and a rank means something up to the rank's clock error bound.

The rows of one step, which sum to its wall time:

* for each controller phase (``controller/<phase>``, top level: a phase inside another is
  part of the outer one), the calls of the same phase on the worker ranks in that step (those
  overlapping it, widened by the clock error, when the controller called the phase more than
  once); of those the slowest rank (longest, then latest end) splits the controller's time into
  **dispatch** (controller start -> that rank's start), **compute** (that rank's call) and
  **collect** (that rank's end -> controller end). The rank's call is clipped to the
  controller's phase (moved inside it first when it sticks out by no more than the clock
  error), so the three add up even where the rank started before the controller opened its
  range (a gap smaller than the clock error says so). A phase with no rank's call
  (its ranks were not selected) is one **controller side** row: nothing is guessed;
* **weight sync**: the union of every rank's ``update_weights`` (and an engine's
  ``wake_up``/``sleep``) outside the controller phases, and controller phases of those names;
* **driver work**: what is left, the step outside every controller phase and weight sync.

Beside them, not in the sum: **skew** per phase (slowest rank minus the median of the other
ranks of its group, the straggler's cost, inside compute), and per served replica its
**busy** time in the step and how much of it ran alongside training ranks' phases.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass
from itertools import groupby
from operator import attrgetter
from typing import (
    Dict,
    Iterable,
    List,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Tuple,
)

from verlprof.manifest import Manifest
from verlprof.report.model import CONTROLLER_GROUP, PhaseRecord, StepSpan
from verlprof.trace.clock import Key, alignments
from verlprof.trace.links import Link

Part = Literal["dispatch", "compute", "collect", "controller", "weight_sync", "driver", "wall"]
"""``wall``: only in :meth:`Anatomy.across`, the step's wall time."""
Span = Tuple[int, int]

WEIGHT_SYNC_PHASES = ("update_weights", "wake_up", "sleep")
"""Phases that hand weights to the rollout engine or wake/park it (``rollout/update_weights``
is what the verl bridge records on a training rank of a hybrid replica)."""


@dataclass(frozen=True)
class PhaseSplit:
    """One controller phase call split at its slowest rank's call (controller's clock)."""

    phase: str
    start_ns: int
    end_ns: int
    group: Optional[str]
    """The slowest rank's group; None when no rank's call was profiled (controller side)."""
    rank: Optional[int]
    dispatch_ns: int = 0
    compute_ns: int = 0
    collect_ns: int = 0
    dispatch_gap_ns: int = 0
    """Signed: the rank's start minus the controller's (negative: it started first)."""
    collect_gap_ns: int = 0
    """Signed: the controller's end minus the rank's."""
    error_ns: Optional[int] = None
    """The slowest rank's clock error bound; None when its clock was never measured."""
    ranks: int = 0
    """Ranks whose call matched."""
    skew_ns: Optional[int] = None
    """Slowest minus the median of the other ranks of its group (None: one rank)."""
    median_ns: Optional[int] = None

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns

    def within_error(self, gap_ns: int) -> bool:
        """A gap no larger than the clock error bound: its sign and size are not known."""
        return self.error_ns is not None and abs(gap_ns) <= self.error_ns


@dataclass(frozen=True)
class ReplicaBusy:
    """One served replica's generation in a step (not in the step's sum: it runs beside)."""

    group: str
    replica: int
    busy_ns: int
    """Union of its ranges inside the step."""
    alongside_ns: int
    """Of that, time when a training rank was inside a phase."""


@dataclass(frozen=True)
class Row:
    """One row of a step's table; the rows of a step sum to its wall time."""

    label: str
    """The phase, ``weight sync`` or ``driver work``."""
    part: Part
    ns: int
    detail: str = ""


@dataclass(frozen=True)
class StepAnatomy:
    step: int
    start_ns: int
    end_ns: int
    source: str
    """``controller`` (its ``step/<n>`` range) or ``records`` (the step's aligned extent)."""
    phases: Tuple[PhaseSplit, ...]
    weight_sync_ns: int
    driver_ns: int
    replicas: Tuple[ReplicaBusy, ...]
    error_ns: Optional[int]
    """Largest clock error bound of the ranks used (None: none measured)."""

    @property
    def wall_ns(self) -> int:
        return self.end_ns - self.start_ns

    def rows(self) -> Tuple[Row, ...]:
        out: List[Row] = []
        for p in self.phases:
            if p.group is None:
                out.append(Row(p.phase, "controller", p.duration_ns, "ranks not profiled"))
                continue
            out.append(Row(p.phase, "dispatch", p.dispatch_ns,
                           _gap_note(p, p.dispatch_gap_ns, "rank began first")))
            skew = "" if p.skew_ns is None else f", skew {p.skew_ns / 1e6:.1f} ms"
            out.append(Row(p.phase, "compute", p.compute_ns, f"{p.group} r{p.rank}{skew}"))
            out.append(Row(p.phase, "collect", p.collect_ns,
                           _gap_note(p, p.collect_gap_ns, "rank ended after")))
        out.append(Row("weight sync", "weight_sync", self.weight_sync_ns))
        # without the controller's report, no phase is known: this row is not only the driver's
        out.append(Row("driver work", "driver", self.driver_ns,
                       "" if self.source == "controller" else "no controller report"))
        return tuple(out)


def _gap_note(split: PhaseSplit, gap_ns: int, outside: str) -> str:
    if split.error_ns is None:
        return "clock not measured"
    if split.within_error(gap_ns):
        return "within clock error"
    return outside if gap_ns < 0 else ""


@dataclass(frozen=True)
class AcrossRow:
    """One row across steps: its median and its worst step."""

    label: str
    part: Part
    median_ns: int
    worst_ns: int
    worst_step: int


@dataclass(frozen=True)
class Anatomy:
    steps: Tuple[StepAnatomy, ...]

    def across(self) -> Tuple[AcrossRow, ...]:
        """Each (label, part) over the steps (a step without it counts 0), wall time first."""
        values: Dict[Tuple[str, Part], Dict[int, int]] = {}
        for s in self.steps:
            values.setdefault(("step", "wall"), {})[s.step] = s.wall_ns
            for row in s.rows():
                per = values.setdefault((row.label, row.part), {})
                per[s.step] = per.get(s.step, 0) + row.ns
        out = []
        for (label, part), per in values.items():
            full = [per.get(s.step, 0) for s in self.steps]
            worst = max(per, key=lambda k: per[k])
            out.append(AcrossRow(label, part, int(statistics.median(full)), per[worst], worst))
        return tuple(out)


def anatomize(records: Sequence[PhaseRecord], steps: Sequence[StepSpan],
              manifest: Manifest) -> Anatomy:
    """The anatomy of every step of ``steps`` from ``records`` (as loaded), on the clocks of
    ``manifest``'s processes, its served groups' replicas apart."""
    clocks: Dict[Key, Tuple[int, Optional[int]]] = {
        key: (a.offset_ns, a.error_ns) for key, a in alignments(manifest).items()}
    servers = {name: g.servers_per_replica for name, g in manifest.served.items()}
    # grouped in C (sort, groupby): a report at 1,024 ranks has tens of thousands of records
    by_step = {step: list(group) for step, group in
               groupby(sorted(records, key=attrgetter("step")), key=attrgetter("step"))}
    return Anatomy(tuple(_step(span, by_step[span.step], clocks, servers)
                         for span in steps if by_step.get(span.step)))


Clocks = Mapping[Key, Tuple[int, Optional[int]]]
"""(group, rank) -> (clock offset, error bound) against the controller's."""


def _spans(recs: Iterable[PhaseRecord], clocks: Clocks) -> List[Span]:
    """``recs`` on the controller's clock."""
    out = []
    for r in recs:
        off = clocks.get((r.group, r.rank), (0, None))[0]
        out.append((r.start_ns - off, r.end_ns - off))
    return out


def _step(span: StepSpan, recs: List[PhaseRecord], clocks: Clocks,
          servers: Mapping[str, int]) -> StepAnatomy:
    mine = [r for r in recs if r.group == CONTROLLER_GROUP]
    controller = sorted(((s, e, r.phase) for (s, e), r in zip(_spans(mine, clocks), mine)),
                        key=lambda c: (c[0], -c[1]))
    calls = Counter(c[2] for c in controller)
    names = set(calls) | set(WEIGHT_SYNC_PHASES)
    ranks = [r for r in recs if r.phase in names and r.group != CONTROLLER_GROUP
             and r.group not in servers]
    by_phase = {phase: list(group) for phase, group in
                groupby(sorted(ranks, key=attrgetter("phase")), key=attrgetter("phase"))}
    if span.source == "controller":
        lo, hi = span.start_ns, span.end_ns
    else:  # the step's extent, aligned: the loader's span is on each process's own clock
        every = _spans(recs, clocks)
        lo, hi = min(s for s, _ in every), max(e for _, e in every)
    phases: List[PhaseSplit] = []
    covered: List[Span] = []
    syncs: List[Span] = []
    for c_start, c_end, phase in controller:
        start, end = max(c_start, lo), min(c_end, hi)
        if end <= start or (covered and start < covered[-1][1]):
            continue  # outside the step, or inside an outer phase (counted there)
        covered.append((start, end))
        if phase in WEIGHT_SYNC_PHASES:
            syncs.append((start, end))
            continue
        phases.append(_split(phase, start, end, by_phase.get(phase, []), clocks,
                             calls[phase] == 1))
    syncs += _spans((r for p in WEIGHT_SYNC_PHASES for r in by_phase.get(p, [])), clocks)
    in_phases = [c for c in covered if c not in syncs]
    sync_ns = _length(_minus(_clip(_union(syncs), lo, hi), _union(in_phases)))
    phase_ns = sum(p.duration_ns for p in phases)
    errors = [p.error_ns for p in phases if p.error_ns is not None]
    return StepAnatomy(step=span.step, start_ns=lo, end_ns=hi, source=span.source,
                       phases=tuple(phases), weight_sync_ns=sync_ns,
                       driver_ns=(hi - lo) - phase_ns - sync_ns,
                       replicas=_replicas(recs, clocks, servers, lo, hi) if servers else (),
                       error_ns=max(errors) if errors else None)


def _split(phase: str, start: int, end: int, calls: Sequence[PhaseRecord], clocks: Clocks,
           whole_step: bool) -> PhaseSplit:
    """The controller's call ``[start, end]`` at the slowest rank's matching call (``calls``:
    the step's calls of ``phase`` on the ranks): all of them when the controller called it
    once in the step (``whole_step``: a short call the clock error moved out of the
    controller's span still matches), else those overlapping the span widened by the rank's
    clock error."""
    extent: Dict[Key, Tuple[int, int]] = {}
    for r in calls:
        key = (r.group, r.rank)
        off, err = clocks.get(key, (0, None))
        s, e = r.start_ns - off, r.end_ns - off
        if not whole_step and (e <= start - (err or 0) or s >= end + (err or 0)):
            continue
        old = extent.get(key)
        extent[key] = (s, e) if old is None else (min(old[0], s), max(old[1], e))
    if not extent:
        return PhaseSplit(phase=phase, start_ns=start, end_ns=end, group=None, rank=None)
    key = max(extent, key=lambda k: (extent[k][1] - extent[k][0], extent[k][1]))
    r_start, r_end = extent[key]
    error_ns = clocks.get(key, (0, None))[1]
    # a call sticking out of the controller's span by no more than the clock error is moved
    # inside it: where it really was is only known within that error
    error = error_ns or 0
    shift = 0
    if r_end - r_start <= end - start:
        if 0 < start - r_start <= error:
            shift = start - r_start
        elif 0 < r_end - end <= error:
            shift = end - r_end
    d_end = min(max(r_start + shift, start), end)
    c_end = min(max(r_end + shift, d_end), end)
    slowest = r_end - r_start
    others = [e[1] - e[0] for k, e in extent.items() if k != key and k[0] == key[0]]
    median = int(statistics.median(others)) if others else None
    return PhaseSplit(phase=phase, start_ns=start, end_ns=end, group=key[0], rank=key[1],
                      dispatch_ns=d_end - start, compute_ns=c_end - d_end,
                      collect_ns=end - c_end, dispatch_gap_ns=r_start - start,
                      collect_gap_ns=end - r_end, error_ns=error_ns,
                      ranks=len(extent), skew_ns=None if median is None else slowest - median,
                      median_ns=median)


def _replicas(recs: Sequence[PhaseRecord], clocks: Clocks, servers: Mapping[str, int],
              lo: int, hi: int) -> Tuple[ReplicaBusy, ...]:
    """Each served replica's busy time in ``[lo, hi]``, and how much of it overlaps the
    training ranks' phases."""
    training = _clip(_union(_spans((r for r in recs if r.group != CONTROLLER_GROUP
                                    and r.group not in servers), clocks)), lo, hi)
    spans: Dict[Tuple[str, int], List[Span]] = {}
    for r in recs:
        if r.group in servers:
            replica = r.rank // max(1, servers[r.group])
            spans.setdefault((r.group, replica), []).extend(_spans([r], clocks))
    out = []
    for (group, replica), got in sorted(spans.items()):
        busy = _clip(_union(got), lo, hi)
        out.append(ReplicaBusy(group=group, replica=replica, busy_ns=_length(busy),
                               alongside_ns=_length(busy) - _length(_minus(busy, training))))
    return tuple(out)


# -- sets of intervals: sorted, disjoint lists of (start, end)

def _union(spans: Iterable[Span]) -> List[Span]:
    out: List[Span] = []
    for s, e in sorted(spans):
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _clip(spans: Sequence[Span], lo: int, hi: int) -> List[Span]:
    return [(max(s, lo), min(e, hi)) for s, e in spans if min(e, hi) > max(s, lo)]


def _minus(spans: Sequence[Span], cut: Sequence[Span]) -> List[Span]:
    """``spans`` without ``cut`` (both unions)."""
    out: List[Span] = []
    for s, e in spans:
        at = s
        for cs, ce in cut:
            if ce <= at or cs >= e:
                continue
            if cs > at:
                out.append((at, cs))
            at = max(at, ce)
        if at < e:
            out.append((at, e))
    return out


def _length(spans: Sequence[Span]) -> int:
    return sum(e - s for s, e in spans)


def trace_links(anatomy: Anatomy) -> List[Link]:
    """An arrow from each controller phase to its slowest rank's call, for the trace."""
    out = []
    for s in anatomy.steps:
        for p in s.phases:
            if p.group is None or p.rank is None:
                continue
            rank_start = p.start_ns + p.dispatch_gap_ns
            rank_end = p.end_ns - p.collect_gap_ns
            out.append(Link(name=f"{p.phase} (step {s.step})", source=(CONTROLLER_GROUP, 0),
                            source_span=(p.start_ns, p.end_ns), target=(p.group, p.rank),
                            target_span=(rank_start, rank_end),
                            args={"dispatch_ns": p.dispatch_ns, "compute_ns": p.compute_ns,
                                  "collect_ns": p.collect_ns,
                                  "slowest": f"{p.group} rank {p.rank}"}))
    return out
