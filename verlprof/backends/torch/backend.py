"""The PyTorch profiler: in-process, one Chrome trace per window; nothing is wrapped."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

from verlprof.backends.base import PERFETTO_URL, Backend, Capture
from verlprof.backends.torch.capture import TorchCapture, raw_path
from verlprof.backends.torch.read import read_torch_trace
from verlprof.safe_text import shell_quote

if TYPE_CHECKING:
    from verlprof.backends.reading import ReportData
    from verlprof.plan_model import ProcessPlan
    from verlprof.records import ProcessIdentity, StepWindow


class TorchBackend(Backend):
    name = "torch"
    has_reader = True
    writes_at_close = True

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
