"""A clean end: wait for each wrapped process's profiler to finish writing before Ray stops.

When a profiled worker exits, its ``nsys profile`` parent still has work to do (and its agent
after it). ``ray.shutdown()`` in that gap kills nsys mid-write (Ray issue #60904) and leaves
``nsys --start-agent`` processes behind. :func:`settle_profilers` runs on each node (a Ray task
pinned there) and waits, bounded, for the given profiler pids to exit, then ends the agents
those profilers left behind: only the run's own (marked with its output directory, see
:mod:`verlprof.backends.nsys.procs`), never another job's on the same node.

A tool that writes its output when the process exits (rocprof-sys) is collected afterwards:
:func:`exit_outputs_on_nodes` waits on each process's node until it has exited and lists the
files that process wrote; :func:`read_chunk` and :func:`discard` move them from another node.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from verlprof import paths
from verlprof.backends import get_backend
from verlprof.backends.nsys.cli import reap_orphan_agents
from verlprof.backends.nsys.procs import owned_agents, send_signal
from verlprof.plan_model import ProcessPlan
from verlprof.records import Target
from verlprof.worker.identity import node_id as this_node_id

POLL_S = 0.2


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@dataclass(frozen=True)
class Settled:
    """What settling found on one node, or on all of them together."""

    problems: Tuple[str, ...] = ()
    """A profiler still running past the bound, a node that did not answer: one a line."""
    ended_agents: Tuple[int, ...] = ()
    """This run's ``nsys --start-agent`` processes whose CLI had gone, ended here. Not a
    problem: nsys 2022.4 leaves one behind now and then after a clean exit (2 in 96 sessions
    started at once here), and always after a start that lost its agent."""

    def __add__(self, other: Settled) -> Settled:
        return Settled(problems=self.problems + other.problems,
                       ended_agents=self.ended_agents + other.ended_agents)

    def agents_line(self) -> str:
        """One line for the log, empty when no agent was ended."""
        if not self.ended_agents:
            return ""
        pids = ", ".join(str(p) for p in self.ended_agents)
        return f"ended {len(self.ended_agents)} nsys agent(s) nsys left behind (pid {pids})"


def settle_profilers(pids: Sequence[int], timeout_s: float, owner: str) -> Settled:
    """Wait until every pid has exited; end the nsys agents of this run left orphaned (marked
    with ``owner``, the run's output directory)."""
    deadline = time.monotonic() + timeout_s
    waiting = [p for p in pids if alive(p)]
    while waiting and time.monotonic() < deadline:
        time.sleep(POLL_S)
        waiting = [p for p in waiting if alive(p)]
    return Settled(
        problems=tuple(f"profiler pid {p} still running after {timeout_s:g}s" for p in waiting),
        ended_agents=tuple(a.pid for a in reap_orphan_agents(owner)))


LATE_AGENTS_WAIT_S = 30.0
"""How long a driver's last look waits for its run's agents whose nsys still finishes."""


def end_late_agents(owner: str, wait_s: float = LATE_AGENTS_WAIT_S) -> Settled:
    """A driver's last look, once its run has ended: the run's agents on this node (marked
    ``owner``) that are orphaned are ended, and while some still have their nsys it looks
    again, up to ``wait_s``. A process that goes last (the workers and replica servers Ray
    ends with their runner) finishes its nsys after every settle looked: such agents once
    outlived a full CI run."""
    deadline = time.monotonic() + wait_s
    ended = [a.pid for a in reap_orphan_agents(owner)]
    while owned_agents(owner) and time.monotonic() < deadline:
        time.sleep(POLL_S)
        ended += [a.pid for a in reap_orphan_agents(owner)]
    return Settled(ended_agents=tuple(ended))


def settle_on_nodes(pids_by_node: Dict[str, List[int]], timeout_s: float,
                    owner: str) -> Settled:
    """:func:`settle_profilers` on each node, in parallel, through Ray."""
    import ray

    if not pids_by_node:
        return Settled()
    refs = [task_on_node(settle_profilers, node).remote(pids, timeout_s, owner)
            for node, pids in pids_by_node.items()]
    ready, late = ray.wait(refs, num_returns=len(refs), timeout=timeout_s + 30)
    late_lines = tuple(f"a node did not answer within {timeout_s + 30:g}s" for _ in late)
    return sum(ray.get(ready), Settled(problems=late_lines))


ExitOutput = Tuple[str, List[Tuple[str, int]], str]
"""(directory, [(file relative to it, bytes)], problem) of one exited process."""


def exit_outputs(tool: str, process: ProcessPlan, pid: int, timeout_s: float) -> ExitOutput:
    """On the process's node: wait (bounded) until ``pid`` has exited, then the files it
    wrote at exit (the backend tells them apart by pid), with their sizes."""
    deadline = time.monotonic() + timeout_s
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    if alive(pid):
        return "", [], f"pid {pid} was still running after {timeout_s:g}s"
    directory, names = get_backend(tool).exit_outputs(process, pid)
    files = []
    for name in names:
        try:
            files.append((name, os.path.getsize(os.path.join(directory, name))))
        except OSError:
            continue
    return directory, files, ""


def exit_outputs_on_nodes(tool: str, asks: Dict[Target, Tuple[str, ProcessPlan, int]],
                          timeout_s: float, local_node: str) -> Dict[Target, ExitOutput]:
    """:func:`exit_outputs` for each (node, process, pid): directly for this node, as a Ray
    task pinned to the process's node otherwise; all at once. A node that does not answer
    has no entry."""
    remote = {t: task_on_node(exit_outputs, node).remote(tool, process, pid, timeout_s)
              for t, (node, process, pid) in asks.items() if node and node != local_node}
    out = {t: exit_outputs(tool, process, pid, timeout_s)
           for t, (node, process, pid) in asks.items() if t not in remote}
    if remote:
        import ray

        ready, _ = ray.wait(list(remote.values()), num_returns=len(remote),
                            timeout=timeout_s + 30)
        done = set(ready)
        out.update({t: ray.get(ref) for t, ref in remote.items() if ref in done})
    return out


def read_chunk(directory: str, relpath: str, offset: int, size: int) -> bytes:
    """Part of a file below ``directory`` (never outside it), for a controller elsewhere."""
    with open(paths.inside(directory, relpath), "rb") as handle:
        handle.seek(offset)
        return handle.read(size)


def discard(directory: str, relpaths: Sequence[str]) -> int:
    """Delete files below ``directory`` once the controller holds their copies."""
    gone = 0
    for relpath in relpaths:
        try:
            os.remove(paths.inside(directory, relpath))
            gone += 1
        except (OSError, ValueError):
            continue
    return gone


def on_node(func, node_id: str, *args, timeout_s: float = 60.0) -> Optional[object]:
    """``func(*args)`` on Ray node ``node_id`` (a pinned task), waited for, bounded; None
    when it does not answer in time."""
    import ray

    ready, _ = ray.wait([task_on_node(func, node_id).remote(*args)], timeout=timeout_s)
    return ray.get(ready[0]) if ready else None


def signal_on_node(node_id: str, pid: int, signum: int, timeout_s: float = 30.0) -> bool:
    """Send ``signum`` to ``pid`` on Ray node ``node_id`` (directly when it is this node)."""
    if not node_id or node_id == this_node_id():
        return send_signal(pid, signum)
    return bool(on_node(send_signal, node_id, pid, signum, timeout_s=timeout_s))


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


__all__ = ["LATE_AGENTS_WAIT_S", "Settled", "alive", "discard", "end_late_agents", "exit_outputs",
           "exit_outputs_on_nodes", "on_node", "read_chunk", "settle_on_nodes", "settle_profilers",
           "signal_on_node", "task_on_node"]
