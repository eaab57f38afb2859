"""The worker session: executes one selected process's :class:`~verlprof.plan.model.ProcessPlan`.

Unselected processes are never configured: their ``annotate``d methods pay one wrapper call,
with no test at all. A selected process gets a :class:`ProfileSession`: whole-step windows
open on ``verlprof_start`` and close on ``verlprof_stop``; in discrete mode ``verlprof_start``
only arms the step and each planned phase call opens and closes its own window.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, List, Optional, Sequence, Tuple

from verlprof.backends import get_backend
from verlprof.backends.base import OpenedWindow
from verlprof.plan.model import ProcessPlan, Window
from verlprof.records import (
    ProcessIdentity,
    SessionStatus,
    StartReply,
    StepWindow,
    StopReply,
    WorkerReport,
)
from verlprof.worker.annotate import set_active


class ProfileSession:
    """Executes one process's plan. Every transition is idempotent and thread-safe."""

    def __init__(self, plan: ProcessPlan, owner: Any):
        self.plan = plan
        self.owner = owner
        self.capture = get_backend(plan.backend).capture(plan)
        self.opened: List[OpenedWindow] = []
        self.armed: Optional[StepWindow] = None
        self.current: Optional[OpenedWindow] = None
        self.ignored: List[str] = []
        self._pending = list(plan.windows)
        # the plan's step windows in order (every planned window of a process belongs to one)
        self._order: Tuple[StepWindow, ...] = tuple(dict.fromkeys(w.steps
                                                                       for w in plan.windows))
        self._next = 0
        self._lock = threading.RLock()
        self._final: Optional[List[WorkerReport]] = None
        self._finalizing = False
        self._finalize_lock = threading.Lock()

    # -- controller RPCs ---------------------------------------------------------------
    def start(self, steps: Optional[Sequence[int]] = None) -> StartReply:
        """Open (whole) or arm (discrete) the step window ``steps``; without ``steps``, the
        planned window after the last one started (what the controller sends when its mirror
        of this session says so: an RPC without arguments costs Ray noticeably less).

        Idempotent: the same window again is ``already-started``; a window already captured
        (a step repeated after a retry or a checkpoint resume) or not planned is ignored
        (``not-planned``); after :meth:`finalize` nothing opens (``finalized``). Starting a
        different window first stops the current one.
        """
        with self._lock:
            if self._finalizing:
                return "finalized"
            if steps is None:
                if self._next >= len(self._order):
                    self.ignored.append("start of the next window ignored: none left")
                    return "not-planned"
                steps = self._order[self._next]
            steps = tuple(steps)
            if steps in self._order:
                self._next = self._order.index(steps) + 1
            if self.armed == steps:
                return "already-started"
            if self.armed is not None:
                self.stop(self.armed)
            if not any(w.steps == steps for w in self._pending):
                note = f"start of steps {list(steps)} ignored: not planned or already captured"
                self.ignored.append(note)
                return "not-planned"
            self.armed = steps
            if self.plan.mode == "whole":
                window = next(w for w in self._pending if w.steps == steps)
                self._open(window)
            self._set_active(True)
            return "started"

    def stop(self, steps: Optional[Sequence[int]] = None) -> StopReply:
        """Close the open window (whole) or disarm (discrete). Stopping nothing is a no-op."""
        with self._lock:
            if self.armed is None or (steps is not None and tuple(steps) != self.armed):
                return "not-started"
            self._set_active(False)
            if self.current is not None:
                self._close()
            self.armed = None
            return "stopped"

    # -- phases ----------------------------------------------------------------------------
    def run_phase(self, role: str, phase: str, fn: Callable, owner: Any, args, kwargs):
        label = f"{role}/{phase}"
        if self.plan.mode == "whole":
            with self.capture.phase(label):
                return fn(owner, *args, **kwargs)
        window = self._claim_discrete(role, phase)
        if window is None:
            return fn(owner, *args, **kwargs)
        with self._lock:
            self._open(window)
        try:
            with self.capture.phase(label):
                return fn(owner, *args, **kwargs)
        finally:
            with self._lock:
                if self.current is not None and self.current.window is window:
                    self._close()

    def _claim_discrete(self, role: str, phase: str) -> Optional[Window]:
        """The planned window of this phase in the armed step (each opens at most once)."""
        with self._lock:
            if self.current is not None:
                return None  # nested phase: it runs inside the open window
            return next((w for w in self._pending if w.steps == self.armed and w.role == role
                         and w.phase == phase), None)

    # -- window bookkeeping ------------------------------------------------------------
    def _open(self, window: Window) -> None:
        self._pending.remove(window)
        self.current = OpenedWindow(window, time.time_ns())
        self.opened.append(self.current)
        self.capture.open(window)

    def _close(self) -> None:
        current, self.current = self.current, None
        try:
            self.capture.close(current.window)
        finally:
            current.end_ns = time.time_ns()

    def _set_active(self, active: bool) -> None:
        set_active(self.owner, active)

    def status(self, identity: ProcessIdentity) -> SessionStatus:
        with self._lock:
            return SessionStatus(
                identity=identity, configured=True, armed=self.armed,
                open_window=self.current.window.report.path if self.current else None,
                opened=len(self.opened), pending=len(self._pending),
                next=self._order[self._next] if self._next < len(self._order) else None,
                ignored=tuple(self.ignored), finalized=self._finalizing)

    def finalize(self, timeout_s: float) -> List[WorkerReport]:
        """Close what is open, wait for the reports, return one entry per planned window.

        Idempotent: a second call returns the first answer (the reports were already handed
        over once).
        """
        with self._finalize_lock:
            if self._final is None:
                self.stop()
                with self._lock:
                    self._finalizing = True
                    never_opened, self._pending = list(self._pending), []
                    self.capture.flush(never_opened)
                self._final = self.capture.collect(self.opened, never_opened, timeout_s)
            return list(self._final)
