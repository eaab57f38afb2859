"""What a backend's report reader produces: ranges with wall-clock times, ready for analysis.

Each backend's reader (``verlprof.backends.<tool>.read``) turns one report into a
:class:`ReportData` of raw ranges with absolute wall-clock times (ns since the epoch), so that
ranks of different processes and nodes line up on one timeline; :mod:`verlprof.report.load`
then assigns each range to a training step.

GPU attribution (:func:`attribute`): a GPU event belongs to the range that contains its
*reference time*: the start of the CPU call that launched it when the report correlates the two
(nsys ``CUPTI_ACTIVITY_KIND_RUNTIME``, torch ``cuda_runtime`` events), else its own GPU start.
Kernels run asynchronously and may end after the phase's range closes; they still count for the
phase that launched them.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple


class ReportReadError(RuntimeError):
    """A report (or its export) exists but cannot be read."""


@dataclass(frozen=True)
class RawRange:
    """One named range read from a report, before step assignment."""

    name: str
    """Range text, e.g. ``actor/update_actor``, ``controller/generate_sequences``."""
    start_ns: int
    """Wall-clock start, ns since the epoch."""
    end_ns: int
    """Wall-clock end, ns since the epoch."""
    kernel_ns: Optional[int] = None
    """GPU kernel time attributed to the range; None when the report has no kernel table."""
    kernel_count: Optional[int] = None
    """Number of GPU kernels attributed to the range; None when no kernel table."""
    memcpy_ns: Optional[int] = None
    """GPU memcpy time attributed to the range; None when the report has no memcpy table."""


@dataclass(frozen=True)
class StepMark:
    """A range that marks a training step inside a report (``step/<n>``, ``ProfilerStep#<n>``)."""

    step: int
    start_ns: int
    end_ns: int


@dataclass(frozen=True)
class ReportData:
    """What one reader got out of one report. ``error`` set means: unreadable, nothing else."""

    index: int
    """Index of the report's entry in ``manifest.reports``."""
    ranges: Tuple[RawRange, ...] = ()
    marks: Tuple[StepMark, ...] = ()
    window: Optional[Tuple[int, int]] = None
    """Extent of the capture window (``VERLPROF_CAPTURE``, or the trace's extent), wall clock."""
    error: Optional[str] = None
    """Why the report could not be read (one line)."""
    seconds: float = 0.0
    """Time spent reading it (export included)."""

GpuEvent = Tuple[int, int]
"""(reference time ns, duration ns)."""


def attribute(ranges: Sequence[Tuple[int, int]], events: Optional[Sequence[GpuEvent]]
              ) -> List[Tuple[Optional[int], Optional[int]]]:
    """Per range ``(total_ns, count)`` of the events whose reference time lies in it.

    ``events`` None (the report has no such table) gives ``(None, None)`` for every range, so
    "no GPU data" stays distinct from "no kernels ran". Ranges may nest or overlap; an event
    counts once for each range that contains it.
    """
    if events is None:
        return [(None, None)] * len(ranges)
    ordered = sorted(events)
    refs = [e[0] for e in ordered]
    prefix = [0]
    for _, dur in ordered:
        prefix.append(prefix[-1] + max(0, int(dur)))
    out: List[Tuple[Optional[int], Optional[int]]] = []
    for start, end in ranges:
        lo = bisect.bisect_left(refs, start)
        hi = bisect.bisect_right(refs, end)
        out.append((prefix[hi] - prefix[lo], hi - lo))
    return out
