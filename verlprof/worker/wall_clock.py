"""The worker's wall clock, as the controller reads it to align every process on one timeline.

Every worker-side reading goes through :func:`clock_ns`, looked up on this module at each call,
so that one name is the workers' clock: a test that runs ranks in the controller's own process
replaces it (``monkeypatch.setattr(wall_clock, "clock_ns", ...)``) to shift their clocks on
purpose and check that the trace puts their events back in place.
"""

from __future__ import annotations

import time


def clock_ns() -> int:
    """This process's wall clock, ns since the epoch."""
    return time.time_ns()
