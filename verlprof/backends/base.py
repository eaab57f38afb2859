"""What every backend provides: a :class:`Backend` (plan, preflight, reading, hints) and the
:class:`Capture` it runs inside each selected worker process.

A backend lives in one folder, ``verlprof/backends/<tool>/``; its ``backend.py`` defines one
:class:`Backend` object, and :mod:`verlprof.backends` lists them. Adding a tool touches that
folder and the list, nothing else.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

from verlprof import paths
from verlprof.records import (
    STATUS_MISSING,
    STATUS_OK,
    TOOL_TRAITS,
    ProcessIdentity,
    Status,
    StepWindow,
    Tool,
    WorkerReport,
)

if TYPE_CHECKING:  # types only: `verlprof report` (which reads reports through a backend)
    # never needs the plan or the config
    from verlprof.backends.reading import ReportData
    from verlprof.plan_model import ProcessPlan, ProfilePlan, Window


PERFETTO_URL = "https://ui.perfetto.dev"
"""Where Chrome / Perfetto traces open (torch traces, rocprof-sys output)."""

PENDING_AT_EXIT = ("pending: written when the process exits, collected once the workers have "
                   "exited (ProfileController.wait_for_profilers)")
"""Reason of an ``incomplete`` entry whose tool writes at process exit (see
:attr:`Backend.output_at_exit`), until it is collected."""


@dataclass
class OpenedWindow:
    """A window a process actually opened (nsys numbers its reports in this order); its end is
    filled in when it closes. Lives in one process only."""

    window: Window
    start_ns: int
    end_ns: Optional[int] = None


class Capture:
    """Opens and closes capture windows in one process and says where the reports are."""

    opens_on_any_thread = True
    """Whether :meth:`open`/:meth:`close` may run on any thread (a timer's: time bounds,
    ``verlprof.worker.timed``); False ties them to the thread that drives the capture."""
    writes_at_close = False
    """Whether a window's report is complete once :meth:`close` returned (torch), so it can be
    gathered before the process finalizes (on-demand windows, ``ProfileSession.hand_over``);
    False where the tool writes later (nsys: at its N-th window or at exit)."""

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

    def collect(self, opened: Sequence[OpenedWindow], never_opened: Sequence[Window],
                timeout_s: float) -> List[WorkerReport]:
        """One record per planned window: the raw file of each opened one, or why it is
        missing. ``opened`` is in opening order."""
        raise NotImplementedError

    def final_now(self, opened: Sequence[OpenedWindow]) -> List[WorkerReport]:
        """The ``ok`` records of the closed windows whose reports are complete on disk now,
        without waiting (``verlprof_ready``: placed while the job runs). ``opened`` is in
        opening order; only its last one may still be open. Default: complete at close where
        :attr:`writes_at_close`, else never before :meth:`collect`."""
        if not self.writes_at_close:
            return []
        closed = list(opened) if not opened or opened[-1].end_ns is not None \
            else list(opened[:-1])
        return [r for r in self.collect(closed, [], 0.0) if r.status == STATUS_OK]


class Backend:
    """One profiling tool, everything verlprof needs to know about it."""

    name: Tool
    """The ``trainer.profiler.tool`` value."""
    has_reader = False
    """Whether ``verlprof report`` can read its reports."""
    writes_at_close = False
    """A report exists only once its window closed (the torch profiler exports at close), so
    one that a process left when it died is whole even if the death cut its step short."""

    @property
    def extension(self) -> str:
        """Suffix of its reports (the file contract, :data:`verlprof.paths.EXTENSIONS`)."""
        return paths.EXTENSIONS[self.name]

    @property
    def output_at_exit(self) -> bool:
        """The tool writes one output per process at exit (:class:`~verlprof.plan_model.
        ToolTraits`); finalize records its entries as pending (:data:`PENDING_AT_EXIT`)."""
        return TOOL_TRAITS[self.name].output_at_exit

    # -- driver side ------------------------------------------------------------------------
    def preflight(self, plan: ProfilePlan, *, timeout_s: float, dry_run: bool) -> None:
        """Check the tool can run the plan's launches (raises ConfigError naming the key)."""

    # -- worker side ------------------------------------------------------------------------
    def capture(self, plan: ProcessPlan) -> Capture:
        """The capture a selected process runs (imported on first use: workers only)."""
        raise NotImplementedError

    def exit_outputs(self, process: ProcessPlan, pid: int) -> Tuple[str, List[str]]:
        """Only with :attr:`output_at_exit`, on the process's node, after it exited: the
        directory it wrote into and the files in it (relative paths) that process ``pid``
        wrote, never another process's."""
        return "", []

    def left_by_dead(self, process: ProcessPlan, where: ProcessIdentity,
                     opened: Sequence[StepWindow], timeout_s: float) -> Dict[str, str]:
        """Driver side, for a process that died: report path → the raw file its tool wrote for
        that window, where this node sees the process's raw directory. ``opened`` are the step
        windows it was sent, in order; the tool may still be writing (waited for up to
        ``timeout_s``). Empty where the tool's files cannot be told apart."""
        return {}

    # -- reading ----------------------------------------------------------------------------
    def read(self, path: str, *, index: int, window_start_ns: Optional[int],
             timeout_s: float) -> ReportData:
        """One report as ranges (only when :attr:`has_reader`)."""
        raise NotImplementedError(f"no reader for {self.name} reports")

    def open_hints(self, path: str) -> List[Tuple[str, str]]:
        """(label, what to run) pairs telling a user how to open one report."""
        return [("open", path)]


def worker_report(window: Window, *, raw_path: Optional[str], status: Status,
                  reason: Optional[str] = None, start_ns: Optional[int] = None,
                  end_ns: Optional[int] = None,
                  where: Optional[ProcessIdentity] = None) -> WorkerReport:
    """A worker's record of one planned report (collection turns it into a manifest entry)."""
    size = os.path.getsize(raw_path) if raw_path and os.path.isfile(raw_path) else 0
    return WorkerReport(report=window.report, status=status, raw_path=raw_path, bytes=size,
                        reason=reason, window_start_ns=start_ns, window_end_ns=end_ns,
                        where=where or ProcessIdentity(host="", pid=0))


def never_opened_reports(windows: Sequence[Window]) -> List[WorkerReport]:
    """Records for planned windows that never opened, with the reason."""
    out = []
    for window in windows:
        what = (f"phase {window.role}/{window.phase} was not called in step {window.steps[0]}"
                if window.phase else f"step(s) {list(window.steps)} were never started")
        out.append(worker_report(window, raw_path=None, status=STATUS_MISSING,
                                 reason=f"window never opened: {what}"))
    return out
