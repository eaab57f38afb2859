"""Time bounds inside a window (``trainer.profiler.window_delay_s`` / ``window_duration_s``).

A report of a 10-minute step is too large to open; bounding capture by time is one of the
levers people use against oversized reports. :class:`TimedCapture` wraps a backend's capture:
when the session opens a window (its step or phase call starts), the backend's capture opens
``delay_s`` later and closes after ``duration_s``, or when the session closes the window,
whichever comes first. A window whose step ends before the delay captures nothing; its
report is missing with that reason.

Where the capture may be driven from any thread (nsys: capture ranges are start/end ranges)
timers do it at the exact times. The torch profiler starts and stops only on the thread that
drives it, so there the bounds take effect at the next phase boundary (an ``annotate``d call
starting or ending) on that thread. The manifest records the bounds that took effect: each
report's ``window_start_ns``/``window_end_ns`` are when its capture really opened and closed.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from contextlib import contextmanager
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from verlprof.backends.base import Capture, OpenedWindow
from verlprof.plan_model import Window, WindowTime
from verlprof.records import WorkerReport
from verlprof.worker import wall_clock


class TimedCapture(Capture):
    """``inner`` with every window bounded in time by ``bounds``."""

    def __init__(self, inner: Capture, bounds: WindowTime):
        super().__init__(inner.plan)
        self.inner = inner
        self.bounds = bounds
        self.any_thread = inner.opens_on_any_thread
        self.writes_at_close = inner.writes_at_close
        self._lock = threading.RLock()
        self._window: Optional[Window] = None
        self._began = 0.0
        """Monotonic time the session opened the current window."""
        self._opened_at: Optional[float] = None
        """Monotonic time the inner capture opened (None: not open)."""
        self._timers: List[threading.Timer] = []
        self.effective: Dict[Window, Tuple[int, Optional[int]]] = {}
        """Per window: when its capture really opened and closed (ns since the epoch)."""
        self.skipped: Dict[Window, str] = {}
        """Windows whose step ended before the delay, with the reason."""

    # -- the session's calls -----------------------------------------------------------------
    def open(self, window: Window) -> None:
        with self._lock:
            self._window, self._began, self._opened_at = window, time.monotonic(), None
            if self.bounds.delay_s <= 0:
                self._open_inner()
            elif self.any_thread:
                self._after(self.bounds.delay_s, self._open_if, window)

    def close(self, window: Window) -> None:
        with self._lock:
            for timer in self._timers:
                timer.cancel()
            self._timers = []
            if self._opened_at is not None:
                self._close_inner()
            elif window not in self.effective:
                self.skipped[window] = (
                    f"its step ended {time.monotonic() - self._began:.1f} s in, before "
                    f"trainer.profiler.window_delay_s={self.bounds.delay_s:g}: nothing captured")
            self._window = None

    @contextmanager
    def phase(self, label: str) -> Iterator[None]:
        if not self.any_thread:
            self._due()
        try:
            with self.inner.phase(label):
                yield
        finally:
            if not self.any_thread:
                self._due()

    def flush(self, never_opened: Sequence[Window]) -> None:
        self.inner.flush([*never_opened, *self.skipped])

    def collect(self, opened: Sequence[OpenedWindow], never_opened: Sequence[Window],
                timeout_s: float) -> List[WorkerReport]:
        captured = [OpenedWindow(o.window, *self.effective[o.window]) for o in opened
                    if o.window in self.effective]
        skipped = [o.window for o in opened if o.window not in self.effective]
        reports = self.inner.collect(captured, [*never_opened, *skipped], timeout_s)
        why = {w.report: reason for w, reason in self.skipped.items()}
        return [dataclasses.replace(r, reason=why[r.report]) if r.report in why else r
                for r in reports]

    def final_now(self, opened: Sequence[OpenedWindow]) -> List[WorkerReport]:
        with self._lock:  # the windows as captured; one skipped by its bounds has no report
            captured = [OpenedWindow(o.window, *self.effective[o.window]) for o in opened
                        if o.window in self.effective]
        return self.inner.final_now(captured)

    # -- bounds ------------------------------------------------------------------------------
    def _open_inner(self) -> None:
        """Lock held: the inner capture opens now; its duration starts counting."""
        window = self._window
        assert window is not None
        self.inner.open(window)
        self._opened_at = time.monotonic()
        self.effective[window] = (wall_clock.clock_ns(), None)
        if self.bounds.duration_s is not None and self.any_thread:
            self._after(self.bounds.duration_s, self._close_if, window)

    def _close_inner(self) -> None:
        """Lock held: the inner capture closes now (the session's window stays open)."""
        window = self._window
        assert window is not None
        self._opened_at = None
        try:
            self.inner.close(window)
        finally:
            self.effective[window] = (self.effective[window][0], wall_clock.clock_ns())

    def _open_if(self, window: Window) -> None:
        with self._lock:
            if self._window is window and self._opened_at is None \
                    and window not in self.effective:
                self._open_inner()

    def _close_if(self, window: Window) -> None:
        with self._lock:
            if self._window is window and self._opened_at is not None:
                self._close_inner()

    def _due(self) -> None:
        """At a phase boundary, on the capture's own thread: apply bounds that have passed."""
        with self._lock:
            window, now = self._window, time.monotonic()
            if window is None:
                return
            if self._opened_at is None and window not in self.effective \
                    and now - self._began >= self.bounds.delay_s:
                self._open_inner()
            elif self._opened_at is not None and self.bounds.duration_s is not None \
                    and now - self._opened_at >= self.bounds.duration_s:
                self._close_inner()

    def _after(self, seconds: float, action, window: Window) -> None:
        timer = threading.Timer(seconds, action, (window,))
        timer.daemon = True
        self._timers.append(timer)
        timer.start()


def bounded(capture: Capture, bounds: WindowTime) -> Capture:
    """``capture`` itself, or wrapped when the plan bounds windows in time."""
    return TimedCapture(capture, bounds) if bounds.bounded else capture


__all__ = ["TimedCapture", "bounded"]
