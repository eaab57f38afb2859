"""Shared test helpers."""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

import pytest

NSYS_SAFE_OPTS = ["--sample=none", "--cpuctxsw=none"]
"""Options every test passes to ``nsys profile`` (sampling/ctxsw can hang without a GPU)."""


def require_verl() -> None:
    """verl's single controller, profiler and trainer modules importable (``make test``
    installs verl 0.9.1 from PyPI). Skips without them, except under ``CI=true``: there a
    missing verl is a failure, never a silent skip. Call at module level."""
    try:
        import verl  # noqa: F401
        import verl.trainer.ppo.ray_trainer  # noqa: F401
    except ImportError as err:
        msg = f"verl is not importable ({err}); `make test` installs it (tests/requirements)"
        if os.environ.get("CI", "").strip().lower() == "true":
            pytest.fail(f"{msg}; CI=true requires it", pytrace=False)
        pytest.skip(msg, allow_module_level=True)


def require_nsys() -> str:
    """Path of a working nsys. Skips the test when there is none, except under ``CI=true``,
    where a missing nsys is a failure (CI must install it: see NSYS_ON_CPU.md)."""
    from verlprof.backends.nsys.cli import find_nsys, nsys_version

    exe = find_nsys()
    version = nsys_version(exe) if exe else None
    if exe is None or version is None:
        msg = ("nsys not found on PATH" if exe is None
               else f"{exe} does not run (nsys --version failed)")
        if os.environ.get("CI", "").strip().lower() == "true":
            pytest.fail(f"{msg}; CI=true requires Nsight Systems", pytrace=False)
        pytest.skip(msg)
    return exe


@contextlib.contextmanager
def local_ray_cluster(num_cpus: int, num_gpus: int = 0) -> Iterator[None]:
    """A local Ray cluster of ``num_cpus`` logical CPUs (never one already running on the
    machine); on exit, no nsys agent started meanwhile may be left orphaned."""
    import ray

    from verlprof.backends.nsys.cli import list_agents

    before = {a.pid for a in list_agents()}
    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False,
             logging_level="ERROR", log_to_driver=False, num_gpus=num_gpus)
    try:
        yield
    finally:
        ray.shutdown()
    assert_no_leaked_agents(before)


def assert_no_leaked_agents(before, wait_s: float = 30.0) -> None:
    """No ``nsys --start-agent`` started since ``before`` (a set of pids) is left orphaned.

    Agents of a run that just ended may take a few seconds to exit: wait for them, bounded.
    Agents whose owning nsys is still alive belong to someone still running (another test
    session on a shared machine) and are not ours to judge.
    """
    import time

    from verlprof.backends.nsys.cli import list_agents, orphan_agents

    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and [a for a in list_agents() if a.pid not in before]:
        time.sleep(0.5)
    leaked = [a for a in orphan_agents(0) if a.pid not in before]
    assert not leaked, f"nsys agents left behind: {leaked}"


CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def require_chromium() -> str:
    """Path of a headless-capable Chromium (``make test`` installs Debian's: see
    scripts/install_chromium.sh). Skips the test without one, except under ``CI=true``, where
    a missing browser is a failure, as for nsys."""
    import shutil
    import subprocess

    exe = next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)
    works = False
    if exe is not None:
        try:
            works = subprocess.run([exe, "--version"], capture_output=True,
                                   timeout=60).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            works = False
    if not works:
        msg = ("chromium not found on PATH" if exe is None
               else f"{exe} does not run (--version failed)")
        if os.environ.get("CI", "").strip().lower() == "true":
            pytest.fail(f"{msg}; CI=true requires it (scripts/install_chromium.sh)",
                        pytrace=False)
        pytest.skip(f"{msg} (scripts/install_chromium.sh installs it)")
    assert exe is not None
    return exe
