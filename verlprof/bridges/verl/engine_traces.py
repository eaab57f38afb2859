"""verl's own engine profiling of the rollout replicas (tool torch), driven and gathered.

verl's vLLM / SGLang servers profile their engine in ``start_profile`` / ``stop_profile`` when
the rollout's profiler block says so (enabled, this replica selected, torch ``discrete``), with
the block's token window (``profile_token_start/end``: vLLM's ``delay_iterations`` /
``max_iterations``, SGLang's ``start_step`` / ``num_steps``), and write the traces into
``<save_path>/agent_loop_rollout_replica_<r>/`` (``rollout_trace_dir``; moved up into
``save_path`` as ``rollout-replica<r>_*`` when ``relocate_results`` is set). verl calls them
around the generation of its profiled steps; the bridge's launcher clears verl's step list, so
there the bridge makes the same calls at the plan's step edges (``drive``). Either way, after
each ``stop_profile`` the files are moved into ``step<N>/<group>/verl_engine/replica<r>/`` and
listed in the manifest as component ``verl_engine`` with ``origin: verl``. An engine writes on
its server's node: a replica on another node than the bridge's has its files read there by a
Ray task pinned to that node, copied over Ray and only then deleted there, as workers' reports
are (``runtime/collect.py``).
"""

from __future__ import annotations

import glob
import os
import socket
from typing import Any, Dict, List, Optional

from verlprof import paths
from verlprof.manifest import ReportEntry
from verlprof.plan_model import EngineRoute
from verlprof.runtime.collect import fetch_from_node
from verlprof.runtime.teardown import discard, on_node
from verlprof.worker.identity import node_id as this_node_id

COMPONENT = "verl_engine"


class EngineTraces:
    """One run's :class:`EngineRoute`: the replicas verl launched, the files gathered."""

    def __init__(self, route: EngineRoute, output_dir: str, drive: bool):
        self.route, self.output_dir, self.drive = route, output_dir, drive
        self.replicas: Dict[int, Any] = {}
        self.nodes: Dict[int, str] = {}
        """Ray node of each replica's first server, where its engine writes."""
        self.problems: List[str] = []
        """Traces that could not be gathered, one line each (the manifest's warnings)."""
        self.entries: List[ReportEntry] = []
        self.step: Optional[int] = None
        self._started = False

    def add(self, replica_rank: int, replica: Any, node: str) -> None:
        """verl launched ``replica``; its engine writes on ``node`` (its first server's)."""
        self.replicas[replica_rank] = replica
        self.nodes[replica_rank] = node

    def _servers(self) -> List[Any]:
        return [s for _, r in sorted(self.replicas.items()) for s in getattr(r, "servers", [])]

    def begin(self, step: int) -> None:
        """A step starts: verl's ``start_profile`` on every server, when the plan profiles
        it and verl will not (its step list cleared)."""
        import ray

        self.step = step
        if self.drive and step in self.route.steps and self.replicas:
            ray.get([s.start_profile.remote() for s in self._servers()])
            self._started = True

    def end(self, step: int) -> None:
        import ray

        if self._started:
            self._started = False
            ray.get([s.stop_profile.remote() for s in self._servers()])
            self.gather(step)

    def gather(self, step: Optional[int], only: Optional[int] = None) -> None:
        """Move what the engines wrote so far into the output directory, as ``step``'s."""
        here = this_node_id()
        for rank in sorted(self.replicas) if only is None else [only]:
            node = self.nodes.get(rank, "")
            node = "" if node == here else node
            found = on_node(engine_files, node, self.route.trace_dir, rank) if node \
                else engine_files(self.route.trace_dir, rank)
            if not isinstance(found, list):
                self.problems.append(f"{self.route.group} replica {rank}: its node did not "
                                     f"list its engine traces; they stay in "
                                     f"{self.route.trace_dir} there")
                continue
            folder = os.path.join(f"step{step:04d}" if step is not None else "unknown_step",
                                  self.route.group, COMPONENT, f"replica{rank}")
            for relpath in found:
                self._move(relpath, node, folder, rank, step)

    def _move(self, relpath: str, node: str, folder: str, rank: int,
              step: Optional[int]) -> None:
        os.makedirs(os.path.join(self.output_dir, folder), exist_ok=True)
        relative = os.path.join(folder, paths.sanitize(os.path.basename(relpath)))
        target = os.path.join(self.output_dir, relative)
        try:
            if node:
                fetch_from_node(node, self.route.trace_dir, relpath, target)
                on_node(discard, node, self.route.trace_dir, [relpath])
            else:
                os.replace(os.path.join(self.route.trace_dir, relpath), target)
        except Exception as error:  # one file's failure must not fail verl's step or the rest
            self.problems.append(f"{self.route.group} replica {rank}: could not gather "
                                 f"{relpath}: {' '.join(str(error).split())}")
            return
        self.entries.append(ReportEntry(
            steps=(step,) if step is not None else (), group=self.route.group, rank=rank,
            component=COMPONENT, backend="torch", path=relative, status="ok", role="rollout",
            host=socket.gethostname(), node_id=node or this_node_id(),
            bytes=os.path.getsize(target), origin="verl", transfer="ray" if node else "rename"))


def engine_files(trace_dir: str, replica: int) -> List[str]:
    """The files replica ``replica``'s engine wrote below ``trace_dir`` on this node, relative
    to it: verl's per-replica directory, and what ``relocate_results`` moved up."""
    where = os.path.join(trace_dir, f"agent_loop_rollout_replica_{replica}")
    found = [os.path.join(where, n) for n in sorted(os.listdir(where))] \
        if os.path.isdir(where) else []
    found += sorted(glob.glob(os.path.join(trace_dir, f"rollout-replica{replica}[_-]*")))
    return [os.path.relpath(f, trace_dir) for f in found if os.path.isfile(f)]


def node_of_actor(_: Any) -> str:
    """Run in a verl server through ``__ray_call__``: its Ray node."""
    return this_node_id()
