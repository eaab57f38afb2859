"""Worker side: the profiling RPCs of a Ray actor and the ``annotate`` decorator for its phases.

A worker class mixes in :class:`ProfilingWorkerMixin` and decorates its phase methods with
:func:`~verlprof.annotate.annotate` (also importable from here)::

    @ray.remote
    class ActorRolloutRefWorker(ProfilingWorkerMixin):
        @annotate("actor")
        def update_actor(self, batch): ...

Unselected processes are never configured: their ``annotate``d methods pay one wrapper call,
with no test at all. A selected process gets a :class:`ProfileSession` that
executes its :class:`~verlprof.plan.ProcessPlan`: whole-step windows open on
``start_profile`` and close on ``stop_profile``; in discrete mode ``start_profile`` only arms
the step and each planned phase call opens and closes its own window.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from verlprof.annotate import annotate, set_active
from verlprof.backends import make_capture
from verlprof.plan import ProcessPlan, Window

__all__ = ["ProfileSession", "ProfilingWorkerMixin", "annotate", "node_id", "process_identity",
           "set_active"]

logger = logging.getLogger("verlprof")


@dataclass
class OpenedWindow:
    """A window this process actually opened (nsys numbers its reports in this order)."""

    window: Window
    start_ns: int
    end_ns: Optional[int] = None


class ProfileSession:
    """Executes one process's plan. Every transition is idempotent and thread-safe."""

    def __init__(self, plan: ProcessPlan, owner: Any):
        self.plan = plan
        self.owner = owner
        self.capture = make_capture(plan)
        self.opened: List[OpenedWindow] = []
        self.armed: Optional[Tuple[int, ...]] = None
        self.current: Optional[OpenedWindow] = None
        self.ignored: List[str] = []
        self._pending = list(plan.windows)
        # the plan's step windows in order (every planned window of a process belongs to one)
        self._order: Tuple[Tuple[int, ...], ...] = tuple(dict.fromkeys(w.steps
                                                                       for w in plan.windows))
        self._next = 0
        self._lock = threading.RLock()
        self._final: Optional[List[Dict[str, Any]]] = None
        self._finalizing = False
        self._finalize_lock = threading.Lock()

    # -- controller RPCs ---------------------------------------------------------------
    def start(self, steps: Optional[Sequence[int]] = None) -> str:
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

    def stop(self, steps: Optional[Sequence[int]] = None) -> str:
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

    def status(self) -> Dict[str, Any]:
        with self._lock:
            return {"armed": list(self.armed) if self.armed else None,
                    "open_window": self.current.window.report.path if self.current else None,
                    "opened": len(self.opened), "pending": len(self._pending),
                    "next": (list(self._order[self._next]) if self._next < len(self._order)
                             else None),
                    "ignored": list(self.ignored), "finalized": self._finalizing}

    def finalize(self, timeout_s: float) -> List[Dict[str, Any]]:
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
            return [dict(e) for e in self._final]


class ProfilingWorkerMixin:
    """Profiling RPCs for a Ray actor. Cheap when the process is not selected."""

    _verlprof_active = False
    _verlprof_session: Optional[ProfileSession] = None

    def verlprof_configure(self, plan: Optional[ProcessPlan]) -> Dict[str, Any]:
        """Install this process's plan (sent by the controller to selected ranks only)."""
        if plan is None or (self._verlprof_session is not None
                            and self._verlprof_session.plan == plan):
            return self.profile_status()
        if self._verlprof_session is not None:
            self._verlprof_session.finalize(timeout_s=0)
        os.makedirs(plan.raw_dir, exist_ok=True)
        self._verlprof_session = ProfileSession(plan, self)
        return self.profile_status()

    def start_profile(self, steps: Optional[Sequence[int]] = None) -> str:
        """Open or arm the step window ``steps`` (default: the planned one after the last
        started); idempotent."""
        session = self._verlprof_session
        return session.start(steps) if session is not None else "not-configured"

    def stop_profile(self, steps: Optional[Sequence[int]] = None) -> str:
        """Close or disarm the current window; idempotent."""
        session = self._verlprof_session
        return session.stop(steps) if session is not None else "not-configured"

    def profile_status(self) -> Dict[str, Any]:
        """Where this process stands: identity, whether it runs under a profiler, its windows."""
        status = process_identity()
        session = self._verlprof_session
        status.update(session.status() if session is not None else {"configured": False})
        return status

    def finalize_profiles(self, timeout_s: float = 300.0) -> List[Dict[str, Any]]:
        """Stop, wait for this process's reports, and describe each planned one."""
        session = self._verlprof_session
        if session is None:
            return []
        identity = process_identity()
        return [dict(entry, host=identity["host"], pid=identity["pid"],
                     node_id=identity["node_id"]) for entry in session.finalize(timeout_s)]

    def verlprof_read_chunk(self, path: str, offset: int, size: int) -> bytes:
        """Part of a raw report, for a controller on another node (no shared filesystem)."""
        session = self._verlprof_session
        if session is None or not _is_inside(path, session.plan.raw_dir):
            raise PermissionError(f"{path} is not a report of this process")
        with open(path, "rb") as handle:
            handle.seek(offset)
            return handle.read(size)

    def verlprof_discard(self, path: str) -> bool:
        """Delete a raw report once the controller holds its copy."""
        session = self._verlprof_session
        if session is None or not _is_inside(path, session.plan.raw_dir):
            return False
        try:
            os.remove(path)
            return True
        except FileNotFoundError:
            return False


def process_identity() -> Dict[str, Any]:
    """Host, pid, Ray node id and whether a profiler wraps this process."""
    profiler = profiler_ancestor()
    return {"host": socket.gethostname(), "pid": os.getpid(), "node_id": node_id(),
            "under_profiler": profiler is not None, "profiler_pid": profiler}


def node_id() -> str:
    """This process's Ray node id; "" outside Ray. Best effort: identity never fails a call."""
    try:
        import ray

        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""
    except Exception:
        return ""


def profiler_ancestor() -> Optional[int]:
    """Pid of the nsys or rocprof-sys process that launched this one, if any (a wrapped launch
    is ``nsys profile`` → ``nsys-launcher`` → python; an unwrapped one is raylet → python)."""
    pid = os.getppid()
    for _ in range(4):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                argv = handle.read().split(b"\0")
            with open(f"/proc/{pid}/stat") as handle:
                parent = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None
        name = os.path.basename(argv[0].decode(errors="replace")) if argv else ""
        if name.startswith("rocprof-sys") or (name == "nsys" and argv[1:2] == [b"profile"]):
            return pid
        if parent <= 1:
            return None
        pid = parent
    return None


def _is_inside(path: str, root: str) -> bool:
    """True for a path strictly below ``root`` once symlinks and ``..`` are resolved."""
    real_root, real = os.path.realpath(root), os.path.realpath(path)
    return real != real_root and os.path.commonpath([real_root, real]) == real_root
