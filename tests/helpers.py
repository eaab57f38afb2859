"""Shared test helpers."""

from __future__ import annotations

import contextlib
import os
import uuid
from typing import Any, Iterator, Sequence

import pytest

SESSION_ENV = "VERLPROF_TEST_SESSION"


def _session() -> str:
    """This test process's session, inherited by whatever it starts. Each pytest-xdist
    worker (``PYTEST_XDIST_WORKER``: ``make test`` runs two) is a session of its own, named
    by its worker id first (``RayStartNode`` names its temp dir by the first characters):
    side by side on one machine, each judges only what it started."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    session = os.environ.get(SESSION_ENV, "")
    if not session or not session.startswith(worker):
        session = os.environ[SESSION_ENV] = f"{worker}{uuid.uuid4().hex}"
    return session


SESSION = _session()
"""Inherited by every process this test session starts (Ray's, nsys', their agents): what
this session leaves behind is told apart from other sessions' on a shared machine."""

NSYS_SAFE_OPTS = ["--sample=none", "--cpuctxsw=none"]
"""Options every test passes to ``nsys profile`` (sampling/ctxsw can hang without a GPU)."""


def under_ci() -> bool:
    """``CI=true``: every tool the Makefile can install must be there."""
    return os.environ.get("CI", "").strip().lower() == "true"


def skip_or_fail(msg: str, module: bool = False) -> None:
    """Skip for a missing tool or facility the Makefile provides (``msg`` says which and how
    to get it); under ``CI=true`` fail instead, in one line: there a skip would hide a test
    that never ran."""
    if under_ci():
        pytest.fail(f"{msg}; CI=true requires it", pytrace=False)
    pytest.skip(msg, allow_module_level=module)


def require_node() -> str:
    """Path of node, for the timeline page's script under a DOM stub (``make node`` installs
    Debian's nodejs)."""
    import shutil

    exe = shutil.which("node") or shutil.which("nodejs")
    if exe is None:
        skip_or_fail("node not found (`make node` installs it: scripts/install_node.sh)")
    assert exe is not None
    return exe


def mount_tmpfs(path, options: str) -> None:
    """Mount a tmpfs with ``options`` on ``path`` (root may; ``make test`` runs as root in
    CI). Where the machine forbids it, skip, or fail under ``CI=true``."""
    import subprocess

    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        skip_or_fail(f"cannot mount a tmpfs here ({done.stderr.strip() or done.returncode}; "
                     "root may)")


def require_verl() -> None:
    """verl's single controller, profiler and trainer modules importable (``make test``
    installs verl 0.9.1 from PyPI). Skips without them, except under ``CI=true``: there a
    missing verl is a failure, never a silent skip. Call at module level."""
    try:
        import verl  # noqa: F401
        import verl.trainer.ppo.ray_trainer  # noqa: F401
    except ImportError as err:
        skip_or_fail(f"verl is not importable ({err}); `make test` installs it "
                     "(tests/requirements)", module=True)


def require_nsys() -> str:
    """Path of a working nsys. Skips the test when there is none, except under ``CI=true``,
    where a missing nsys is a failure (CI must install it: see NSYS_ON_CPU.md)."""
    from verlprof.backends.nsys.cli import find_nsys, nsys_version

    exe = find_nsys()
    version = nsys_version(exe) if exe else None
    if exe is None or version is None:
        msg = ("nsys not found on PATH" if exe is None
               else f"{exe} does not run (nsys --version failed)")
        skip_or_fail(f"{msg} (`make nsys` installs it: see NSYS_ON_CPU.md)")
    return exe


@contextlib.contextmanager
def local_ray_cluster(num_cpus: int, num_gpus: int = 0) -> Iterator[None]:
    """A local Ray cluster of ``num_cpus`` logical CPUs (never one already running on the
    machine); on exit, no nsys agent of this session may be left orphaned."""
    import ray

    # a worker whose nsys lost its agent at start-up is restarted by Ray only after
    # worker_register_timeout_seconds (60 by default; docs/reliability.md, Known limits)
    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False,
             logging_level="ERROR", log_to_driver=False, num_gpus=num_gpus,
             _system_config={"worker_register_timeout_seconds": 30})
    try:
        yield
    finally:
        ray.shutdown()
    assert_no_leaked_agents()


def session_agents(agents):
    """Those of ``agents`` (``AgentProcess``) that this test session started."""
    from verlprof.backends.nsys.procs import carries_env

    return [a for a in agents if carries_env(a.pid, SESSION_ENV, SESSION)]


def assert_no_leaked_agents(wait_s: float = 30.0) -> None:
    """No ``nsys --start-agent`` this test session started is left orphaned.

    Agents of a run that just ended may take a few seconds to exit: wait for them, bounded.
    Other sessions' agents on a shared machine (orphaned or not) are not ours to judge.
    """
    import time

    from verlprof.backends.nsys.cli import list_agents, orphan_agents, terminate_processes

    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and session_agents(list_agents()):
        time.sleep(0.5)
    leaked = session_agents(orphan_agents(0))
    if leaked:  # ended here (they are this session's), so that only this module fails
        pids = {a.pid for a in leaked}
        terminate_processes(lambda: [a.pid for a in list_agents() if a.pid in pids])
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
        skip_or_fail(f"{msg} (`make chromium` installs it: scripts/install_chromium.sh)")
    assert exe is not None
    return exe


def read_columns(conn: Any, path: str, table: str,
                 columns: Sequence[str], pages_per_chunk: int = 1 << 30) -> Any:
    """All rows of ``columns`` in one :class:`Chunk`: the page decoder as the tests compare it
    with SQLite."""
    import numpy as np

    from verlprof.backends.nsys.sqlite_pages import Chunk, TablePages

    pages = TablePages(conn, path, table, columns)
    try:
        parts = [pages.read(c) for c in pages.chunks(pages_per_chunk)]
    finally:
        pages.close()
    if not parts:
        return None
    values = tuple(np.concatenate([p.values[j] for p in parts]) for j in range(len(columns)))
    nulls = tuple(np.concatenate([p.nulls[j] if p.nulls[j] is not None
                                  else np.zeros(len(p), dtype=bool) for p in parts])
                  for j in range(len(columns)))
    return Chunk(values=values, nulls=nulls)


def report_main(argv: Sequence[str]) -> int:
    """``verlprof report ARGV`` through the command line's own entry point."""
    from verlprof.cli import main

    return main(["report", *argv])


def trace_main(argv: Sequence[str]) -> int:
    """``verlprof trace ARGV`` through the command line's own entry point."""
    from verlprof.cli import main

    return main(["trace", *argv])


def load_script(name: str) -> Any:
    """``scripts/<name>.py`` (repository tooling, not part of the package) as a module."""
    import importlib.util
    import sys

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts",
                        f"{name}.py")
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module
