"""torch.profiler, worker side: one Chrome trace (``.pt.trace.json.gz``) per window.

Each window is its own ``torch.profiler.profile`` session, wrapped in ``ProfilerStep#<step>``
so HolisticTraceAnalysis (which drops everything after the last such marker) reads it, with
the rank recorded as ``distributedInfo`` even when torch.distributed is not initialised.
Phases become ``record_function("<role>/<phase>")``.
"""

from __future__ import annotations

import json
import os
from contextlib import AbstractContextManager
from typing import Any, Dict, List, Optional, Sequence

from verlprof import paths
from verlprof.backends.base import Capture, OpenedWindow, never_opened_reports, worker_report
from verlprof.plan_model import ProcessPlan, Window
from verlprof.records import STATUS_MISSING, STATUS_OK, WorkerReport


class TorchCapture(Capture):
    opens_on_any_thread = False  # the profiler starts and stops on the thread that drives it
    writes_at_close = True  # close() exports the trace before it returns

    def __init__(self, plan: ProcessPlan):
        super().__init__(plan)
        self._profiler: Any = None
        self._marker: Any = None
        self._written: Dict[int, str] = {}
        self._errors: Dict[int, str] = {}
        self._count = 0

    def _activities(self) -> List[Any]:
        import torch
        from torch.profiler import ProfilerActivity

        activities = [ProfilerActivity.CPU]
        cuda = self.plan.capture_options.cuda
        if torch.cuda.is_available() if cuda is None else cuda:
            activities.append(ProfilerActivity.CUDA)
        return activities

    def open(self, window: Window) -> None:
        import torch

        self._count += 1
        options = self.plan.capture_options
        self._profiler = torch.profiler.profile(
            activities=self._activities(), record_shapes=options.record_shapes,
            profile_memory=options.profile_memory, with_stack=options.with_stack,
            **_all_threads(options.all_threads))
        self._profiler.start()
        self._profiler.add_metadata_json("distributedInfo", json.dumps(
            {"rank": self.plan.rank, "world_size": self.plan.world_size, "backend": "verlprof"}))
        self._profiler.add_metadata_json("verlprof", json.dumps(
            {"group": self.plan.group, "rank": self.plan.rank, "steps": list(window.steps),
             "component": window.report.component}))
        self._marker = torch.autograd.profiler.record_function(f"ProfilerStep#{window.steps[0]}")
        self._marker.__enter__()

    def close(self, window: Window) -> None:
        profiler, self._profiler = self._profiler, None
        marker, self._marker = self._marker, None
        try:
            marker.__exit__(None, None, None)
        finally:
            profiler.stop()
        target = raw_path(self.plan, window, _host(), os.getpid())
        try:
            profiler.export_chrome_trace(target)
            self._written[self._count] = target
        except (OSError, RuntimeError) as err:  # a full disk must not kill the training step
            self._errors[self._count] = f"export failed: {err}"

    def phase(self, label: str) -> AbstractContextManager:
        import torch

        return torch.autograd.profiler.record_function(label)

    def collect(self, opened: Sequence[OpenedWindow], never_opened: Sequence[Window],
                timeout_s: float) -> List[WorkerReport]:
        out = []
        for n, record in enumerate(opened, start=1):
            raw: Optional[str] = self._written.get(n)
            if raw and os.path.isfile(raw):
                out.append(worker_report(record.window, raw_path=raw, status=STATUS_OK,
                                         start_ns=record.start_ns, end_ns=record.end_ns))
            else:
                reason = self._errors.get(n, "trace file not written")
                out.append(worker_report(record.window, raw_path=None, status=STATUS_MISSING,
                                         reason=reason, start_ns=record.start_ns,
                                         end_ns=record.end_ns))
        return out + never_opened_reports(never_opened)


def raw_path(plan: ProcessPlan, window: Window, host: str, pid: int) -> str:
    """Where process ``pid`` on ``host`` exports ``window``'s trace."""
    name = os.path.basename(paths.resolve_relpath(window.report.path, host, pid))
    return os.path.join(plan.raw_dir, name)


def _host() -> str:
    import socket

    return socket.gethostname()


def _all_threads(every_thread: bool) -> Dict[str, Any]:
    """``experimental_config`` recording every thread of the process, where this torch has
    it (``profile_all_threads``, torch 2.7+); else nothing: the thread that opened the window
    only."""
    if not every_thread:
        return {}
    from torch._C._profiler import _ExperimentalConfig

    try:
        return {"experimental_config": _ExperimentalConfig(profile_all_threads=True)}
    except TypeError:
        return {}
