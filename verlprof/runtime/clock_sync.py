"""Each process's clock against the controller's, with a known error bound.

The controller asks its ranks for their wall clock (``verlprof_clock``) at registration, and
each window's stop answers with it (``StopReply.clock_ns``: a call of its own made a profiled
step's control cost three fan-outs instead of two, benchmarks/p2_fanout.py). A reading ``w``
answered between the controller's ``t0`` (call sent) and ``t1`` (answer back) was taken at some
controller time in ``[t0, t1]``: the offset ``w - (t0 + t1) / 2`` is off by at most half the
round trip. Of all readings, the one with the smallest round trip is kept (the tightest bound).
The RPC layer answers a fan-out as a whole, so the round trip is the fan-out's: at thousands of
ranks the bound is that of the slowest answer
(docs/user_guide.md#one-trace-of-the-whole-job says how large it came out).
"""

from __future__ import annotations

import time
from typing import Any, Dict, Mapping, Sequence, Tuple

from verlprof.records import StopReply, Target

ClockReading = Tuple[int, int]
"""(offset ns: process clock minus controller clock, error bound ns)."""


class ClockSync:
    """The tightest clock reading of every process the controller has asked."""

    def __init__(self) -> None:
        self.readings: Dict[Target, ClockReading] = {}

    def measure(self, rpc: Any, targets: Sequence[Target]) -> None:
        """One reading of each target that is neither dead nor busy (a busy rank would only
        queue it); a rank that does not answer keeps its earlier reading, and says nothing:
        the start and stop calls name it."""
        busy, failed = getattr(rpc, "busy", {}), rpc.failed
        asked = [t for t in targets if t not in failed and t not in busy]
        if not asked:
            return
        self.call(rpc, "verlprof_clock", asked)

    def call(self, rpc: Any, method: str, targets: Sequence[Target]) -> Tuple[Any, Any]:
        """``method`` without arguments on ``targets`` (``rpc.call``'s answer), each answer
        taken as a reading."""
        sent = time.time_ns()
        answers, errors = rpc.call(method, targets, lambda t: ())
        self.take(answers, sent, time.time_ns())
        return answers, errors

    def take(self, answers: Mapping[Target, Any], sent: int, back: int) -> None:
        """Readings answered between controller times ``sent`` and ``back``: a clock in ns, or
        a :class:`~verlprof.records.StopReply` carrying one; anything else is no reading."""
        half = (back - sent + 1) // 2
        middle = sent + (back - sent) // 2
        for target, answer in answers.items():
            worker_ns = answer.clock_ns if isinstance(answer, StopReply) else answer
            if not isinstance(worker_ns, int):
                continue
            known = self.readings.get(target)
            if known is None or half < known[1]:
                self.readings[target] = (worker_ns - middle, half)

    def fields(self, target: Target) -> Dict[str, Any]:
        """The manifest's clock fields of ``target`` (None: never measured)."""
        offset, error = self.readings.get(target, (None, None))
        return {"clock_offset_ns": offset, "clock_error_ns": error}
