"""rocprof-sys (AMD GPUs): workers run under ``rocprof-sys-python``; no reader here."""

from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING, List, Tuple

from verlprof.backends.base import PERFETTO_URL, Backend, Capture, Launch
from verlprof.backends.rocprof_sys.argv import rocprof_argv, rocprof_env
from verlprof.backends.rocprof_sys.capture import RocprofCapture
from verlprof.backends.rocprof_sys.output import files_of_pid, output_settings
from verlprof.errors import ConfigError
from verlprof.safe_text import shell_quote

if TYPE_CHECKING:
    from verlprof.config.schema import ProfilingConfig
    from verlprof.config.topology import GroupTopology, Topology
    from verlprof.plan.model import ProcessPlan, ProfilePlan

ARGS_KEY = "trainer.profiler.rocprof_sys.args"
EXECUTABLE_KEY = "trainer.profiler.rocprof_sys.executable"


class RocprofSysBackend(Backend):
    name = "rocprof_sys"
    output_at_exit = True  # one set of files per process, written at exit (output.py)
    time_windows = False  # not tried without an AMD GPU: refused rather than guessed

    def worker_launch(self, config: ProfilingConfig, topology: Topology, group: GroupTopology,
                      rank: int, windows: int, warnings: List[str]) -> Launch:
        return Launch(argv=rocprof_argv(config.rocprof_sys, ARGS_KEY),
                      env=rocprof_env(config.rocprof_sys, config.output_dir, group.name, rank))

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
