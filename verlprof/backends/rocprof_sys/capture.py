"""rocprof-sys, worker side (AMD GPUs; cannot run on these machines, see docs/backends.md).

The process runs under ``rocprof-sys-python <args> --``. Windows toggle tracing through the
rocprof-sys user API (``rocprofsys_user_start_trace``/``stop_trace`` in
``librocprof-sys-user.so``) when it is loaded; phases are user regions. rocprof-sys writes its
output when the process exits, one set of files covering every window, so at finalize each
opened window is reported as pending (:data:`~verlprof.backends.base.PENDING_AT_EXIT`): the
controller collects the process's files once it has exited (``wait_for_profilers``).
"""

from __future__ import annotations

import ctypes
from contextlib import contextmanager
from typing import Any, Iterator, List, Optional, Sequence

from verlprof.backends.base import (
    PENDING_AT_EXIT,
    Capture,
    OpenedWindow,
    never_opened_reports,
    worker_report,
)
from verlprof.plan_model import ProcessPlan, Window
from verlprof.records import STATUS_INCOMPLETE, WorkerReport

USER_LIBRARY = "librocprof-sys-user.so"


def _user_api() -> Optional[Any]:
    try:
        return ctypes.CDLL(USER_LIBRARY)
    except OSError:
        return None


class RocprofCapture(Capture):
    def __init__(self, plan: ProcessPlan):
        super().__init__(plan)
        self.api = _user_api()

    def open(self, window: Window) -> None:
        if self.api is not None:
            self.api.rocprofsys_user_start_trace()

    def close(self, window: Window) -> None:
        if self.api is not None:
            self.api.rocprofsys_user_stop_trace()

    @contextmanager
    def phase(self, label: str) -> Iterator[None]:
        if self.api is None:
            yield
            return
        name = label.encode()
        self.api.rocprofsys_user_push_region(name)
        try:
            yield
        finally:
            self.api.rocprofsys_user_pop_region(name)

    def collect(self, opened: Sequence[OpenedWindow], never_opened: Sequence[Window],
                timeout_s: float) -> List[WorkerReport]:
        """Nothing is written yet (rocprof-sys writes when the process exits): every opened
        window is pending; windows that never opened are missing."""
        return [worker_report(record.window, raw_path=None, status=STATUS_INCOMPLETE,
                              reason=PENDING_AT_EXIT, start_ns=record.start_ns,
                              end_ns=record.end_ns)
                for record in opened] + never_opened_reports(never_opened)
