"""Every wait of the benchmarks is bounded and named, and what it started is ended by pid.

A step (a child process, a set of reports made under nsys, an export) runs inside
:class:`Started`: every process it starts carries a marker of its own in its environment
(:data:`STEP_ENV`; nsys' agents, launchers and importers inherit it too, although they leave
the process group), so that on expiry, or when the step is interrupted, exactly those processes
are ended by pid, never by name. A wait that expires raises :class:`Stalled`, naming what it
waited for; the row it belongs to prints ``FAIL (why)`` and the run goes on with the next row.

Deadlines come from the size of the input (:func:`deadline_s`): generous multiples of what the
step takes on 2 busy cores, so that only a step that no longer makes progress trips them.

Test hooks (environment): :data:`HANG_ENV` names a step that hangs on purpose (its process
sleeps instead of working); :data:`SCALE_ENV` multiplies every deadline (a test makes them
seconds).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import uuid
from typing import Any, Dict, List, Optional, Sequence

from verlprof.backends.nsys.procs import all_pids, proc_info, terminate_processes

RUN_ENV = "VERLPROF_BENCH_RUN"
"""Marker of every process one ``python -m benchmarks`` starts (Ray's included)."""
STEP_ENV = "VERLPROF_BENCH_STEP"
"""Marker of the processes one bounded step starts."""
HANG_ENV = "VERLPROF_BENCH_HANG"
"""Test hook: the name of a step that hangs on purpose (e.g. ``p4-generate``)."""
SCALE_ENV = "VERLPROF_BENCH_DEADLINE_SCALE"
"""Test hook: every deadline is multiplied by this (default 1)."""
HANG_ARGV = [sys.executable, "-c", "import time; time.sleep(10 ** 6)"]


class Stalled(Exception):
    """A bounded wait expired; the message names what it waited for."""


def deadline_s(base_s: float, per_unit_s: float = 0.0, units: float = 0.0) -> float:
    """``base_s + per_unit_s * units`` seconds (the units: MB, ranges, reports), scaled by
    :data:`SCALE_ENV`."""
    return (base_s + per_unit_s * units) * float(os.environ.get(SCALE_ENV) or 1.0)


def hangs(step: str) -> bool:
    """Whether the test hook asks ``step`` to hang."""
    return os.environ.get(HANG_ENV, "") == step


def marked(variable: str, value: str) -> List[int]:
    """Live processes (this one excepted) with ``variable=value`` in their environment."""
    needle, me, out = f"{variable}={value}".encode(), os.getpid(), []
    for pid in all_pids():
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                if needle not in handle.read().split(b"\0"):
                    continue
        except OSError:
            continue
        info = proc_info(pid)
        if info is not None and info.state not in ("Z", "X"):
            out.append(pid)
    return out


def end_marked(variable: str, value: str, grace_s: float = 2.0) -> List[int]:
    """SIGTERM, then SIGKILL after ``grace_s``, every process :func:`marked` finds (by pid)."""
    return terminate_processes(lambda: marked(variable, value), grace_s=grace_s,
                               deadline_s=grace_s + 8.0)


def describe(pid: int) -> str:
    info = proc_info(pid)
    argv = info.cmdline if info is not None else []
    return f"pid {pid} ({' '.join(os.path.basename(a) for a in argv[:3])[:80] or 'gone'})"


class Started:
    """The processes of one step: started with its marker, ended by pid when it leaves (on
    expiry, on an interrupt, and whatever a finished step left behind, e.g. an nsys agent)."""

    def __init__(self, step: str):
        self.step = step
        self.marker = f"{step}-{uuid.uuid4().hex[:12]}"
        self.procs: List[subprocess.Popen] = []

    def __enter__(self) -> Started:
        return self

    def __exit__(self, *exc: Any) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
        end_marked(STEP_ENV, self.marker)
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)

    def popen(self, argv: Sequence[str], env: Optional[Dict[str, str]] = None,
              **kwargs: Any) -> subprocess.Popen:
        """Start ``argv`` in its own session, marked (``HANG_ARGV`` when the hook says so)."""
        full = dict(os.environ if env is None else env, **{STEP_ENV: self.marker})
        proc = subprocess.Popen(HANG_ARGV if hangs(self.step) else list(argv), env=full,
                                start_new_session=True, **kwargs)
        self.procs.append(proc)
        return proc

    def wait(self, deadline: float, what: str) -> None:
        """Until every process started has exited, or raise :class:`Stalled` at ``deadline``
        seconds naming ``what`` and the processes still running."""
        until = time.monotonic() + deadline
        for proc in self.procs:
            try:
                proc.wait(max(0.0, until - time.monotonic()))
            except subprocess.TimeoutExpired:
                running = [describe(p.pid) for p in self.procs if p.poll() is None]
                raise Stalled(f"{what}: still running after {deadline:.0f}s: "
                              f"{', '.join(running)}; ended") from None

    def communicate(self, proc: subprocess.Popen, deadline: float, what: str) -> List[str]:
        """``proc``'s (stdout, stderr), or :class:`Stalled` at ``deadline`` seconds."""
        try:
            out, err = proc.communicate(timeout=deadline)
        except subprocess.TimeoutExpired:
            raise Stalled(f"{what}: {describe(proc.pid)} still running after "
                          f"{deadline:.0f}s; ended") from None
        return [out or "", err or ""]


def run_bounded(step: str, argv: Sequence[str], deadline: float, what: str,
                **kwargs: Any) -> subprocess.CompletedProcess:
    """``subprocess.run(argv, capture_output=True, text=True)``, bounded: on expiry (or an
    interrupt) ``argv`` and everything it started are ended by pid, then :class:`Stalled`."""
    with Started(step) as started:
        kwargs.setdefault("stderr", subprocess.PIPE)
        proc = started.popen(argv, stdout=subprocess.PIPE, text=True, **kwargs)
        out, err = started.communicate(proc, deadline, what)
    return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)


def ray_get(refs: Any, deadline: float, what: str) -> Any:
    """``ray.get(refs)`` bounded by ``deadline`` seconds; :class:`Stalled` naming ``what``."""
    import ray
    from ray.exceptions import GetTimeoutError

    try:
        return ray.get(refs, timeout=deadline)
    except GetTimeoutError:
        raise Stalled(f"{what}: no answer within {deadline:.0f}s") from None
