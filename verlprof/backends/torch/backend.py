"""The PyTorch profiler: in-process, one Chrome trace per window; nothing is wrapped."""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

from verlprof.backends.base import PERFETTO_URL, Backend, Capture, Launch
from verlprof.backends.torch.capture import TorchCapture, raw_path
from verlprof.backends.torch.read import read_torch_trace
from verlprof.safe_text import shell_quote

if TYPE_CHECKING:
    from verlprof.backends.reading import ReportData
    from verlprof.config.schema import ProfilingConfig
    from verlprof.config.topology import GroupTopology, Topology
    from verlprof.plan.model import ProcessPlan
    from verlprof.records import ProcessIdentity, StepWindow


QUIET_KINETO = {"KINETO_LOG_LEVEL": "6"}
"""PyTorch's profiler library (Kineto) prints ``USDT: ... profiler_start`` and
``profiler_stop`` on every window in every profiled process (level 5, above its errors at 4);
6 keeps the console the trainer's. A profiler that fails still shows: its window's report is
``missing`` with the reason (docs/backends.md)."""


class TorchBackend(Backend):
    name = "torch"
    has_reader = True
    writes_at_close = True

    def worker_launch(self, config: ProfilingConfig, topology: Topology, group: GroupTopology,
                      rank: int, windows: int, warnings: List[str]) -> Launch:
        return Launch(capture_options=asdict(config.torch), env=dict(QUIET_KINETO))

    def capture(self, plan: ProcessPlan) -> Capture:
        return TorchCapture(plan)

    def left_by_dead(self, process: ProcessPlan, where: ProcessIdentity,
                     opened: Sequence[StepWindow], timeout_s: float) -> Dict[str, str]:
        """Each window's trace has its own name, exported when the window closes."""
        steps = set(opened)
        found = {w.report.path: raw_path(process, w, where.host, where.pid)
                 for w in process.windows if w.steps in steps}
        return {path: raw for path, raw in found.items() if os.path.isfile(raw)}

    def read(self, path: str, *, index: int, window_start_ns: Optional[int],
             timeout_s: float) -> ReportData:
        return read_torch_trace(path, index=index, fallback_start_ns=window_start_ns)

    def open_hints(self, path: str) -> List[Tuple[str, str]]:
        return [("", f"{PERFETTO_URL} > Open trace file > {shell_quote(path)}")]


BACKEND = TorchBackend()
