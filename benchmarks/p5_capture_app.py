"""Run under nsys by :mod:`benchmarks.p5_stall`: what a capture range's start costs in a bare
process (no Ray, no verlprof session). Two figures, one line per window:

- ``alone <s>``: the start when the previous window's end has fully returned;
- ``schedule <s>``: the start on P5's own schedule (a 20 ms window, then a 20 ms gap), where
  nsys is still stopping the previous window's collection when the next one starts. This is
  the floor for a profiled step's entry on that schedule: nsys must see one window's end
  complete before the next start.
"""

from __future__ import annotations

import sys
import time
from typing import Optional

from verlprof.backends.nsys import capture_range

STEP_S = float(sys.argv[1]) if len(sys.argv) > 1 else 0.02
WINDOWS = 3


def windows(kind: str, gap_s: Optional[float]) -> None:
    """Open and close :data:`WINDOWS` windows; print each start's latency as ``<kind> <s>``.
    ``gap_s`` None: wait for each end to return (the start alone); else leave that gap."""
    for _ in range(WINDOWS):
        t0 = time.perf_counter()
        handle = capture_range.open_window()
        opened = time.perf_counter() - t0
        time.sleep(STEP_S)
        capture_range.close_window(handle)
        if gap_s is None:
            capture_range.settle()
        else:
            time.sleep(gap_s)  # the unprofiled step between two profiled ones
        print(f"{kind} {opened:.6f}", flush=True)


windows("alone", None)
windows("schedule", STEP_S)
capture_range.settle()
