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

from verlprof.backends.nsys import capture_range

STEP_S = float(sys.argv[1]) if len(sys.argv) > 1 else 0.02
WINDOWS = 3

for _ in range(WINDOWS):
    t0 = time.perf_counter()
    handle = capture_range.open_window()
    opened = time.perf_counter() - t0
    time.sleep(STEP_S)
    capture_range.close_window(handle)
    capture_range.settle()
    print(f"alone {opened:.6f}", flush=True)
for _ in range(WINDOWS):
    t0 = time.perf_counter()
    handle = capture_range.open_window()
    opened = time.perf_counter() - t0
    time.sleep(STEP_S)
    capture_range.close_window(handle)
    time.sleep(STEP_S)  # the unprofiled step between two profiled ones
    print(f"schedule {opened:.6f}", flush=True)
capture_range.settle()
