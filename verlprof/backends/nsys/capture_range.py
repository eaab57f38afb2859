"""nsys capture windows that do not stall the training loop.

Under ``-c nvtx --capture-range-end=repeat:N`` nsys 2022.4 blocks the thread that ends the
capture range ``VERLPROF_CAPTURE`` for ~0.7-0.8 s while it stops collection (starting one
blocks ~0.1 s). The ``nvtx`` package makes that call holding the GIL, so the whole process
stops; ctypes releases the GIL around foreign calls. So a window is a start/end range made
through the ctypes binding where an NVTX library can be loaded (the ``nvidia-nvtx-cu12`` wheel
is a dependency for this), and it is *ended on a background thread*: the caller (the worker's
stop RPC, the controller between steps) returns at once, and nsys finishes the capture while
the training loop runs on. A start/end range may end on another thread and still yields one
report per window (NSYS_ON_CPU.md).

Order is kept: the next window's start waits for the previous end to return (nsys must see
the end before the next start), and so do report collection and process exit
(:func:`settle`). Without a GIL-releasing binding the end runs on the caller, as before: a
thread would not help while the call holds the GIL.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Optional

from verlprof.backends.nsys import nvtx
from verlprof.backends.nsys.nvtx_ctypes import make_ctypes_emitter
from verlprof.records import CAPTURE_RANGE, NVTX_DOMAIN

SETTLE_TIMEOUT_S = 120.0
"""Upper bound on waiting for a pending end (nsys normally returns within ~1 s)."""

_lock = threading.Lock()
_emitter: Any = None


def capture_emitter() -> Any:
    """The emitter for capture windows: ctypes (releases the GIL) when the process emitter is
    real and an NVTX library loads, else the process emitter (cached)."""
    global _emitter
    with _lock:
        if _emitter is None:
            base = nvtx.get_emitter()
            ctypes_emitter = make_ctypes_emitter() if base.enabled else None
            _emitter = ctypes_emitter if ctypes_emitter is not None else base
        return _emitter


def reset() -> None:
    """Forget the cached emitter (tests; after :func:`nvtx.reset_emitter`)."""
    global _emitter
    settle()
    with _lock:
        _emitter = None


class _Ender:
    """One daemon thread that ends capture ranges in order; :meth:`wait` joins what is queued."""

    def __init__(self) -> None:
        self._queue: queue.Queue[Any] = queue.Queue()
        self._thread: Optional[threading.Thread] = None
        self._start_lock = threading.Lock()

    def end(self, emitter: Any, handle: Any) -> None:
        with self._start_lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="verlprof-capture-end",
                                                daemon=True)
                self._thread.start()
        self._queue.put((emitter, handle))

    def _run(self) -> None:
        while True:
            emitter, handle = self._queue.get()
            try:
                emitter.range_end(handle)
            finally:
                self._queue.task_done()

    def wait(self, timeout_s: float = SETTLE_TIMEOUT_S) -> bool:
        """True once every queued end has returned (False after ``timeout_s``)."""
        if not self._queue.unfinished_tasks:
            return True
        done = threading.Event()

        def join() -> None:
            self._queue.join()
            done.set()

        waiter = threading.Thread(target=join, daemon=True)
        waiter.start()
        return done.wait(timeout_s)


_ENDER = _Ender()


def open_window() -> Any:
    """Start a capture window (after any pending end has returned); its handle."""
    emitter = capture_emitter()
    if not emitter.enabled:
        return None
    settle()
    return (emitter, emitter.range_start(CAPTURE_RANGE, NVTX_DOMAIN))


def close_window(handle: Any) -> None:
    """End the window ``handle``: on the background thread when the binding releases the GIL
    (returns at once), else here. ``None``: no-op."""
    if handle is None:
        return
    emitter, inner = handle
    if getattr(emitter, "releases_gil", False):
        _ENDER.end(emitter, inner)
    else:
        emitter.range_end(inner)


def settle(timeout_s: float = SETTLE_TIMEOUT_S) -> bool:
    """Wait until every window end handed to the background thread has returned."""
    return _ENDER.wait(timeout_s)


__all__ = ["capture_emitter", "close_window", "open_window", "reset", "settle"]
