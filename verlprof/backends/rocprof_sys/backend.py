"""rocprof-sys (AMD GPUs): workers run under ``rocprof-sys-python``; no reader here."""

from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING, List, Tuple

from verlprof.backends.base import PERFETTO_URL, Backend, Capture
from verlprof.backends.rocprof_sys.capture import RocprofCapture
from verlprof.backends.rocprof_sys.output import files_of_pid, output_settings
from verlprof.errors import ConfigError
from verlprof.safe_text import shell_quote

if TYPE_CHECKING:
    from verlprof.plan_model import ProcessPlan, ProfilePlan

EXECUTABLE_KEY = "trainer.profiler.rocprof_sys.executable"


class RocprofSysBackend(Backend):
    name = "rocprof_sys"

    def preflight(self, plan: ProfilePlan, *, timeout_s: float, dry_run: bool) -> None:
        argv = next((p.launch_argv for p in plan.processes if p.launch_argv), ())
        if argv and shutil.which(argv[0]) is None and not os.access(argv[0], os.X_OK):
            raise ConfigError(EXECUTABLE_KEY, f"{argv[0]!r} not found")

    def capture(self, plan: ProcessPlan) -> Capture:
        return RocprofCapture(plan)

    def exit_outputs(self, process: ProcessPlan, pid: int) -> Tuple[str, List[str]]:
        directory, prefix = output_settings(process)
        return directory, files_of_pid(directory, prefix, pid)

    def open_hints(self, path: str) -> List[Tuple[str, str]]:
        return [("", f"{shell_quote(path)} (rocprof-sys output: open its .proto files in "
                     f"{PERFETTO_URL})")]


BACKEND = RocprofSysBackend()
