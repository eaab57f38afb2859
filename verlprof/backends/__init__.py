"""Worker-side capture backends: open/close a window, name a phase, hand over the reports.

Each backend implements :class:`verlprof.backends.base.Capture`; :func:`make_capture` picks
the one the process plan names. Only selected processes ever construct one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the nsys command-line helpers here are used without a plan (reports)
    from verlprof.backends.base import Capture
    from verlprof.plan import ProcessPlan


def make_capture(plan: ProcessPlan) -> Capture:
    """The capture backend of ``plan.backend``."""
    if plan.backend == "nsys":
        from verlprof.backends.nsys import NsysCapture

        return NsysCapture(plan)
    if plan.backend == "torch":
        from verlprof.backends.torch_profiler import TorchCapture

        return TorchCapture(plan)
    if plan.backend == "rocprof_sys":
        from verlprof.backends.rocprof import RocprofCapture

        return RocprofCapture(plan)
    raise ValueError(f"unknown backend {plan.backend!r}")
