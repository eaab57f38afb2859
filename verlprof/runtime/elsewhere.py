"""A dead run's reports on other nodes, through the Ray cluster that outlived its driver.

When a job's driver dies (killed, out of memory) its Ray cluster usually goes on, and each
worker node still holds in ``.raw`` what its tools wrote: nsys 2022.4 writes a capture-range
session's reports when the process ends, that is after the death. Without a shared file system
``verlprof collect`` on the controller's node cannot see them. ``verlprof collect --address``
asks each such node, by a task pinned to it, what its dead processes left (the search
:func:`verlprof.runtime.collect.unreachable_reports` does for this node, run there), copies each
report over Ray into ``output_dir`` and deletes it there (:func:`collect.move_report`), and
settles that node's profilers and the run's orphaned nsys agents as on this one. A node the
cluster no longer has, or one that does not answer, keeps its reports ``missing``, with why.
Every node is asked at once, and the reports travel a few at a time, as in finalize.
"""

from __future__ import annotations

import dataclasses
import socket
from dataclasses import dataclass
from typing import Dict, FrozenSet, Sequence, Tuple

from verlprof.errors import ProfilingRuntimeError
from verlprof.plan_model import ProcessPlan
from verlprof.records import ProcessIdentity, StepWindow, Target, Tool, WorkerReport
from verlprof.runtime.collect import unreachable_reports
from verlprof.runtime.teardown import Settled, settle_profilers, task_on_node
from verlprof.safe_text import one_line
from verlprof.storage import stamp_of
from verlprof.worker.identity import node_id

ANSWER_S = 60.0
"""Seconds a node gets to answer beyond the wait for its tools."""


@dataclass(frozen=True)
class Cluster:
    """The Ray cluster ``verlprof collect`` reached: this process's node and the live ones."""

    address: str
    local_node: str
    alive: FrozenSet[str]

    def holds(self, where: ProcessIdentity) -> bool:
        """Whether ``where`` ran on another node that the cluster still has."""
        return bool(where.node_id) and where.node_id != self.local_node and \
            where.node_id in self.alive


def connect(address: str) -> Cluster:
    """Join the cluster at ``address`` as a driver (ProfilingRuntimeError, one line, when it
    cannot be reached)."""
    if address != "auto":  # "auto": the cluster this machine is a node of
        _reachable(address)
    import ray

    try:
        if not ray.is_initialized():  # a caller in a driver already joined may pass its own
            ray.init(address=address, logging_level="ERROR", log_to_driver=False,
                     configure_logging=True)
        alive = frozenset(n["NodeID"] for n in ray.nodes() if n.get("Alive"))
    except Exception as err:  # Ray raises ConnectionError, RuntimeError, its own errors
        raise ProfilingRuntimeError(
            f"--address: cannot reach the Ray cluster at {address}: "
            f"{one_line(err, 200)} (without --address, collect places what "
            "this machine sees)") from None
    return Cluster(address=address, local_node=node_id(), alive=alive)


def _reachable(address: str, timeout_s: float = 5.0) -> None:
    """A ``host:port`` that takes no connection fails here, in seconds: ``ray.init`` would
    retry it for minutes."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ProfilingRuntimeError(f"--address: {address!r} is not host:port (the job's Ray "
                                    "head, as `ray start --head` printed it)")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as err:
        raise ProfilingRuntimeError(f"--address: nothing answers at {address} "
                                    f"({err.strerror or err}): is the job's Ray cluster still "
                                    "up? (without --address, collect places what this machine "
                                    "sees)") from None


@dataclass(frozen=True)
class LeftThere:
    """What a node answered about one dead process (it crosses back over Ray)."""

    reports: Tuple[WorkerReport, ...]
    """Its planned reports as that node found them: the raw file there (stamped), or why not."""
    settled: Settled
    """Its profiler waited for and the run's orphaned agents there ended."""


def left_there(process: ProcessPlan, where: ProcessIdentity, reason: str,
               history: Sequence[Tuple[StepWindow, bool]], tool: Tool, timeout_s: float,
               owner: str) -> LeftThere:
    """On the process's own node: its reports as :func:`unreachable_reports` finds them there
    (each file stamped, so that a node seeing the same file renames it instead of copying),
    then its profiler given ``timeout_s`` to exit and the run's orphaned agents ended."""
    items = [dataclasses.replace(item, stamp=stamp_of(item.raw_path)) if item.raw_path else item
             for item in unreachable_reports(process, where, reason, history, tool,
                                             where.node_id, timeout_s)]
    pids = [where.profiler_pid] if where.profiler_pid else []
    return LeftThere(reports=tuple(items), settled=settle_profilers(pids, timeout_s, owner))


Ask = Tuple[ProcessPlan, ProcessIdentity, Sequence[Tuple[StepWindow, bool]]]
"""One dead process to ask its node about: its plan, where it ran, the windows it was sent."""


def ask_nodes(asks: Dict[Target, Ask], reason: str, timeout_s: float,
              owner: str) -> Dict[Target, LeftThere]:
    """:func:`left_there` for every process, each on its own node, all at once (each waits
    for its tools: one after another they would add up), waited for together, bounded. A
    process whose node did not answer has no entry."""
    if not asks:
        return {}
    import ray

    refs = {target: task_on_node(left_there, where.node_id).remote(
                process, where, reason, tuple(history), process.backend, timeout_s, owner)
            for target, (process, where, history) in asks.items()}
    ready, _ = ray.wait(list(refs.values()), num_returns=len(refs),
                        timeout=2 * timeout_s + ANSWER_S)
    done = set(ready)
    answers: Dict[Target, LeftThere] = {}
    for target, ref in refs.items():
        if ref in done:
            try:
                answers[target] = ray.get(ref)
            except Exception:  # its node went while answering: as one that did not answer
                continue
    return answers
