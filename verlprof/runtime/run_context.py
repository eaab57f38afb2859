"""What the controller shares with its collaborators: the ranks, the plan, the manifest.

:class:`~verlprof.runtime.controller.ProfileController` executes the step windows; capture on
demand (:mod:`verlprof.runtime.capture_requests`) and the verl bridge act on the same ranks and
the same manifest. They use this object, never the controller's internals: one RPC layer, one
record of who each process is, one error policy, one way to write the manifest.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Callable, Dict, List, Optional, Sequence

from verlprof import paths
from verlprof.errors import ProfilingRuntimeError
from verlprof.manifest import Manifest, ProcessInfo, ReportEntry, free_space, write_manifest
from verlprof.plan_model import ProfilePlan
from verlprof.records import OnRankFailure, ProcessIdentity, Target
from verlprof.runtime.clock_sync import ClockSync
from verlprof.runtime.collect import run_manifest
from verlprof.runtime.ownership import Run
from verlprof.runtime.rank_rpc import RankError, RankRPC
from verlprof.worker.identity import node_id

logger = logging.getLogger("verlprof")


class RunContext:
    """The live run: its plan (extended by capture requests), the layer that reaches its ranks,
    each registered process's identity, the warnings kept for the manifest, and the policy that
    decides whether a failing rank stops the job."""

    def __init__(self, plan: ProfilePlan, run: Run, rpc: RankRPC, *,
                 on_rank_failure: OnRankFailure, host: str, pid: int, warnings: List[str]):
        self.plan = plan
        """The plan being executed; capture requests replace it with an extended one."""
        self.run = run
        self.rpc = rpc
        self.on_rank_failure: OnRankFailure = on_rank_failure
        self.host, self.pid = host, pid
        self.identity: Dict[Target, ProcessIdentity] = {}
        """Who each configured process is (host, pid, node, profiler pid)."""
        self.registered: List[Target] = []
        """The planned processes of the registered groups, in plan order."""
        self.warnings = warnings
        self.clocks = ClockSync()  # each process's clock offset, for one aligned trace
        self.under_profiler = False
        """Whether this controller process runs under nsys (set by the controller)."""
        self.placed_listeners: List[Callable[[Sequence[ReportEntry]], None]] = []
        """Called with the entries of reports placed in output_dir while the job runs
        (``trainer.profiler.summarise: per_window`` summarises them on their nodes)."""

    def reports_placed(self, entries: Sequence[ReportEntry]) -> None:
        """Tell the listeners that ``entries`` are in output_dir now (the job goes on)."""
        for listener in self.placed_listeners:
            listener(entries)

    def live(self, targets: List[Target]) -> List[Target]:
        """``targets`` less the dead ranks (the same list when none died: a step at 8,192
        ranks pays C-level copies, not a Python test per rank)."""
        failed = self.rpc.failed
        return [t for t in targets if t not in failed] if failed else targets

    def note(self, *lines: str) -> None:
        """Warnings: logged and kept in the manifest."""
        for line in lines:
            logger.warning("verlprof: %s", line)
        self.warnings.extend(lines)

    def on_errors(self, errors: List[RankError], raise_errors: Optional[bool] = None) -> None:
        """Log and record each error (one line naming the rank); raise per the policy
        (``raise_errors`` overrides it)."""
        if not errors:
            return
        lines = [f"{group} rank {rank}: {message}" for (group, rank), message in errors]
        for line in lines:
            logger.error("verlprof: %s", line)
        self.warnings.extend(lines)
        should_raise = self.on_rank_failure == "raise" if raise_errors is None else raise_errors
        if should_raise:
            group, rank = errors[0][0]
            raise ProfilingRuntimeError("; ".join(lines), group=group, rank=rank)

    def manifest(self, entries: List[ReportEntry], *, running: bool = False) -> Manifest:
        """The run's manifest with ``entries`` (``running``: the job goes on)."""
        controller = ProcessInfo(group="controller", rank=0, host=self.host, pid=self.pid,
                                 node_id=node_id(), under_profiler=self.under_profiler,
                                 clock_offset_ns=0, clock_error_ns=0)
        manifest = run_manifest(self.plan, entries, self.identity, controller, self.warnings,
                                self.run.run_id, clock=self.clocks.fields)
        return dataclasses.replace(manifest, running=True) if running else manifest

    def write(self, manifest: Manifest) -> Manifest:
        """Write ``manifest`` into the output directory where this run owns it; a failure is
        one line naming the key and the free space (disk full?)."""
        try:
            if self.run.writes_manifest:  # False: profiling off, another run's manifest there
                write_manifest(manifest, self.plan.output_dir)
        except OSError as err:
            raise ProfilingRuntimeError(
                f"trainer.profiler.output_dir: cannot write {paths.MANIFEST_NAME} to "
                f"{self.plan.output_dir}: {err.strerror or err} "
                f"({free_space(self.plan.output_dir)})") from None
        return manifest
