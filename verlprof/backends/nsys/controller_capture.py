"""The controller's own nsys window: open while a planned step window is, when the controller
process runs under the plan's nsys argv (``verlprof.runtime.ray_options.controller_options``)."""

from __future__ import annotations

import logging
import os
import socket
import threading
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from verlprof import paths
from verlprof.backends.nsys import capture_range, nvtx
from verlprof.backends.nsys.capture import REPORT_POLL_S, ordinals
from verlprof.backends.nsys.cli import wait_for_reports
from verlprof.backends.nsys.reports import ReportWait, own_writer
from verlprof.manifest import ReportEntry
from verlprof.plan_model import ProfilePlan
from verlprof.records import STATUS_INCOMPLETE, STATUS_MISSING, STATUS_OK, Status, StepWindow


class ControllerCapture:
    """The controller's own nsys window, when this process runs under the plan's nsys argv."""

    def __init__(self, plan: ProfilePlan):
        self.plan = plan
        self.attached = bool(plan.controller.launch_argv) and nvtx.get_emitter().enabled
        self._handle: Any = None
        self._windows: List[StepWindow] = []

    def unwrapped_warning(self) -> Optional[str]:
        """Controller options are set but this process was not started under nsys, so its own
        report is not captured: a warning where the user set the key (None otherwise). verl's
        config sets it by default, so there it is said at info level only."""
        plan = self.plan
        if not plan.controller.launch_argv or self.attached:
            return None
        how = ("launch verl with `python -m verlprof.bridges.verl`, which starts its TaskRunner "
               "under nsys" if plan.verl_release is not None else
               "launch it with `.options(**controller_options(plan))` (docs/integration.md)")
        line = (f"{plan.controller_options_key} is set but this controller process does not "
                f"run under nsys, so its own report is not captured; {how}")
        if plan.verl_release is not None:
            logging.getLogger("verlprof").info("verlprof: %s", line)
            return None
        return line

    def open(self, window: StepWindow) -> None:
        if self.attached and self._handle is None:
            self._handle = capture_range.open_window()
            self._windows.append(window)

    @contextmanager
    def opening(self, window: StepWindow) -> Iterator[None]:
        """Open this process's window while the block runs (the workers' start fan-out): both
        wait for nsys to finish ending the previous window, so the waits overlap instead of
        adding up (the open runs on a thread; ctypes releases the GIL while nsys blocks)."""
        if not self.attached or self._handle is not None:
            yield
            return
        box: Dict[str, Any] = {}
        opener = threading.Thread(target=lambda: box.update(handle=capture_range.open_window()),
                                  name="verlprof-controller-open", daemon=True)
        opener.start()
        try:
            yield
        finally:
            opener.join()
            self._handle = box.get("handle")
            self._windows.append(window)

    def close(self) -> None:
        if self._handle is not None:
            handle, self._handle = self._handle, None
            capture_range.close_window(handle)

    @contextmanager
    def range(self, label: str) -> Iterator[None]:
        if self._handle is None:
            yield
            return
        with nvtx.span(label):
            yield

    def collect(self, timeout_s: float, node_id: str = "") -> List[ReportEntry]:
        """Entries for the controller's planned windows (its reports are written in place)."""
        if not self.attached:
            return []
        self.close()
        capture_range.settle()
        opened = list(self._windows)
        # like a worker, close the plan out so nsys writes its repeat:N reports now
        fillers = [w for w in self.plan.controller.windows if w not in opened]
        for window in fillers:
            self.open(window)
            self.close()
        host, pid, output_dir = socket.gethostname(), os.getpid(), self.plan.output_dir
        waited = wait_for_reports(report_glob(output_dir, host, pid),
                                  len(self.plan.controller.windows), timeout_s,
                                  poll_s=REPORT_POLL_S, writer=own_writer())
        by_ordinal = ordinals([str(p) for p in waited.found])
        entries = []
        for n, window in enumerate(opened + fillers, start=1):
            path: Optional[str] = by_ordinal.get(n)
            reason: Optional[str]
            if n > len(opened):
                if path:
                    os.remove(path)
                path, reason = None, f"controller window {list(window)} never opened"
            else:
                reason = None if path else _no_report(waited, timeout_s)
            entries.append(_entry(output_dir, window, n, path, host, pid, node_id,
                                  STATUS_OK if path else STATUS_MISSING, reason))
        return entries


def report_glob(output_dir: str, host: str, pid: int) -> str:
    """What the controller process ``pid`` on ``host`` names its reports (nsys expands
    ``%h`` and ``%p`` of the plan's ``-o`` to them and numbers the windows ``.1``, ``.2``)."""
    return os.path.join(output_dir, paths.CONTROLLER_DIR, _base(host, pid) + ".*nsys-rep")


def left_by_dead_controller(output_dir: str, host: str, pid: int, node_id: str,
                            planned: Sequence[StepWindow], opened: Sequence[Tuple[StepWindow,
                                                                                  bool]],
                            reason: str, timeout_s: float) -> List[ReportEntry]:
    """The entries of a controller that died before finalize (``verlprof collect``): each
    window it ``opened`` (in order, with whether it closed) whose report nsys wrote when the
    process ended is ``ok``, the one cut short ``incomplete``; the rest ``missing`` with
    ``reason``. Its reports are found where this machine sees ``output_dir/controller``."""
    here = host == socket.gethostname()  # else only a shared file system shows its files
    waited = wait_for_reports(report_glob(output_dir, host, pid), len(opened),
                              timeout_s if here else 0.0, poll_s=REPORT_POLL_S)
    by_ordinal = ordinals([str(p) for p in waited.found])
    order = {steps: (n, closed) for n, (steps, closed) in
             reversed(list(enumerate(opened, start=1)))}
    elsewhere = "" if here else \
        f"; its report stays on host {host} in {paths.CONTROLLER_DIR}/, if that is kept"
    entries = []
    status: Status
    for window in planned:
        n, closed = order.get(window, (0, False))
        path = by_ordinal.get(n) if n else None
        if not n:
            status, why = STATUS_MISSING, f"window never opened: {reason} before step {window[0]}"
        elif path is None:
            status, why = STATUS_MISSING, reason + (elsewhere or
                                                    f"; {_no_report(waited, timeout_s)}")
        elif closed:
            status, why = STATUS_OK, None
        else:
            status, why = STATUS_INCOMPLETE, (f"{reason} in this window; the report holds what "
                                              "was captured until then")
        entries.append(_entry(output_dir, window, n or len(opened) + 1, path, host, pid,
                              node_id, status, why))
    return entries


def _base(host: str, pid: int) -> str:
    return paths.CONTROLLER_OUTPUT_FORMAT.replace("%h", host).replace("%p", str(pid))


def _entry(output_dir: str, window: StepWindow, n: int, path: Optional[str], host: str,
           pid: int, node_id: str, status: Status, reason: Optional[str]) -> ReportEntry:
    relpath = (os.path.relpath(path, output_dir) if path else
               f"{paths.CONTROLLER_DIR}/{_base(host, pid)}.{n}{paths.EXTENSIONS['nsys']}")
    return ReportEntry(
        steps=window, group="controller", rank=0, component="controller", backend="nsys",
        path=relpath, status=status, host=host, pid=pid, node_id=node_id,
        bytes=os.path.getsize(path) if path else 0, reason=reason,
        transfer="direct" if path else None)


def _no_report(waited: ReportWait, timeout_s: float) -> str:
    """Why a planned report is not there: the directory could not be written, or time ran out."""
    if waited.problem:
        return f"nsys could not write its report: {waited.problem}"
    return f"nsys wrote no report within {timeout_s:g}s"
