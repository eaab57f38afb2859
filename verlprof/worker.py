"""Worker side: the profiling RPCs of a Ray actor and the ``annotate`` decorator for its phases.

A worker class mixes in :class:`ProfilingWorkerMixin` and decorates its phase methods::

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

import functools
import logging
import os
import socket
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar

from verlprof.backends import make_capture
from verlprof.plan import ProcessPlan, Window

logger = logging.getLogger("verlprof")

F = TypeVar("F", bound=Callable[..., Any])

_ACTIVE_OWNERS: set = set()
"""``id()`` of every worker of this process with a window armed or open."""

_WRAPPERS: weakref.WeakSet[Callable] = weakref.WeakSet()
"""Every ``annotate`` wrapper of this process. Each holds two code objects for the same
closure, ``__verlprof_codes__ = (passthrough, checking)``: while no worker of the process has a
window armed or open (always, on an unselected rank) the wrappers run the passthrough, a plain
call of the method with no test at all; :func:`set_active` swaps every wrapper to the checking
code and back. Ray resolved the methods once, so the function objects must stay the same:
only their ``__code__`` changes (benchmarks/p1_annotate.py)."""
_LIVE_LOCK = threading.Lock()


def set_active(owner: Any, active: bool) -> None:
    """Route ``owner``'s ``annotate``d methods through its session (True) or straight to the
    method (False)."""
    owner._verlprof_active = active
    with _LIVE_LOCK:
        was_live = bool(_ACTIVE_OWNERS)
        if active:
            _ACTIVE_OWNERS.add(id(owner))
        else:
            _ACTIVE_OWNERS.discard(id(owner))
        live = bool(_ACTIVE_OWNERS)
        if live != was_live:
            for wrapper in list(_WRAPPERS):
                wrapper.__code__ = wrapper.__verlprof_codes__[live]


def _register(checking: Callable, passthrough: Callable) -> Callable:
    """``passthrough`` (the function object Ray will hold) with both codes, current one set."""
    passthrough.__verlprof_codes__ = (passthrough.__code__, checking.__code__)
    with _LIVE_LOCK:
        passthrough.__code__ = passthrough.__verlprof_codes__[bool(_ACTIVE_OWNERS)]
        _WRAPPERS.add(passthrough)
    return passthrough


def annotate(role: str, phase: Optional[str] = None) -> Callable[[F], F]:
    """Mark a worker method as phase ``<role>/<phase>`` (phase defaults to the method name).

    Inside an open window the call is wrapped in an NVTX range (nsys) or a ``record_function``
    (torch); in discrete mode a planned phase opens its own window. Otherwise the method runs
    as is: while no window of this process is armed or open, the only cost is this wrapper's
    call, with no test at all.
    """

    import inspect

    def generic(fn: Callable, name: str) -> Callable:
        def wrapper(self, *args, **kwargs):
            if self._verlprof_active:
                return self._verlprof_session.run_phase(role, name, fn, self, args, kwargs)
            return fn(self, *args, **kwargs)

        checking = wrapper

        def wrapper(self, *args, **kwargs):  # noqa: F811 - the passthrough twin of the above
            return fn(self, *args, **kwargs)
            role, name  # noqa: B018 - unreachable: keeps the checking code's free variables

        return _register(checking, wrapper)

    def exact(fn: Callable, name: str) -> Optional[Callable]:
        """A wrapper with ``fn``'s own parameters, so that the off path forwards them with a
        plain call: ``*args, **kwargs`` forwarding costs several times a bare method call on
        CPython (benchmarks/p1_annotate.py). None when ``fn``'s signature cannot be copied."""
        if not inspect.isfunction(fn):
            return None
        try:
            params = list(inspect.signature(fn, follow_wrapped=False).parameters.values())
        except (TypeError, ValueError):
            return None
        kinds = inspect.Parameter
        if not params or params[0].kind not in (kinds.POSITIONAL_ONLY,
                                                kinds.POSITIONAL_OR_KEYWORD) \
                or any(p.name.startswith("_verlprof_") for p in params):
            return None
        bare = inspect.Signature([p.replace(default=kinds.empty, annotation=kinds.empty)
                                  for p in params])
        this, rest = params[0].name, params[1:]
        positional = [p.name for p in rest if p.kind in (kinds.POSITIONAL_ONLY,
                                                         kinds.POSITIONAL_OR_KEYWORD)]
        positional += [f"*{p.name}" for p in rest if p.kind == kinds.VAR_POSITIONAL]
        keyword = [f"{p.name}={p.name}" for p in rest if p.kind == kinds.KEYWORD_ONLY]
        keyword += [f"**{p.name}" for p in rest if p.kind == kinds.VAR_KEYWORD]
        as_dict = [f"{p.name!r}: {p.name}" for p in rest if p.kind == kinds.KEYWORD_ONLY]
        as_dict += [f"**{p.name}" for p in rest if p.kind == kinds.VAR_KEYWORD]
        call = f"_verlprof_fn({', '.join([this, *positional, *keyword])})"
        source = (  # closure variables, not globals: LOAD_DEREF is the cheapest load
            "def make(_verlprof_fn, _verlprof_role, _verlprof_name):\n"
            f"    def wrapper{bare}:\n"
            f"        if {this}._verlprof_active:\n"
            f"            return {this}._verlprof_session.run_phase(_verlprof_role,"
            f" _verlprof_name, _verlprof_fn, {this}, ({''.join(a + ', ' for a in positional)}),"
            f" {{{', '.join(as_dict)}}})\n"
            f"        return {call}\n"
            "    checking = wrapper\n"
            f"    def wrapper{bare}:\n"
            f"        return {call}\n"
            "        _verlprof_role, _verlprof_name\n"  # unreachable: same free variables
            "    return checking, wrapper\n")
        scope: Dict[str, Any] = {}
        exec(compile(source, f"<verlprof.annotate {fn.__qualname__}>", "exec"), scope)  # noqa: S102
        wrapper = _register(*scope["make"](fn, role, name))
        wrapper.__defaults__ = fn.__defaults__
        wrapper.__kwdefaults__ = fn.__kwdefaults__
        return wrapper

    def decorate(fn: F) -> F:
        name = phase or fn.__name__
        wrapper = functools.wraps(fn)(exact(fn, name) or generic(fn, name))
        wrapper.__verlprof_phase__ = (role, name)  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate


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
    node_id = ""
    try:
        import ray

        if ray.is_initialized():
            node_id = ray.get_runtime_context().get_node_id()
    except Exception:  # identity is best effort: never fail a status call over it
        node_id = ""
    profiler = profiler_ancestor()
    return {"host": socket.gethostname(), "pid": os.getpid(), "node_id": node_id,
            "under_profiler": profiler is not None, "profiler_pid": profiler}


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
