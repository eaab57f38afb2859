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
listed in the manifest as component ``verl_engine`` with ``origin: verl``.
"""

from __future__ import annotations

import glob
import os
import socket
from typing import Any, Dict, List, Optional

from verlprof import paths
from verlprof.manifest import ReportEntry
from verlprof.plan.model import EngineRoute

COMPONENT = "verl_engine"


class EngineTraces:
    """One run's :class:`EngineRoute`: the replicas verl launched, the files gathered."""

    def __init__(self, route: EngineRoute, output_dir: str, drive: bool):
        self.route, self.output_dir, self.drive = route, output_dir, drive
        self.replicas: Dict[int, Any] = {}
        self.entries: List[ReportEntry] = []
        self.step: Optional[int] = None
        self._started = False

    def add(self, replica_rank: int, replica: Any) -> None:
        self.replicas[replica_rank] = replica

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
        for rank in sorted(self.replicas) if only is None else [only]:
            where = os.path.join(self.route.trace_dir, f"agent_loop_rollout_replica_{rank}")
            found = [os.path.join(where, n) for n in sorted(os.listdir(where))] \
                if os.path.isdir(where) else []
            found += sorted(glob.glob(os.path.join(self.route.trace_dir,
                                                   f"rollout-replica{rank}[_-]*")))
            folder = os.path.join(f"step{step:04d}" if step is not None else "unknown_step",
                                  self.route.group, COMPONENT, f"replica{rank}")
            for source in found:
                if os.path.isfile(source):
                    self._move(source, folder, rank, step)

    def _move(self, source: str, folder: str, rank: int, step: Optional[int]) -> None:
        os.makedirs(os.path.join(self.output_dir, folder), exist_ok=True)
        relative = os.path.join(folder, paths.sanitize(os.path.basename(source)))
        target = os.path.join(self.output_dir, relative)
        os.replace(source, target)
        self.entries.append(ReportEntry(
            steps=(step,) if step is not None else (), group=self.route.group, rank=rank,
            component=COMPONENT, backend="torch", path=relative, status="ok", role="rollout",
            host=socket.gethostname(), bytes=os.path.getsize(target), origin="verl"))
