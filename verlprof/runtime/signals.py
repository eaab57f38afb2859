"""SIGTERM and Ctrl-C while profiling: stop the windows and finalise the reports first.

Inside ``with controller:`` (main thread only) the signal becomes an exception in the main
thread, so that every ``finally`` runs: windows are stopped, reports are gathered. The signal
is then passed on as its previous handler would have acted on it.

While reports are being finalised (``shield``) the first signal is held back, but bounded: it
is acted on when finalising ends or ``hold_s`` (the controller's ``finalize_timeout_s``) after
it came, whichever is first, and a second signal always aborts at once. A held signal that
comes due is delivered again to this process by a timer thread (``os.kill``, so that a
blocking sleep or ``ray.get`` wakes up) and then raises like a second one.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from contextlib import contextmanager
from typing import Any, Dict, Iterator, Optional

logger = logging.getLogger("verlprof")


class ProfilingTerminated(KeyboardInterrupt):
    """Raised in the controller's main thread on SIGTERM inside ``with controller:``.

    A :class:`KeyboardInterrupt` so that it also interrupts Ray's blocking calls (``ray.get``
    turns an exception from a signal handler into a ``KeyboardInterrupt``); the controller
    remembers the signal itself, so the type surviving does not matter.
    """

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"received {signal.Signals(signum).name}")


class SignalGuard:
    """SIGTERM and Ctrl-C inside ``with controller:``, as the module says. Installed only in
    the main thread, and never over an ignored signal or over someone else's SIGINT handler.
    ``hold_s``: how long a signal is held while reports are finalised (None: until that ends)."""

    def __init__(self, hold_s: Optional[float] = None) -> None:
        self.previous: Dict[int, Any] = {}
        self._previous_after_restore: Dict[int, Any] = {}
        self.received: Optional[int] = None
        self.count = 0
        """Signals handled so far (a caller's wait can tell a second one from none)."""
        self.hold_s = hold_s
        self._shield = 0
        self._held = 0
        self._due: Optional[threading.Timer] = None
        self._overdue = False
        self._lock = threading.Lock()

    @property
    def installed(self) -> bool:
        return bool(self.previous)

    def install(self) -> bool:
        if self.previous or threading.current_thread() is not threading.main_thread():
            return False
        for sig in (signal.SIGTERM, signal.SIGINT):
            current = signal.getsignal(sig)
            if current in (signal.SIG_IGN, None):
                continue
            if sig == signal.SIGINT and current is not signal.default_int_handler:
                continue
            self.previous[sig] = current
            signal.signal(sig, self._handle)
        return bool(self.previous)

    def restore(self) -> Optional[int]:
        """Put the previous handlers back; return the signal received meanwhile, if any."""
        if threading.current_thread() is threading.main_thread():
            for sig, handler in self.previous.items():
                if signal.getsignal(sig) == self._handle:
                    signal.signal(sig, handler)
        self._previous_after_restore, self.previous = self.previous, {}
        return self.received

    @contextmanager
    def shield(self) -> Iterator[None]:
        self._shield += 1
        try:
            yield
        finally:
            self._shield -= 1
            if self._shield == 0:
                self._disarm()

    def _disarm(self) -> None:
        with self._lock:
            timer, self._due = self._due, None
        if timer is not None:
            timer.cancel()

    def _come_due(self, signum: int) -> None:
        """Timer thread: finalising outlasted ``hold_s``; deliver the held signal again."""
        with self._lock:
            if self._due is None:  # finalising ended meanwhile
                return
            self._due = None
            self._overdue = True
        logger.warning("verlprof: finalising took longer than %gs after %s; stopping it now",
                       self.hold_s, signal.Signals(signum).name)
        os.kill(os.getpid(), signum)

    def _handle(self, signum: int, frame: Any) -> None:
        self.count += 1
        if self.received is None or signum == signal.SIGTERM:
            self.received = signum
        if self._shield and self._held == 0:
            self._held += 1
            bound = "" if self.hold_s is None else f", for at most {self.hold_s:g}s"
            logger.warning("verlprof: %s received while finalising reports; finishing first%s "
                           "(send it again to abort)", signal.Signals(signum).name, bound)
            if self.hold_s is not None:
                timer = threading.Timer(self.hold_s, self._come_due, args=(signum,))
                timer.daemon = True
                with self._lock:
                    self._due = timer
                timer.start()
            return
        if signum == signal.SIGTERM:
            raise ProfilingTerminated(signum)
        raise KeyboardInterrupt

    def cut_short(self, err: BaseException) -> str:
        """Why finalising stopped early, for the manifest (``err`` came from this guard's
        handler: the held signal came due, or a second one came); re-raises any other."""
        if self.received is None:
            raise err
        name = signal.Signals(self.received).name
        if self._overdue:
            return f"finalize cut short by {name}, held {self.hold_s:g}s (finalize_timeout_s)"
        return f"finalize cut short by a second signal ({name})"

    def stopped_by(self) -> str:
        """The manifest's line for a run the signal received stopped."""
        name = signal.Signals(self.received).name if self.received is not None else "a signal"
        return f"the run was stopped by {name}; windows that had not opened by then stay missing"

    def interruption(self) -> KeyboardInterrupt:
        """The exception of the signal received (after a finalise cut short)."""
        if self.received == signal.SIGTERM:
            return ProfilingTerminated(signal.SIGTERM)
        return KeyboardInterrupt()

    def pass_on(self) -> None:
        """After finalising: act on the signal received as its previous handler would."""
        signum, self.received = self.received, None
        previous = self._previous_after_restore
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        if signum == signal.SIGTERM:
            handler = previous.get(signal.SIGTERM, signal.SIG_DFL)
            if callable(handler):
                handler(signal.SIGTERM, None)  # e.g. Ray's worker handler: exits the actor
            raise SystemExit(128 + signal.SIGTERM)
