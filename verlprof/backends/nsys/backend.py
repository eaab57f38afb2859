"""Nsight Systems: the main backend. Workers run under ``nsys profile`` with one capture range
per window (``repeat:N``); the controller may run under it too, bounded to the profiled steps."""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

from verlprof.backends.base import Backend, Capture
from verlprof.errors import ConfigError
from verlprof.safe_text import shell_quote

if TYPE_CHECKING:
    from verlprof.backends.reading import ReportData
    from verlprof.plan_model import ProcessPlan, ProfilePlan
    from verlprof.records import ProcessIdentity, StepWindow

EXECUTABLE_KEY = "trainer.profiler.nsys.executable"

_PREFLIGHT_OK: set = set()
"""Launch argvs (output options stripped) that passed a dry run in this process."""


class NsysBackend(Backend):
    name = "nsys"
    has_reader = True

    # Each method imports what it needs: `verlprof report` only reads (and must not pay for
    # capture's ctypes), a worker only captures.

    def preflight(self, plan: ProfilePlan, *, timeout_s: float, dry_run: bool) -> None:
        """Each distinct launch command gets a bounded trial run of ``python -c pass``; a
        passing argv is remembered for the life of the process."""
        from verlprof.backends.nsys.preflight import check_launch_argv, dry_run_key

        for key, argv in _launches(plan):
            cache_key = dry_run_key(argv)
            if cache_key in _PREFLIGHT_OK:
                continue
            problem = check_launch_argv(argv, timeout_s=timeout_s, dry_run=dry_run)
            if problem is not None:
                raise ConfigError(EXECUTABLE_KEY if problem.startswith("nsys executable")
                                  else key, problem)
            if dry_run:
                _PREFLIGHT_OK.add(cache_key)

    def capture(self, plan: ProcessPlan) -> Capture:
        from verlprof.backends.nsys.capture import NsysCapture

        return NsysCapture(plan)

    def left_by_dead(self, process: ProcessPlan, where: ProcessIdentity,
                     opened: Sequence[StepWindow], timeout_s: float) -> Dict[str, str]:
        """nsys numbers a process's reports in the order its windows closed, and writes those
        of ``repeat:N`` when the process dies. They map back to windows only when each step is
        one window (discrete ones follow the phases that ran) and none was added on demand."""
        from verlprof.backends.nsys.capture import REPORT_POLL_S, ordinals, report_glob
        from verlprof.backends.nsys.reports import ReportWriter, wait_for_reports

        if process.open_ended or any(w.phase for w in process.windows):
            return {}
        by_steps = {w.steps: w for w in process.windows}
        windows = [by_steps[steps] for steps in opened if steps in by_steps]
        writer = None if not where.profiler_pid else ReportWriter(
            cli_pid=where.profiler_pid, target_pid=where.pid)  # its end ends the wait
        waited = wait_for_reports(  # final: unchanged over two looks at least
            report_glob(process, where.pid), len(windows),
            max(timeout_s if writer else 0.0, 3 * REPORT_POLL_S), REPORT_POLL_S, writer)
        found = ordinals([str(p) for p in waited.found])
        return {w.report.path: found[n] for n, w in enumerate(windows, 1) if n in found}

    def read(self, path: str, *, index: int, window_start_ns: Optional[int],
             timeout_s: float) -> ReportData:
        from verlprof.backends.nsys.read import read_nsys_report

        return read_nsys_report(path, index=index, timeout=timeout_s)

    def open_hints(self, path: str) -> List[Tuple[str, str]]:
        quoted = shell_quote(path)
        return [("", f"nsys-ui {quoted}"), ("in a terminal:", f"nsys stats {quoted}")]


def _launches(plan: ProfilePlan) -> List[Tuple[str, Tuple[str, ...]]]:
    """(options key, argv) of every wrapped launch of the plan, the controller's first."""
    out: List[Tuple[str, Tuple[str, ...]]] = []
    if plan.controller.launch_argv:
        out.append((plan.controller_options_key, tuple(plan.controller.launch_argv)))
    out += [(plan.worker_options_key, tuple(p.launch_argv)) for p in plan.processes
            if p.launch_argv]
    return out


BACKEND = NsysBackend()
