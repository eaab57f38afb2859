"""Which files of rocprof-sys's output directory one process wrote, told apart by its pid.

rocprof-sys names its output ``<OUTPUT_PATH>[/<TIMESTAMP>]/[<PREFIX>]<DATA_NAME>[-<SUFFIX>].<EXT>``
(ROCm Systems Profiler docs, "Understanding the output"). With ``ROCPROFSYS_USE_PID`` on (verlprof
sets it, :mod:`.argv`) the suffix is the pid: ``critic_rank1_perfetto-trace-63453.proto``,
``critic_rank1_wall-clock-63453.json``; with ``ROCPROFSYS_TIME_OUTPUT`` on, a timestamp
subdirectory comes first. It writes all of it when the process exits: one set per process,
covering every window the process traced.
"""

from __future__ import annotations

import os
import re
from typing import List, Tuple

from verlprof.plan_model import ProcessPlan

OUTPUT_PATH = "ROCPROFSYS_OUTPUT_PATH"
OUTPUT_PREFIX = "ROCPROFSYS_OUTPUT_PREFIX"


def output_settings(process: ProcessPlan) -> Tuple[str, str]:
    """(output directory, file prefix) the process was launched with (the plan's
    environment, where ``rocprof_sys.env`` already won)."""
    env = process.launch_env
    return env.get(OUTPUT_PATH) or process.raw_dir, env.get(OUTPUT_PREFIX, "")


def is_output_of(name: str, prefix: str, pid: int) -> bool:
    """True for ``<prefix><data name>-<pid>.<ext>``: that exact pid (``-634.`` is not
    ``-6345.``), a data name without dots, so a pid-like number later in the name does not
    count."""
    return re.fullmatch(re.escape(prefix) + r"[^./]+-" + str(int(pid)) + r"\.[^/]+",
                        name) is not None


def files_of_pid(directory: str, prefix: str, pid: int) -> List[str]:
    """Paths, relative to ``directory``, of the files process ``pid`` wrote there: at the top
    or one timestamp subdirectory down. Links are never taken (they may point anywhere)."""
    out: List[str] = []
    try:
        top = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError:
        return out
    for entry in top:
        if entry.is_symlink():
            continue
        if entry.is_file() and is_output_of(entry.name, prefix, pid):
            out.append(entry.name)
        elif entry.is_dir():
            try:
                inner = sorted(os.scandir(entry.path), key=lambda e: e.name)
            except OSError:
                continue
            out.extend(f"{entry.name}/{e.name}" for e in inner
                       if not e.is_symlink() and e.is_file()
                       and is_output_of(e.name, prefix, pid))
    return out
