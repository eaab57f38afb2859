"""What GPU time per phase is computed over: the phases as *slots* and thread *classes*.

The phase bounds cut time into slots (``slot(t)`` = number of bounds ``<= t``; a phase
``[s, e]`` is the slots ``slot(s)..slot(e)``, bounds inclusive). The phases' threads give a
class per launching call: 0 unknown thread, 1..T a phase's thread, T+1 any other thread. An
event (kernel or copy) gets one *key*, ``slot * (T + 2) + class``, from the call that launched
it, or from its own GPU start with class 0 when no call is known; both readers
(:mod:`~verlprof.backends.nsys.gpu_sql` in SQLite, :mod:`~verlprof.backends.nsys.gpu_numpy`
with numpy) total durations per key, and :meth:`Plan.per_span` turns those few totals into
totals per phase with prefix sums per class.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY_TABLE = "CUPTI_ACTIVITY_KIND_MEMCPY"
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"

Totals = List[Tuple[int, int]]
"""Per phase ``(total ns, count)``."""
Acc = Dict[int, Tuple[int, int]]
"""Per key ``(total ns, count)``."""


@dataclass(frozen=True)
class Span:
    """A phase range on the report's session time base."""

    start_ns: int
    end_ns: int
    global_tid: Optional[int] = None
    """nsys ``globalTid`` of the thread that pushed it (None: matches launches on any thread)."""


@dataclass(frozen=True)
class GpuTotals:
    """What ``gpu_totals`` found; a field is None when the report has no such table."""

    kernels: Optional[Totals]
    memcpy: Optional[Totals]


class Plan:
    """Slots and thread classes of a set of spans, as SQL and back."""

    def __init__(self, spans: Sequence[Span]) -> None:
        self.spans = list(spans)
        self.bounds = sorted({s.start_ns for s in spans} | {s.end_ns + 1 for s in spans})
        self.threads = sorted({s.global_tid for s in spans if s.global_tid is not None})
        self.width = len(self.threads) + 2
        """Classes: 0 unknown thread, 1..T the spans' threads, T+1 another thread."""
        self.keys = (len(self.bounds) + 1) * self.width
        """Number of keys: slots ``0..len(bounds)`` times classes."""

    def slot_sql(self, column: str) -> str:
        """SQL for the number of bounds ``<= column``: a balanced tree of CASEs (depth
        log2 of the number of bounds), evaluated by SQLite per row."""
        def node(lo: int, hi: int) -> str:
            if lo == hi:
                return str(lo)
            mid = (lo + hi) // 2
            return (f"CASE WHEN {column} < {int(self.bounds[mid])} THEN {node(lo, mid)} "
                    f"ELSE {node(mid + 1, hi)} END")
        return f"({node(0, len(self.bounds))})"

    def class_sql(self, column: str) -> str:
        """SQL for the class of a thread column (``NULL``: no thread column)."""
        if column == "NULL":
            return "0"
        arms = " ".join(f"WHEN {int(t)} THEN {i + 1}" for i, t in enumerate(self.threads))
        other = self.width - 1
        return f"(CASE {column} {arms} ELSE (CASE WHEN {column} IS NULL THEN 0 " \
               f"ELSE {other} END) END)"

    def per_span(self, acc: Acc) -> Totals:
        """Totals per span from ``key -> (ns, count)``."""
        slots = len(self.bounds) + 1
        # prefix[c][j] = totals of class c over slots < j
        prefix_ns = [[0] * (slots + 1) for _ in range(self.width)]
        prefix_n = [[0] * (slots + 1) for _ in range(self.width)]
        for key, (ns, n) in acc.items():
            slot, cls = divmod(key, self.width)
            prefix_ns[cls][slot + 1] += ns
            prefix_n[cls][slot + 1] += n
        for cls in range(self.width):
            for j in range(1, slots + 1):
                prefix_ns[cls][j] += prefix_ns[cls][j - 1]
                prefix_n[cls][j] += prefix_n[cls][j - 1]
        out: Totals = []
        for span in self.spans:
            lo = bisect.bisect_right(self.bounds, span.start_ns)
            hi = bisect.bisect_right(self.bounds, span.end_ns)
            if span.global_tid is None:
                classes = list(range(self.width))
            else:
                classes = [0, self.threads.index(span.global_tid) + 1]
            out.append((sum(prefix_ns[c][hi + 1] - prefix_ns[c][lo] for c in classes),
                        sum(prefix_n[c][hi + 1] - prefix_n[c][lo] for c in classes)))
        return out
