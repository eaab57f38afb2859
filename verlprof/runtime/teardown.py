"""A clean end: wait for each wrapped process's profiler to finish writing before Ray stops.

When a profiled worker exits, its ``nsys profile`` parent still has work to do (and its agent
after it). ``ray.shutdown()`` in that gap kills nsys mid-write (Ray issue #60904) and leaves
``nsys --start-agent`` processes behind. :func:`settle_profilers` runs on each node (a Ray task
pinned there) and waits, bounded, for the given profiler pids to exit, then ends agents whose
owning nsys is gone.
"""

from __future__ import annotations

import time
from typing import Dict, List, Sequence

from verlprof.backends.nsys.cli import reap_orphan_agents
from verlprof.backends.nsys.procs import send_signal
from verlprof.worker.identity import node_id as this_node_id

POLL_S = 0.2


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def settle_profilers(pids: Sequence[int], timeout_s: float) -> List[str]:
    """Wait until every pid has exited; end orphaned nsys agents; return problems, one a line."""
    deadline = time.monotonic() + timeout_s
    waiting = [p for p in pids if alive(p)]
    while waiting and time.monotonic() < deadline:
        time.sleep(POLL_S)
        waiting = [p for p in waiting if alive(p)]
    problems = [f"profiler pid {p} still running after {timeout_s:g}s" for p in waiting]
    problems += [f"ended orphaned nsys agent pid {a.pid}" for a in reap_orphan_agents(0)]
    return problems


def settle_on_nodes(pids_by_node: Dict[str, List[int]], timeout_s: float) -> List[str]:
    """:func:`settle_profilers` on each node, in parallel, through Ray."""
    import ray

    if not pids_by_node:
        return []
    refs = [task_on_node(settle_profilers, node).remote(pids, timeout_s)
            for node, pids in pids_by_node.items()]
    ready, late = ray.wait(refs, num_returns=len(refs), timeout=timeout_s + 30)
    problems = [line for result in ray.get(ready) for line in result]
    problems += [f"a node did not answer within {timeout_s + 30:g}s" for _ in late]
    return problems


def signal_on_node(node_id: str, pid: int, signum: int, timeout_s: float = 30.0) -> bool:
    """Send ``signum`` to ``pid`` on Ray node ``node_id`` (directly when it is this node)."""
    import ray

    if not node_id or node_id == this_node_id():
        return send_signal(pid, signum)
    ready, _ = ray.wait([task_on_node(send_signal, node_id).remote(pid, signum)],
                        timeout=timeout_s)
    return bool(ready) and bool(ray.get(ready[0]))


def task_on_node(func, node_id: str):
    """``func`` as a Ray task pinned to ``node_id`` (anywhere when empty), with an explicit
    interpreter: a task inherits its creator's runtime_env, and the controller may itself run
    under nsys."""
    import sys

    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    options = {"runtime_env": {"py_executable": sys.executable}}
    if node_id:
        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id, soft=False)
    return ray.remote(num_cpus=0)(func).options(**options)


__all__ = ["alive", "settle_profilers", "settle_on_nodes", "signal_on_node", "task_on_node"]
