"""The controller's watch over output_dir: room for the manifest, a full disk ends
profiling (not training) in one line instead of hanging the run, and the size budget
(:mod:`verlprof.runtime.size_budget`) keeps windows closed that would go past it.

A disk that fills while a run profiles cannot take more reports: before each window the
controller asks :meth:`OutputGuard.window_may_open`, and from the first problem on no window
opens (training goes on, or stops when ``on_rank_failure="raise"``). The room held since the
start (:class:`verlprof.storage.SpaceReserve`) is given back just before the manifest is
written, so the reports that were written stay listed.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from typing import Callable, List, Optional, Sequence, Set

from verlprof.errors import ProfilingRuntimeError
from verlprof.manifest import ReportEntry
from verlprof.plan_model import ProfilePlan
from verlprof.records import STATUS_OK, StepWindow
from verlprof.runtime.size_budget import SizeBudget
from verlprof.storage import SpaceReserve, reserve_bytes, write_problem

logger = logging.getLogger("verlprof")

KEY = "trainer.profiler.output_dir"


class OutputGuard:
    """Holds the manifest's room in ``plan.output_dir`` and reports when the directory can no
    longer be written; ``warn`` receives each line (the controller's warnings list)."""

    def __init__(self, plan: ProfilePlan, *, echo: bool, warn: Callable[[str], None]):
        self.output_dir = plan.output_dir
        self.echo = echo
        self.warn = warn
        self.problem: Optional[str] = None
        self.skipped: Set[StepWindow] = set()
        """Windows that did not open because of :attr:`problem`."""
        self._reserve = (SpaceReserve(plan.output_dir, reserve_bytes(len(plan.reports)))
                         if plan.enabled else None)
        self.plan = plan
        self.budget = SizeBudget(plan, echo=echo, warn=warn)

    def window_may_open(self, window: StepWindow, raise_on_problem: bool,
                        plan: Optional[ProfilePlan] = None) -> bool:
        """False from the first time output_dir cannot be written (said once, in one line), and
        for a window past the size budget (``plan``: the plan followed now, if replanned)."""
        if self.problem is not None:
            self.skipped.add(window)
        else:
            problem = write_problem(self.output_dir)
            if problem is None:
                return self.budget.window_may_open(plan or self.plan, window)
            line = self._say(problem, "no more profiling windows open in this run (the reports "
                                      "already written stay listed in the manifest)")
            self.skipped.add(window)
            if raise_on_problem:
                raise ProfilingRuntimeError(line)
        return False

    def before_manifest(self, entries: Sequence[ReportEntry]) -> List[ReportEntry]:
        """Name a disk that filled during a window (reports missing for it), say why skipped
        windows never opened, then give the held room back so that the manifest fits."""
        if self.problem is None and any(e.status != STATUS_OK for e in entries):
            problem = write_problem(self.output_dir)
            if problem is not None:
                self._say(problem, "reports that could not be written are listed as missing "
                                   "in the manifest")
        if self._reserve is not None:
            self._reserve.release()
        return self.budget.before_manifest([
            dataclasses.replace(e, reason=f"not opened: {KEY} could not be written "
                                          f"({self.problem})")
            if e.status != STATUS_OK and tuple(e.steps) in self.skipped else e
            for e in entries])

    def _say(self, problem: str, consequence: str) -> str:
        self.problem = problem
        line = f"{KEY}: {problem}; {consequence}"
        logger.error("verlprof: %s", line)
        if self.echo:
            print(f"verlprof: {line}", file=sys.stderr, flush=True)
        self.warn(line)
        return line


__all__: List[str] = ["OutputGuard"]
