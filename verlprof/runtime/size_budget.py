"""The size budget while the job runs: no window opens that would take the reports past
``trainer.profiler.max_total_bytes``.

Before each planned window the controller asks :meth:`SizeBudget.window_may_open`. It measures
what this run has written under ``output_dir`` (its ``.raw/``, ``controller/`` and ``step*/``
folders; an earlier run kept beside them is not counted) and what the next window would add:

* a report already written tells the real size: the largest report file of this run, per step
  of the shortest window closed, times the reports the next window makes (reports still on
  other nodes' disks are taken to be alike; a report being written counts as far as it is);
* before any report is written, the plan's estimate (:mod:`verlprof.plan.size`);
* spent so far: the larger of the bytes on disk now and the closed windows at that rate.

The first window that would not fit, and every window after it, stays closed: one warning
naming the key and those windows, and their reports are listed ``skipped`` with the reason.
rocprof-sys writes at process exit, so its windows are always counted at the estimate.

A capture asked of the running job (``verlprof capture``) is held to the same budget by
:meth:`SizeBudget.request_problem`: refused in one line naming the key when its reports would
not fit; once accepted, its bytes count as spent before they are written.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import time
from typing import Callable, List, Optional, Sequence, Set, Tuple

from verlprof import paths
from verlprof.config.size_budget import human_bytes
from verlprof.manifest import STATUS_MISSING, STATUS_SKIPPED, ReportEntry
from verlprof.plan_model import ProfilePlan
from verlprof.records import StepWindow

logger = logging.getLogger("verlprof")

REPORT_SUFFIXES: Tuple[str, ...] = tuple(paths.EXTENSIONS.values())


@dataclasses.dataclass(frozen=True)
class Usage:
    """This run's files under output_dir at one moment."""

    bytes: int
    """Every file of this run's folders (reports, their staging, nsys' temporary files)."""
    largest_report: int
    """The largest report file written since the run began (0: none yet)."""


def measure(output_dir: str, since: float) -> Usage:
    """This run's bytes under ``output_dir`` and its largest report modified at ``since`` or
    later (``since``: the run's start, so that reports of an earlier run left here are not
    taken as this run's)."""
    total = largest = 0
    try:
        tops = [e.path for e in os.scandir(output_dir) if e.is_dir(follow_symlinks=False) and (
            e.name in (paths.RAW_DIR, paths.CONTROLLER_DIR) or e.name.startswith("step"))]
    except OSError:
        return Usage(bytes=0, largest_report=0)
    for top in tops:
        for root, _, files in os.walk(top):
            for name in files:
                try:
                    info = os.stat(os.path.join(root, name), follow_symlinks=False)
                except OSError:  # moved or removed meanwhile
                    continue
                total += info.st_size
                if name.endswith(REPORT_SUFFIXES) and info.st_mtime >= since:
                    largest = max(largest, info.st_size)
    return Usage(bytes=total, largest_report=largest)


class SizeBudget:
    """Keeps the run's reports within ``plan.size.max_total_bytes`` (None: does nothing);
    ``warn`` receives the one warning (the controller's warnings list)."""

    def __init__(self, plan: ProfilePlan, *, echo: bool, warn: Callable[[str], None]):
        self.limit = plan.size.max_total_bytes if plan.enabled else None
        self.key = plan.size.key
        self.output_dir = plan.output_dir
        self.echo = echo
        self.warn = warn
        self.closed: List[StepWindow] = []
        """Windows opened so far (closed by the time the next is decided)."""
        self.skipped: Set[StepWindow] = set()
        """Windows kept closed by the budget."""
        self.reason = ""
        """Why they were: one phrase naming the key, for their manifest entries."""
        self.promised = 0
        """Bytes of the captures accepted on demand (counted as spent from acceptance on)."""
        self._since = time.time() - 2.0  # a file system's mtime may round down
        self._before = measure(self.output_dir, self._since).bytes if self.limit else 0

    def window_may_open(self, plan: ProfilePlan, window: StepWindow) -> bool:
        """True when ``window``'s reports fit in what is left of the budget."""
        if self.limit is None:
            return True
        if self.skipped:  # the budget ran out: nothing opens again
            self.skipped.add(window)
            return False
        usage = measure(self.output_dir, self._since)
        spent = self._spent(plan, usage)
        needed = self._cost(plan, window, usage)
        if spent + needed <= self.limit:
            self.closed.append(window)
            return True
        self._stop(plan, window, spent, needed, usage)
        return False

    def request_problem(self, plan: ProfilePlan, estimated_bytes: int, reports: int,
                        steps: int) -> Optional[str]:
        """None when a capture of ``reports`` reports over ``steps`` steps fits in what is left
        (its bytes are then promised), else the one line that refuses it."""
        if self.limit is None:
            return None
        usage = measure(self.output_dir, self._since)
        spent = self._spent(plan, usage)
        rate = self._measured_rate(plan, usage)
        measured = rate is not None
        needed = int(rate * steps * reports) if rate is not None else estimated_bytes
        if self.skipped or spent + needed > self.limit:
            return (f"{self.key}: {human_bytes(self.limit)} budget: {human_bytes(spent)} "
                    f"written or promised, these {reports} report(s) would add about "
                    f"{human_bytes(needed)} ({'measured' if measured else 'estimated'}); ask "
                    "for fewer steps or ranks")
        self.promised += needed
        return None

    def _spent(self, plan: ProfilePlan, usage: Usage) -> int:
        """This run's bytes: on disk now, or the closed windows at the measured rate plus the
        captures promised, whichever is more (reports on other nodes are not on this disk)."""
        return max(usage.bytes - self._before,
                   sum(self._cost(plan, w, usage) for w in self.closed) + self.promised)

    def _cost(self, plan: ProfilePlan, window: StepWindow, usage: Usage) -> int:
        """Bytes ``window`` takes: measured when a report was written, else the estimate."""
        index = plan.step_windows.index(window) if window in plan.step_windows else -1
        estimate = plan.size.window_bytes[index] if 0 <= index < len(plan.size.window_bytes) \
            else 0
        rate = self._measured_rate(plan, usage)
        return estimate if rate is None else int(rate * len(window) * reports_of(plan, window))

    def _measured_rate(self, plan: ProfilePlan, usage: Usage) -> Optional[float]:
        """Bytes of one report per step, from the largest report written over the shortest
        window closed; None before any (and for rocprof-sys, which writes at exit)."""
        if not usage.largest_report or not self.closed or plan.tool == "rocprof_sys":
            return None
        return usage.largest_report / min(len(w) for w in self.closed)

    def _stop(self, plan: ProfilePlan, window: StepWindow, spent: int, needed: int,
              usage: Usage) -> None:
        later = [w for w in plan.step_windows if w[0] > window[-1]]
        self.skipped.update([window, *later])
        how = "measured" if usage.largest_report and self.closed else "estimated"
        self.reason = (f"not opened: {self.key} is {human_bytes(self.limit or 0)}, "
                       f"{human_bytes(spent)} were written and this window would add about "
                       f"{human_bytes(needed)} ({how})")
        names = ", ".join(f"[{paths.step_text(w)}]" for w in (window, *later))
        line = (f"{self.key}: {human_bytes(self.limit or 0)} budget: {human_bytes(spent)} "
                f"written, the next window would add about {human_bytes(needed)} ({how}); "
                f"window(s) {names} are skipped (listed as skipped in the manifest)")
        logger.warning("verlprof: %s", line)
        if self.echo:
            print(f"verlprof: warning: {line}", file=sys.stderr, flush=True)
        self.warn(line)

    def before_manifest(self, entries: Sequence[ReportEntry]) -> List[ReportEntry]:
        """The reports of the windows kept closed: ``skipped``, with the reason."""
        if not self.skipped:
            return list(entries)
        return [dataclasses.replace(e, status=STATUS_SKIPPED, reason=self.reason)
                if e.status == STATUS_MISSING and tuple(e.steps) in self.skipped
                and e.requested_by is None else e for e in entries]


def reports_of(plan: ProfilePlan, window: StepWindow) -> int:
    """Reports ``window`` makes: every planned worker window in its steps, and the
    controller's own report when it captures it."""
    inside = set(window)
    count = sum(1 for p in plan.processes for w in p.windows if w.steps[0] in inside)
    if plan.controller.launch_argv and window in plan.controller.windows:
        count += 1
    return count


__all__ = ["SizeBudget", "Usage", "measure", "reports_of"]
