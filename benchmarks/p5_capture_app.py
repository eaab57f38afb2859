"""Run under nsys by :mod:`benchmarks.p5_stall`: what a capture range's start costs in a bare
process (no Ray, no verlprof session). Two figures, one line per window:

- ``alone <s>``: the start when the previous window's end has fully returned;
- ``schedule <s>``: the start on P5's own schedule (a 20 ms window, then a 20 ms gap), where
  nsys is still stopping the previous window's collection when the next one starts. This is
  the floor for a profiled step's entry on that schedule: nsys must see one window's end
  complete before the next start.

With a barrier folder and a count (argv 2 and 3), the app waits until that many apps have
checked in there before each series of windows: several nsys sessions (the controller's and a
rank's) then stop and start their windows at the same moments, as they do in a profiled run.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Optional

from verlprof.backends.nsys import capture_range

STEP_S = float(sys.argv[1]) if len(sys.argv) > 1 else 0.02
WINDOWS = 3
BARRIER_POLL_S = 0.01
BARRIER_TIMEOUT_S = 120.0


def meet(folder: Optional[str], count: int, stage: str) -> None:
    """Check in under ``folder`` for ``stage`` and wait until ``count`` apps have (each runs
    under its own nsys, started at a different moment). No folder: return at once."""
    if folder is None:
        return
    open(os.path.join(folder, f"{stage}.{os.getpid()}"), "w").close()
    deadline = time.monotonic() + BARRIER_TIMEOUT_S
    while sum(n.startswith(f"{stage}.") for n in os.listdir(folder)) < count:
        if time.monotonic() > deadline:
            raise SystemExit(f"barrier {folder}: fewer than {count} apps checked in")
        time.sleep(BARRIER_POLL_S)


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


BARRIER = sys.argv[2] if len(sys.argv) > 3 else None
APPS = int(sys.argv[3]) if len(sys.argv) > 3 else 1
meet(BARRIER, APPS, "alone")
windows("alone", None)
meet(BARRIER, APPS, "schedule")
windows("schedule", STEP_S)
capture_range.settle()
