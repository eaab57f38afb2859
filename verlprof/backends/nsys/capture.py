"""nsys, worker side: the process already runs under ``nsys profile`` (see the plan's argv).

A window is a capture range: with the ``nvtx`` trigger the range ``VERLPROF_CAPTURE`` in domain
``verlprof`` (works without a GPU), with ``cuda`` ``torch.cuda.profiler.start()/stop()``. nsys
writes one report per window (``--capture-range-end=repeat:N``) named
``<group>_rank<R>_<pid>.<n>.nsys-rep`` (no ``.<n>`` when there is a single report), ``n``
counting windows in the order they closed; the session's log of opened windows maps ``n`` back
to steps and phases.

An armed rank (``trainer.profiler.on_demand.nsys_ranks``) runs with an open-ended count
(``--capture-range-end=repeat``): nsys 2022.4 then writes its reports only at exit, or when
``nsys stop`` names its session (measured: the reports appear within ~0.2 s and the process
runs on), which :meth:`NsysCapture.collect` does once the last window has closed.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from verlprof import paths
from verlprof.backends.base import Capture, OpenedWindow, never_opened_reports, worker_report
from verlprof.backends.nsys import capture_range, nvtx
from verlprof.backends.nsys.cli import run_nsys, wait_for_reports
from verlprof.backends.nsys.reports import (
    ReportWait,
    busy_paths,
    has_temp_sibling,
    own_writer,
)
from verlprof.plan_model import ProcessPlan, Window
from verlprof.records import STATUS_MISSING, STATUS_OK, WorkerReport

_ORDINAL = re.compile(r"_(\d+)(?:\.(\d+))?\.nsys-rep$")

REPORT_POLL_S = 0.2
"""Seconds between looks at the reports while waiting for nsys to finish writing them."""


class NsysCapture(Capture):
    def __init__(self, plan: ProcessPlan):
        super().__init__(plan)
        self.trigger = plan.trigger or "cuda"
        self.emitter = nvtx.get_emitter()
        self._handle: Any = None
        self._fillers = 0
        self.open_ended = plan.open_ended

    def open(self, window: Window) -> None:
        if self.trigger == "nvtx":
            self._handle = capture_range.open_window()
        else:
            import torch

            torch.cuda.synchronize()
            torch.cuda.profiler.start()

    def close(self, window: Window) -> None:
        if self.trigger == "nvtx":
            handle, self._handle = self._handle, None
            capture_range.close_window(handle)  # returns at once; nsys finishes meanwhile
        else:
            import torch

            torch.cuda.synchronize()
            torch.cuda.profiler.stop()

    def phase(self, label: str) -> AbstractContextManager:
        return nvtx.span(label, self.emitter)

    def flush(self, never_opened: Sequence[Window]) -> None:
        """Close the plan out with empty windows.

        nsys 2022.4 writes the reports of ``repeat:N`` only when the N-th window closes; a
        planned window that never opened (a phase not called, a run cut short) would hold every
        report of this process back until it exits. The filler reports are deleted in
        :meth:`collect`.
        """
        if self.open_ended:  # collect asks nsys for the reports; no filler needed
            return
        for window in never_opened:
            self.open(window)
            self.close(window)
        self._fillers = len(never_opened)

    def collect(self, opened: Sequence[OpenedWindow], never_opened: Sequence[Window],
                timeout_s: float) -> List[WorkerReport]:
        capture_range.settle()  # every window's end has reached nsys
        by_ordinal: Dict[int, str] = {}
        waited: Optional[ReportWait] = None
        total = len(opened) + self._fillers
        stop_problem = self._stop_session() if self.open_ended and opened else ""
        if total:
            waited = wait_for_reports(report_glob(self.plan, os.getpid()), total, timeout_s,
                                      poll_s=REPORT_POLL_S,
                                      writer=own_writer())  # its agent gone: none can come
            by_ordinal = ordinals([str(p) for p in waited.found])
            for n in range(len(opened) + 1, total + 1):
                _remove(by_ordinal.get(n))
        out = []
        for n, record in enumerate(opened, start=1):
            raw = by_ordinal.get(n)
            if raw is None:
                out.append(worker_report(record.window, raw_path=None, status=STATUS_MISSING,
                                 reason=stop_problem or (
                                     f"nsys could not write its report for window {n}: "
                                     f"{waited.problem}" if waited and waited.problem else
                                     f"nsys wrote no report for window {n} within "
                                     f"{timeout_s:g}s"), start_ns=record.start_ns,
                                 end_ns=record.end_ns))
            else:
                out.append(worker_report(record.window, raw_path=raw, status=STATUS_OK,
                                 start_ns=record.start_ns, end_ns=record.end_ns))
        return out + never_opened_reports(never_opened)

    def final_now(self, opened: Sequence[OpenedWindow]) -> List[WorkerReport]:
        """The closed windows' reports that nsys has finished writing, at one look: non-empty,
        no ``.qdstrm``/``.tmp`` sibling, and neither held open nor named as output by a
        ``QdstrmImporter``. nsys 2022.4 imports a ``repeat:N`` session's reports only when its
        N-th window closes (or at exit), so before that there are none."""
        closed = {n: o for n, o in enumerate(opened, start=1) if o.end_ns is not None}
        if not closed:
            return []
        candidates = {os.path.realpath(path): n for n, path in ordinals(
            glob.glob(report_glob(self.plan, os.getpid()))).items()
            if n in closed and _written(path)}
        busy = busy_paths(set(candidates))
        return [worker_report(closed[n].window, raw_path=path, status=STATUS_OK,
                              start_ns=closed[n].start_ns, end_ns=closed[n].end_ns)
                for path, n in sorted(candidates.items(), key=lambda c: c[1])
                if path not in busy]

    def _stop_session(self) -> str:
        """Ask nsys for an open-ended session's reports (else written only at exit): ""
        when asked, else why not (the reason of each report that then does not come)."""
        writer = own_writer()
        if writer is None:
            return "not running under nsys profile; an armed rank writes no report"
        nsys = self.plan.launch_argv[0]
        stopped = run_nsys([nsys, "stop", f"--session={_session_name(nsys, writer.cli_pid)}"],
                           timeout_s=60, linger_s=0)
        if stopped.returncode != 0 or stopped.timed_out:
            why = "timed out" if stopped.timed_out else stopped.error_line() or ""
            return f"nsys stop of the armed session failed: {why}"
        return ""


def report_glob(plan: ProcessPlan, pid: int) -> str:
    """Glob of process ``pid``'s raw reports (``%p`` of the plan's output prefix = pid)."""
    # "x_12.*nsys-rep" matches x_12.nsys-rep and x_12.3.nsys-rep, never pid 123's x_123...
    return os.path.join(plan.raw_dir, paths.raw_name(plan.group, plan.rank, pid) + ".*nsys-rep")


def _session_name(nsys: str, cli_pid: int) -> str:
    """The session ``nsys profile`` made: ``profile-<app>-<CLI pid>`` (``nsys sessions list``),
    found by its pid since the app's name is nsys' choice."""
    listed = run_nsys([nsys, "sessions", "list"], timeout_s=30, linger_s=0).stdout
    suffix = f"-{cli_pid}"
    return next((word for line in listed.splitlines() for word in line.split()
                 if word.startswith("profile-") and word.endswith(suffix)),
                f"profile-python-{cli_pid}")


def ordinals(files: Sequence[str]) -> Dict[int, str]:
    """Map nsys' report ordinal to file: ``x_12.3.nsys-rep`` → 3, ``x_12.nsys-rep`` → 1."""
    out: Dict[int, str] = {}
    for path in files:
        match = _ORDINAL.search(os.path.basename(path))
        if match:
            out[int(match.group(2) or 1)] = path
    return out


def _written(path: str) -> bool:
    try:
        return os.path.getsize(path) > 0 and not has_temp_sibling(Path(path))
    except OSError:
        return False


def _remove(path: Optional[str]) -> None:
    if path:
        with contextlib.suppress(OSError):
            os.remove(path)
