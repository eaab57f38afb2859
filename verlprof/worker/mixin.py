"""The profiling RPCs of a Ray actor: mix :class:`ProfilingWorkerMixin` into a worker class.

The controller calls these on selected ranks only. Their names all start with ``verlprof_``
so that they never clash with a trainer's own methods (verl's workers have their own
``start_profile`` / ``stop_profile``) and reach fused worker classes unchanged.
"""

from __future__ import annotations

import dataclasses
import os
from typing import List, Optional, Sequence

from verlprof.plan_model import ProcessPlan
from verlprof.records import SessionStatus, StartReply, StopReply, WorkerReport
from verlprof.storage import stamp_of
from verlprof.worker import wall_clock
from verlprof.worker.identity import process_identity
from verlprof.worker.session import ProfileSession


class ProfilingWorkerMixin:
    """Profiling RPCs for a Ray actor. Cheap when the process is not selected."""

    _verlprof_active = False
    _verlprof_session: Optional[ProfileSession] = None

    def verlprof_configure(self, plan: Optional[ProcessPlan]) -> SessionStatus:
        """Install this process's plan (sent by the controller to selected ranks only)."""
        if plan is None or (self._verlprof_session is not None
                            and self._verlprof_session.plan == plan):
            return self.verlprof_status()
        if self._verlprof_session is not None:
            self._verlprof_session.finalize(timeout_s=0)
        os.makedirs(plan.raw_dir, exist_ok=True)
        self._verlprof_session = ProfileSession(plan, self)
        return self.verlprof_status()

    def verlprof_extend(self, plan: ProcessPlan) -> SessionStatus:
        """Follow ``plan``: this process's plan with windows asked for while the job runs
        (configures the process when it had no plan)."""
        session = self._verlprof_session
        if session is None:
            return self.verlprof_configure(plan)
        session.add_windows(plan)
        return self.verlprof_status()

    def verlprof_start(self, steps: Optional[Sequence[int]] = None) -> StartReply:
        """Open or arm the step window ``steps`` (default: the planned one after the last
        started); idempotent."""
        session = self._verlprof_session
        return session.start(steps) if session is not None else "not-configured"

    def verlprof_stop(self, steps: Optional[Sequence[int]] = None) -> StopReply:
        """Close or disarm the current window; idempotent. The answer carries this process's
        clock: a reading per window at no call of its own (``verlprof.runtime.clock_sync``)."""
        session = self._verlprof_session
        outcome = session.stop(steps) if session is not None else "not-configured"
        return StopReply(outcome=outcome, clock_ns=wall_clock.clock_ns())

    def verlprof_status(self) -> SessionStatus:
        """Where this process stands: identity, whether it runs under a profiler, its windows."""
        session = self._verlprof_session
        if session is None:
            return SessionStatus(identity=process_identity())
        return session.status(process_identity())

    def verlprof_clock(self) -> int:
        """This process's wall clock (ns since the epoch): the controller takes the midpoint of
        the round trip as its own time of the reading (``verlprof.runtime.clock_sync``)."""
        return wall_clock.clock_ns()

    def verlprof_finalize(self, timeout_s: float = 300.0) -> List[WorkerReport]:
        """Stop, wait for this process's reports, and describe each planned one."""
        session = self._verlprof_session
        return _signed(session.finalize(timeout_s)) if session is not None else []

    def verlprof_hand_over(self, steps: Sequence[int]) -> List[WorkerReport]:
        """The reports of the step window ``steps`` once closed, where the tool wrote them at
        close (an on-demand window, gathered before the job ends); else nothing."""
        session = self._verlprof_session
        return _signed(session.hand_over(steps)) if session is not None else []

    def verlprof_ready(self) -> List[WorkerReport]:
        """The reports of closed windows complete on disk now (each named once): the
        controller places them while the job runs (``verlprof.runtime.placement``)."""
        session = self._verlprof_session
        return _signed(session.ready()) if session is not None else []

    def verlprof_read_chunk(self, path: str, offset: int, size: int) -> bytes:
        """Part of a raw report, for a controller on another node (no shared filesystem)."""
        session = self._verlprof_session
        if session is None or not _is_inside(path, session.plan.raw_dir):
            raise PermissionError(f"{path} is not a report of this process")
        with open(path, "rb") as handle:
            handle.seek(offset)
            return handle.read(size)

    def verlprof_discard(self, path: str) -> bool:
        """Delete a raw report once the controller holds its copy."""
        session = self._verlprof_session
        if session is None or not _is_inside(path, session.plan.raw_dir):
            return False
        try:
            os.remove(path)
            return True
        except FileNotFoundError:
            return False


def _signed(reports: List[WorkerReport]) -> List[WorkerReport]:
    """``reports`` marked with the process that wrote them and each raw file's stamp (the
    controller moves them; a controller that sees the same file takes it where it is)."""
    where = process_identity()
    return [dataclasses.replace(r, where=where,
                                stamp=stamp_of(r.raw_path) if r.raw_path else None)
            for r in reports]


def _is_inside(path: str, root: str) -> bool:
    """True for a path strictly below ``root`` once symlinks and ``..`` are resolved."""
    real_root, real = os.path.realpath(root), os.path.realpath(path)
    return real != real_root and os.path.commonpath([real_root, real]) == real_root
