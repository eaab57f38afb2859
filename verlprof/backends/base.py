"""The capture interface every backend implements, and the entry every report becomes."""

from __future__ import annotations

import os
from contextlib import AbstractContextManager
from typing import Any, Dict, List, Optional, Sequence

from verlprof.manifest import STATUS_MISSING, STATUS_OK
from verlprof.plan import ProcessPlan, Window


class Capture:
    """Opens and closes capture windows in one process and says where the reports are."""

    def __init__(self, plan: ProcessPlan):
        self.plan = plan

    def open(self, window: Window) -> None:
        """Start capturing (the window's report starts here)."""
        raise NotImplementedError

    def close(self, window: Window) -> None:
        """Stop capturing; the window's report is written now or soon after."""
        raise NotImplementedError

    def phase(self, label: str) -> AbstractContextManager:
        """A named range (``<role>/<phase>``) inside the open window."""
        raise NotImplementedError

    def flush(self, never_opened: Sequence[Window]) -> None:
        """Called once before :meth:`collect` with the planned windows that never opened."""

    def collect(self, opened: Sequence[Any], never_opened: Sequence[Window],
                timeout_s: float) -> List[Dict[str, Any]]:
        """One entry per planned window: the raw file of each opened one, or why it is missing.

        ``opened`` are :class:`verlprof.worker.OpenedWindow` in opening order.
        """
        raise NotImplementedError


def entry(window: Window, *, raw_path: Optional[str], status: str, reason: Optional[str] = None,
          start_ns: Optional[int] = None, end_ns: Optional[int] = None) -> Dict[str, Any]:
    """A worker's description of one planned report (collection turns it into a manifest entry)."""
    report = window.report
    size = os.path.getsize(raw_path) if raw_path and os.path.isfile(raw_path) else 0
    return {"steps": list(report.steps), "group": report.group, "rank": report.rank,
            "component": report.component, "backend": report.backend, "path": report.path,
            "role": report.role, "phase": report.phase, "raw_path": raw_path, "bytes": size,
            "status": status, "reason": reason, "window_start_ns": start_ns,
            "window_end_ns": end_ns}


def never_opened_entries(windows: Sequence[Window]) -> List[Dict[str, Any]]:
    """Entries for planned windows that never opened, with the reason."""
    out = []
    for window in windows:
        what = (f"phase {window.role}/{window.phase} was not called in step {window.steps[0]}"
                if window.phase else f"step(s) {list(window.steps)} were never started")
        out.append(entry(window, raw_path=None, status=STATUS_MISSING,
                         reason=f"window never opened: {what}"))
    return out


__all__ = ["Capture", "entry", "never_opened_entries", "STATUS_OK", "STATUS_MISSING"]
