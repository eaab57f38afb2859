"""The worker's wall clock, as the controller reads it to align every process on one timeline.

:func:`clock_ns` is ``time.time_ns()`` on this host. ``VERLPROF_TEST_CLOCK_OFFSET_NS`` (a test
hook, never set in production) adds a known offset, so that tests can run processes whose
clocks are shifted on purpose and check that the trace puts their events back in place.
"""

from __future__ import annotations

import os
import time

TEST_OFFSET_ENV = "VERLPROF_TEST_CLOCK_OFFSET_NS"
"""Nanoseconds added to this process's clock (tests only)."""


def clock_ns() -> int:
    """This process's wall clock, ns since the epoch (plus the test offset, when set)."""
    shift = os.environ.get(TEST_OFFSET_ENV)
    return time.time_ns() + (int(shift) if shift else 0)
