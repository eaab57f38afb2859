"""Ray nodes started as on a real cluster, by Ray's own command line: ``ray start --head`` and
``ray start --address=<head>``, each ``--block`` in a process group and temp dir of its own,
so that a test can end one node alone (SIGKILL to its group: the machine is gone) and no other
Ray user on the machine connects to it by accident. Also: finding this test session's own
processes (they carry the session's marker, tests/helpers.py)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

from tests.helpers import SESSION, SESSION_ENV
from verlprof.backends.nsys.procs import carries_env

VENV_BIN = Path(sys.executable).parent


def is_ours(pid: int) -> bool:
    """Started by this test session (it carries the session's marker)."""
    return carries_env(pid, SESSION_ENV, SESSION)


def cmdline(pid: int) -> List[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return [a.decode(errors="replace") for a in handle.read().split(b"\0") if a]
    except OSError:
        return []


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"


def our_processes(match: str) -> List[int]:
    """Live processes of this session whose command line contains ``match``."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        if pid == os.getpid() or _state(pid) in ("Z", "X", ""):
            continue
        if match in " ".join(cmdline(pid)) and is_ours(pid):
            out.append(pid)
    return out


def wait_until_gone(find: Callable[[], List[int]], timeout_s: float = 30.0) -> List[int]:
    """Poll ``find()`` until it is empty or ``timeout_s`` passed; return what is left."""
    deadline = time.monotonic() + timeout_s
    left = find()
    while left and time.monotonic() < deadline:
        time.sleep(0.25)
        left = find()
    return left


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the test process goes away (no stray cluster)."""
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class RayStartNode:
    """One ``ray start ... --block``: the head when ``head_address`` is None, else a node that
    joins it. Ended by signal, never ``ray stop`` (which would end every Ray cluster on the
    machine)."""

    def __init__(self, *, name: str = "head", head_address: Optional[str] = None,
                 num_cpus: int = 2, num_gpus: int = 0,
                 resources: Optional[Dict[str, float]] = None, own_mounts: bool = False):
        self.temp_dir = f"/tmp/vpf-{SESSION[:8]}-{name}"  # short: Unix socket paths are
        self.is_head = head_address is None
        self.port = _free_port() if self.is_head else None
        self.address = f"127.0.0.1:{self.port}" if self.is_head else str(head_address)
        # A worker whose nsys dies at start-up ("Connection to the Agent lost", seen under
        # many concurrent nsys sessions on one machine) is restarted by Ray only after
        # worker_register_timeout_seconds (60 by default): 30 keeps such a retry cheaper.
        # The auth mode of this test process: a local ray.init() earlier in the session turns
        # token auth on in it for good (the token in ~/.ray), and a token-mode driver cannot
        # join a cluster started without it; a process that never started Ray joins one
        # started with auth disabled.
        env = dict(os.environ, RAY_AUTH_MODE=os.environ.get("RAY_AUTH_MODE", "disabled"),
                   RAY_worker_register_timeout_seconds="30")
        env.pop("RAY_ADDRESS", None)
        where = [f"--port={self.port}", "--include-dashboard=false"] if self.is_head else \
            [f"--address={head_address}"]
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        os.makedirs(self.temp_dir)
        self.log = open(os.path.join(self.temp_dir, "node.log"), "wb")  # noqa: SIM115
        # own_mounts: the node's processes get a mount namespace of their own (unshare, no
        # fork: the pid stays ray start's), where :meth:`hide` can give a directory a private
        # content, as a machine with its own disk would have
        self.proc = subprocess.Popen(
            [*(["unshare", "--mount", "--propagation", "private"] if own_mounts else []),
             str(VENV_BIN / "ray"), "start", *(["--head"] if self.is_head else []), *where,
             "--block", f"--num-cpus={num_cpus}", f"--num-gpus={num_gpus}",
             f"--resources={json.dumps(resources or {})}", "--disable-usage-stats",
             f"--temp-dir={self.temp_dir}"],
            stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            preexec_fn=_die_with_parent)

    def wait_ready(self, timeout_s: float = 120.0) -> RayStartNode:
        """Until the node's raylet has its socket (and the head its GCS port)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ray start exited {self.proc.returncode}: {self._tail()}")
            try:
                if self.port is not None:
                    with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                        pass
                if any(Path(self.temp_dir).glob("session_*/sockets/raylet*")):
                    return self
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"Ray node {self.temp_dir} not ready within {timeout_s:g}s: "
                           f"{self._tail()}")

    def _tail(self) -> str:
        self.log.flush()
        with open(self.log.name, errors="replace") as handle:
            return " | ".join(handle.read().splitlines()[-5:])

    def hide(self, directory: str) -> None:
        """From now on this node (started with ``own_mounts``) sees ``directory`` as an empty
        file system of its own, and every other node keeps seeing the real one: what this
        node writes there stays on it, as on a node without a shared file system (and goes
        with it when it is killed)."""
        os.makedirs(directory, exist_ok=True)
        subprocess.run(["nsenter", f"--target={self.proc.pid}", "--mount", "--", "mount", "-t",
                        "tmpfs", "-o", "size=256m", "tmpfs", directory], check=True, timeout=30)

    def kill(self) -> None:
        """SIGKILL to the node's whole process group (raylet, its workers' parent, the
        ``ray start`` itself), as when its machine goes; worker processes Ray started apart
        from the group are for the caller to end."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        wait_until_gone(lambda: our_processes(self.temp_dir), 15.0)
        self.log.close()
        shutil.rmtree(self.temp_dir, ignore_errors=True)
