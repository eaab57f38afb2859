"""Attribute GPU activity (kernels, memcpys) to the CPU-side phase ranges that caused it.

A GPU event belongs to the range that contains its *reference time*: the start of the CPU call
that launched it when the report correlates the two (nsys ``CUPTI_ACTIVITY_KIND_RUNTIME``,
torch ``cuda_runtime`` events), else its own GPU start. Kernels run asynchronously and may end
after the phase's range closes; they still count for the phase that launched them.
"""

from __future__ import annotations

import bisect
from typing import List, Optional, Sequence, Tuple

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
