"""Preflight: what would fail silently or hang later, checked before any worker starts.

The output directory (writable, enough free space), each profiler executable, and each nsys
launch command, by a bounded trial run of ``python -c pass`` under it. Each problem is one
:class:`~verlprof.errors.ConfigError` naming the setting it comes from.
"""

from __future__ import annotations

import os

from verlprof import paths
from verlprof.backends import get_backend
from verlprof.errors import ConfigError
from verlprof.plan_model import ProfilePlan

MIN_FREE_BYTES = 64 << 20
"""The output directory needs at least this much free space."""


def preflight(plan: ProfilePlan, *, timeout_s: float = 60.0, dry_run: bool = True,
              min_free_bytes: int = MIN_FREE_BYTES) -> None:
    """Check, before any worker starts, what would otherwise fail silently or hang later.

    * the output directory can be created and written, and has ``min_free_bytes`` free;
    * the backend can run the plan's launches (its :meth:`~verlprof.backends.base.Backend.
      preflight`: for nsys the executable and a bounded trial run of ``python -c pass`` under
      each distinct launch command, like Ray's nsight plugin but with a timeout and no agent
      left behind).

    Raises :class:`~verlprof.errors.ConfigError` (one line naming the setting) on the first
    problem. Runs on the calling node only: other nodes are assumed to look alike.
    """
    if not plan.enabled:
        return
    _check_output_dir(plan.output_dir, min_free_bytes)
    get_backend(plan.tool).preflight(plan, timeout_s=timeout_s, dry_run=dry_run)


def _check_output_dir(output_dir: str, min_free_bytes: int) -> None:
    key = "trainer.profiler.output_dir"
    try:
        os.makedirs(output_dir, exist_ok=True)
        probe = paths.probe_path(output_dir)
        try:
            with open(probe, "wb") as handle:
                handle.write(b"\0" * 65536)
                handle.flush()
                os.fsync(handle.fileno())
        finally:
            if os.path.exists(probe):
                os.remove(probe)
        stat = os.statvfs(output_dir)
    except OSError as err:
        raise ConfigError(key, f"{output_dir} is not writable: {err.strerror or err}") from None
    free = stat.f_bavail * stat.f_frsize
    if free < min_free_bytes:
        raise ConfigError(key, f"{output_dir} has only {_size(free)} free; reports need at "
                               f"least {_size(min_free_bytes)}")


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
