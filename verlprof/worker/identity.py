"""Who this worker process is: host, pid, Ray node, and the profiler that launched it."""

from __future__ import annotations

import os
import socket
from typing import Optional

from verlprof.records import ProcessIdentity
from verlprof.worker.ray_guard import ray_connected


def process_identity() -> ProcessIdentity:
    """Host, pid, Ray node id and whether a profiler wraps this process."""
    profiler = profiler_ancestor()
    return ProcessIdentity(host=socket.gethostname(), pid=os.getpid(), node_id=node_id(),
                           under_profiler=profiler is not None, profiler_pid=profiler)


def node_id() -> str:
    """This process's Ray node id; "" outside Ray. Best effort: identity never fails a call."""
    try:
        import ray

        with ray_connected():  # a thread of ours may ask while the driver shuts Ray down
            return ray.get_runtime_context().get_node_id()
    except Exception:  # RayGone: outside Ray, or after ray.shutdown()
        return ""


def profiler_ancestor() -> Optional[int]:
    """Pid of the nsys or rocprof-sys process that launched this one, if any (a wrapped launch
    is ``nsys profile`` → ``nsys-launcher`` → python; an unwrapped one is raylet → python)."""
    pid = os.getppid()
    for _ in range(4):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                argv = handle.read().split(b"\0")
            with open(f"/proc/{pid}/stat") as handle:
                parent = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None
        name = os.path.basename(argv[0].decode(errors="replace")) if argv else ""
        if name.startswith("rocprof-sys") or (name == "nsys" and argv[1:2] == [b"profile"]):
            return pid
        if parent <= 1:
            return None
        pid = parent
    return None
