"""The worker session: executes one selected process's :class:`~verlprof.plan_model.ProcessPlan`.

Unselected processes are never configured: their ``annotate``d methods pay one wrapper call
and one flag test. A selected process gets a :class:`ProfileSession`: whole-step windows
open on ``verlprof_start`` and close on ``verlprof_stop``; in discrete mode ``verlprof_start``
only arms the step and each planned phase call opens and closes its own window.

Every transition is one row of :data:`TRANSITIONS`, in the style of ``torch.profiler``'s action
map: ``(state, event) -> action``, one table per mode. The two modes differ only where a step's
window opens (at start, or at each planned phase call) and in what a phase call does.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Callable, Dict, List, Literal, Optional, Sequence, Set, Tuple

from verlprof.backends import get_backend
from verlprof.backends.base import OpenedWindow
from verlprof.plan_model import ProcessPlan, Window
from verlprof.records import (
    Mode,
    ProcessIdentity,
    SessionStatus,
    StartReply,
    StepWindow,
    StopOutcome,
    WorkerReport,
)
from verlprof.worker import wall_clock
from verlprof.worker.annotate import set_active
from verlprof.worker.timed import bounded

SessionState = Literal["idle", "armed", "open", "finalized"]
"""``idle``: nothing armed; ``armed``: a step window armed and no capture open (discrete mode
between its phases); ``open``: a capture window open (whole mode from start to stop, discrete
mode during a planned phase call); ``finalized``: reports handed over, nothing opens again."""
SessionEvent = Literal["start", "stop", "phase", "finalize"]
"""``verlprof_start``, ``verlprof_stop``, an ``annotate``d call while armed, ``finalize``."""

IDLE: SessionState = "idle"
ARMED: SessionState = "armed"
OPEN: SessionState = "open"
FINALIZED: SessionState = "finalized"
START: SessionEvent = "start"
STOP: SessionEvent = "stop"
PHASE: SessionEvent = "phase"
FINALIZE: SessionEvent = "finalize"


class ProfileSession:
    """Executes one process's plan. Every transition is idempotent and thread-safe."""

    def __init__(self, plan: ProcessPlan, owner: Any):
        self.plan = plan
        self.owner = owner
        self.capture = bounded(get_backend(plan.backend).capture(plan), plan.window_time)
        self.state: SessionState = IDLE
        self.armed: Optional[StepWindow] = None
        """The step window armed (discrete) or open (whole)."""
        self.current: Optional[OpenedWindow] = None
        """The capture window open now (state ``open``)."""
        self.opened: List[OpenedWindow] = []
        self.ignored: List[str] = []
        self.notes: List[str] = []
        """Lines for the manifest's warnings (see :meth:`_note_unplanned`)."""
        self._noted: Set[Tuple[str, str]] = set()
        self._actions = TRANSITIONS[plan.mode]
        self._pending = list(plan.windows)
        # the plan's step windows in order (every planned window of a process belongs to one)
        self._order: Tuple[StepWindow, ...] = tuple(dict.fromkeys(w.steps
                                                                   for w in plan.windows))
        self._next = 0
        self._lock = threading.RLock()
        self._final: Optional[List[WorkerReport]] = None
        self._handed: Set[str] = set()
        """Report paths handed over before finalize (:meth:`hand_over`)."""
        self._finalize_lock = threading.Lock()
        self._ready: Set[str] = set()
        """Report paths already named by :meth:`ready` (finalize still lists them)."""

    # -- events: each runs the row of (state, event) --------------------------------------
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
            return self._actions[(self.state, START)](self, steps)

    def stop(self, steps: Optional[Sequence[int]] = None) -> StopOutcome:
        """Close the open window (whole) or disarm (discrete). Stopping nothing is a no-op."""
        with self._lock:
            return self._actions[(self.state, STOP)](self, steps)

    def run_phase(self, role: str, phase: str, fn: Callable, owner: Any, args, kwargs):
        """An ``annotate``d call, while a window of this process is armed. Not under the lock:
        the phase runs as long as it runs; the actions that change state take the lock."""
        return self._actions[(self.state, PHASE)](self, role, phase, fn, owner, args, kwargs)

    def finalize(self, timeout_s: float) -> List[WorkerReport]:
        """Close what is open, wait for the reports, return one entry per planned window.

        Idempotent: a second call returns the first answer (the reports were already handed
        over once).
        """
        with self._finalize_lock:  # not self._lock: status must answer while reports settle
            return self._actions[(self.state, FINALIZE)](self, timeout_s)

    def hand_over(self, steps: Sequence[int]) -> List[WorkerReport]:
        """The reports of the closed windows of step window ``steps``, where the tool wrote
        them at close (:attr:`~verlprof.backends.base.Capture.writes_at_close`); nothing
        otherwise. Each is handed over once, and :meth:`finalize` leaves it out."""
        with self._lock:
            if not self.capture.writes_at_close or self.state == FINALIZED:
                return []
            done = {o.window.report.path for o in self.opened if o.end_ns is not None
                    and o.window.steps == tuple(steps)} - self._handed
            if not done:
                return []
            self._handed |= done
            return [r for r in self.capture.collect(self.opened, [], 0.0)
                    if r.report.path in done]

    def ready(self) -> List[WorkerReport]:
        """The closed windows' reports complete on disk now, each named once, for the
        controller to place while the job runs (``runtime/placement.py``). Unlike
        :meth:`hand_over`, finalize still lists them: the controller keeps the copy it
        placed and has the raw file removed then."""
        with self._lock:
            if self.state == FINALIZED:
                return []
            opened = list(self.opened)
        found = self.capture.final_now(opened)  # off the lock: a look at files and /proc
        with self._lock:
            fresh = [r for r in found if r.report.path not in self._ready | self._handed]
            self._ready.update(r.report.path for r in fresh)
        return fresh

    def add_windows(self, plan: ProcessPlan) -> None:
        """Follow ``plan``: this process's plan with windows asked for while the job runs
        (:mod:`verlprof.plan.request_plan`). They open only when a start names their steps: the
        planned order that a start without arguments follows stays as it was."""
        with self._lock:
            if self.state == FINALIZED:
                return
            known = set(self.plan.windows)
            self._pending.extend(w for w in plan.windows if w not in known)
            self.plan = plan

    def status(self, identity: ProcessIdentity) -> SessionStatus:
        with self._lock:
            return SessionStatus(
                identity=identity, configured=True, armed=self.armed,
                open_window=self.current.window.report.path if self.current else None,
                opened=len(self.opened), pending=len(self._pending),
                next=self._order[self._next] if self._next < len(self._order) else None,
                ignored=tuple(self.ignored), finalized=self.state == FINALIZED)

    # -- start ---------------------------------------------------------------------------
    def _open_step(self, steps: Optional[Sequence[int]]) -> StartReply:
        """whole, idle: the step window's capture opens now."""
        meant = self._meant(steps)
        window = self._pending_window(meant) if meant is not None else None
        if meant is None or window is None:
            return "not-planned"
        self.armed = meant
        self._open(window)
        set_active(self.owner, True)
        return "started"

    def _arm_step(self, steps: Optional[Sequence[int]]) -> StartReply:
        """discrete, idle: the step is armed; its planned phase calls open the windows."""
        meant = self._meant(steps)
        if meant is None or self._pending_window(meant) is None:
            return "not-planned"
        self.armed = meant
        self.state = ARMED
        set_active(self.owner, True)
        return "started"

    def _restart(self, steps: Optional[Sequence[int]]) -> StartReply:
        """armed or open: the same window again is a no-op; another one stops this one first,
        then starts as from idle."""
        meant = self._meant(steps)
        if meant is None:
            return "not-planned"
        if meant == self.armed:
            return "already-started"
        self._actions[(self.state, STOP)](self, None)
        return self._actions[(self.state, START)](self, meant)

    def _refuse_start(self, steps: Optional[Sequence[int]]) -> StartReply:
        """finalized: the reports were handed over; nothing opens again."""
        return "finalized"

    def _meant(self, steps: Optional[Sequence[int]]) -> Optional[StepWindow]:
        """The step window a start means (without ``steps``: the next planned one; None when
        none is left); the next one becomes the planned one after it."""
        if steps is None:
            if self._next >= len(self._order):
                self.ignored.append("start of the next window ignored: none left")
                return None
            steps = self._order[self._next]
        meant = tuple(steps)
        if meant in self._order:
            self._next = self._order.index(meant) + 1
        return meant

    def _pending_window(self, steps: StepWindow) -> Optional[Window]:
        """The first planned window of ``steps`` not opened yet (None: ignored, noted)."""
        window = next((w for w in self._pending if w.steps == steps), None)
        if window is None:
            self.ignored.append(f"start of steps {list(steps)} ignored: not planned or "
                                "already captured")
        return window

    # -- stop ----------------------------------------------------------------------------
    def _not_started(self, steps: Optional[Sequence[int]]) -> StopOutcome:
        """idle or finalized: nothing to stop."""
        return "not-started"

    def _disarm(self, steps: Optional[Sequence[int]]) -> StopOutcome:
        """armed or open: the open window closes, then the step is disarmed (a stop naming
        another window is a no-op)."""
        if steps is not None and tuple(steps) != self.armed:
            return "not-started"
        set_active(self.owner, False)
        if self.state == OPEN:
            self._close()
        self.armed, self.state = None, IDLE
        return "stopped"

    # -- phase ---------------------------------------------------------------------------
    def _ranged(self, role: str, phase: str, fn: Callable, owner: Any, args, kwargs):
        """whole: a named range; the open window records it."""
        with self.capture.phase(f"{role}/{phase}"):
            return fn(owner, *args, **kwargs)

    def _bare(self, role: str, phase: str, fn: Callable, owner: Any, args, kwargs):
        """discrete, no step armed or a window already open (a nested phase runs inside it):
        the method as is."""
        return fn(owner, *args, **kwargs)

    def _phase_window(self, role: str, phase: str, fn: Callable, owner: Any, args, kwargs):
        """discrete, armed: a planned phase of the armed step opens its own window around the
        call (each at most once); any other call runs as is."""
        with self._lock:
            window = self._claim(role, phase)
            if window is not None:
                self._open(window)
        if window is None:
            self._note_unplanned(role, phase)
            return fn(owner, *args, **kwargs)
        try:
            with self.capture.phase(f"{role}/{phase}"):
                return fn(owner, *args, **kwargs)
        finally:
            with self._lock:
                if self.current is not None and self.current.window is window:
                    self._close()

    def _note_unplanned(self, role: str, phase: str) -> None:
        """A phase of a selected role ran in an armed step but no window of the plan is
        its: said once, naming the key that adds it (a phase of a colocated role that selects
        nothing here, or a second call of a planned phase, is as planned)."""
        plan = self.plan
        if role not in plan.selected_roles or (role, phase) in self._noted or any(
                w.role == role and w.phase == phase for w in plan.windows):
            return
        self._noted.add((role, phase))
        listed = sorted({w.phase for w in plan.windows if w.role == role and w.phase} | {phase})
        self.notes.append(
            f"{plan.group} rank {plan.rank}: {role}/{phase} ran in profiled step "
            f"{'-'.join(map(str, self.armed or ()))} but opens no window in discrete mode; "
            f"to capture it, set trainer.profiler.phases.{role}=[{','.join(listed)}]")

    def _claim(self, role: str, phase: str) -> Optional[Window]:
        """The planned window of this phase in the armed step, if still pending. Checked
        again under the lock: a stop or another phase may have come first."""
        if self.state != ARMED:
            return None
        return next((w for w in self._pending if w.steps == self.armed and w.role == role
                     and w.phase == phase), None)

    # -- finalize ------------------------------------------------------------------------
    def _finalize(self, timeout_s: float) -> List[WorkerReport]:
        """Stop what is armed or open, then hand over one record per planned window."""
        self.stop()
        with self._lock:
            self.state = FINALIZED
            never_opened, self._pending = list(self._pending), []
            self.capture.flush(never_opened)
        final = [r for r in self.capture.collect(self.opened, never_opened, timeout_s)
                 if r.report.path not in self._handed]
        if final and self.notes:
            final[0] = dataclasses.replace(final[0], notes=tuple(self.notes))
        self._final = final
        return list(final)

    def _answer_again(self, timeout_s: float) -> List[WorkerReport]:
        """finalized: the first answer again (a collection that raised is tried again)."""
        if self._final is None:
            return self._finalize(timeout_s)
        return list(self._final)

    # -- window bookkeeping --------------------------------------------------------------
    def _open(self, window: Window) -> None:
        self._pending.remove(window)
        self.current = OpenedWindow(window, wall_clock.clock_ns())
        self.opened.append(self.current)
        self.state = OPEN
        self.capture.open(window)

    def _close(self) -> None:
        """Close the open window; its step stays armed until stopped."""
        current, self.current = self.current, None
        self.state = ARMED
        assert current is not None  # the table only routes here with a window open
        try:
            self.capture.close(current.window)
        finally:
            current.end_ns = wall_clock.clock_ns()


Action = Callable[..., Any]
S = ProfileSession
_SHARED: Dict[Tuple[SessionState, SessionEvent], Action] = {
    (ARMED, START): S._restart,
    (OPEN, START): S._restart,
    (FINALIZED, START): S._refuse_start,
    (IDLE, STOP): S._not_started,
    (ARMED, STOP): S._disarm,
    (OPEN, STOP): S._disarm,
    (FINALIZED, STOP): S._not_started,
    (IDLE, FINALIZE): S._finalize,
    (ARMED, FINALIZE): S._finalize,
    (OPEN, FINALIZE): S._finalize,
    (FINALIZED, FINALIZE): S._answer_again,
}

TRANSITIONS: Dict[Mode, Dict[Tuple[SessionState, SessionEvent], Action]] = {
    "whole": {
        **_SHARED,
        (IDLE, START): S._open_step,
        # a phase reaches the session only while a window is open, unless a stop races it:
        # a range outside the window records nothing
        (IDLE, PHASE): S._ranged,
        (ARMED, PHASE): S._ranged,
        (OPEN, PHASE): S._ranged,
        (FINALIZED, PHASE): S._ranged,
    },
    "discrete": {
        **_SHARED,
        (IDLE, START): S._arm_step,
        (IDLE, PHASE): S._bare,
        (ARMED, PHASE): S._phase_window,
        (OPEN, PHASE): S._bare,
        (FINALIZED, PHASE): S._bare,
    },
}
"""Every transition of a session, one row each: ``(state, event) -> action`` per mode."""
del S
