"""Shared machinery of the fault suite: one Ray head per test session (its own temp dir, so
no other Ray user on the machine connects to it by accident), a marker in the environment of
every process this suite starts (so leaked nsys agents are attributed to it, never to another
run on the same machine), the smallest real demo configuration, and report checks that open
every report with ``nsys export``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence

from tests.helpers import SESSION as MARKER
from tests.helpers import SESSION_ENV as MARKER_ENV
from verlprof.backends.nsys.cli import list_agents
from verlprof.backends.nsys.procs import carries_env

ROOT = Path(__file__).resolve().parents[2]
CONFIG = str(ROOT / "trainer_configs" / "ppo_trainer.yaml")
VENV_BIN = Path(sys.executable).parent

COUNTS: Counter = Counter()
"""What the suite proved: ``demo_runs``, ``reports_checked`` (printed in the summary)."""

SMALLEST = ["trainer.total_training_steps=1", "trainer.profile_steps=[1]",
            "trainer.n_gpus_per_node=1", "actor_rollout_ref.actor.profile_ranks=[0]",
            "actor_rollout_ref.rollout.profile_ranks=[]", "critic.enable=false",
            "reward_model.enable=false"]
"""The smallest real demo: one step, one (profiled) actor_rollout_ref rank, controller under
nsys, no critic and no reward model."""


# ----------------------------------------------------------------------- our own processes


def is_ours(pid: int) -> bool:
    """Started by this test session (it carries the session's marker, tests/helpers.py)."""
    return carries_env(pid, MARKER_ENV, MARKER)


def _cmdline(pid: int) -> List[str]:
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
        if match in " ".join(_cmdline(pid)) and is_ours(pid):
            out.append(pid)
    return out


def our_agents() -> List[int]:
    return [a.pid for a in list_agents() if is_ours(a.pid)]


def wait_until_gone(find, timeout_s: float = 30.0) -> List[int]:
    """Poll ``find()`` until it is empty or ``timeout_s`` passed; return what is left."""
    deadline = time.monotonic() + timeout_s
    left = find()
    while left and time.monotonic() < deadline:
        time.sleep(0.25)
        left = find()
    return left


def assert_no_leftovers(timeout_s: float = 30.0) -> None:
    """No ``nsys --start-agent`` and no ``nsys profile`` of this session (bounded wait for
    ones whose owner is still finishing)."""
    agents = wait_until_gone(our_agents, timeout_s)
    assert not agents, f"nsys agents left behind: {[_cmdline(p) for p in agents]}"
    profilers = wait_until_gone(lambda: our_processes("nsys profile"), 5.0)
    assert not profilers, f"nsys profile processes left: {[_cmdline(p) for p in profilers]}"


# ------------------------------------------------------------------------------ the Ray head


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the test process goes away (no stray cluster)."""
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class RayHead:
    """``ray start --head --block`` in its own temp dir; ended by signal, never ``ray stop``
    (which would end every Ray cluster on the machine)."""

    def __init__(self, num_cpus: int = 2):
        self.temp_dir = f"/tmp/vpf-{MARKER[:8]}"
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        # A worker whose nsys dies at start-up ("Connection to the Agent lost", seen under
        # many concurrent nsys sessions on one machine) is restarted by Ray only after
        # worker_register_timeout_seconds (60 by default): 30 keeps such a retry cheaper.
        env = dict(os.environ, RAY_AUTH_MODE="disabled",
                   RAY_worker_register_timeout_seconds="30")
        env.pop("RAY_ADDRESS", None)
        os.makedirs(self.temp_dir, exist_ok=True)
        self.log = open(os.path.join(self.temp_dir, "head.log"), "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [str(VENV_BIN / "ray"), "start", "--head", "--block", f"--port={self.port}",
             f"--num-cpus={num_cpus}", "--include-dashboard=false", "--disable-usage-stats",
             f"--temp-dir={self.temp_dir}"],
            stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            preexec_fn=_die_with_parent)

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ray start exited {self.proc.returncode}: {self._tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    pass
                if any(Path(self.temp_dir).glob("session_*/sockets/raylet*")):
                    return
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"Ray head not ready within {timeout_s:g}s: {self._tail()}")

    def _tail(self) -> str:
        self.log.flush()
        with open(self.log.name, errors="replace") as handle:
            return " | ".join(handle.read().splitlines()[-5:])

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


def connect(address: str) -> None:
    import ray

    ray.init(address=address, logging_level="ERROR", log_to_driver=False)


# ------------------------------------------------------------------------------ running it


def plan_and_run(output_dir: str, overrides: Sequence[str], *, address: Optional[str] = None):
    """Plan and run the demo trainer through :func:`verlprof.demo.run.run_trainer` (counted);
    its reports are not summarised in finalize unless ``overrides`` say so (see
    tests/integration/runtime_helpers.py, :func:`run_case`)."""
    from tests.integration.runtime_helpers import without_summaries
    from verlprof.demo.run import plan_demo, run_trainer

    loaded, plan, _ = plan_demo(CONFIG, [f"trainer.profiler.output_dir={output_dir}",
                                         *without_summaries(overrides)])
    COUNTS["demo_runs"] += 1
    return plan, run_trainer(loaded, plan, ray_address=address)


def read_manifest(output_dir: str) -> dict:
    with open(os.path.join(output_dir, "manifest.json")) as handle:
        return json.load(handle)


def check_reports(output_dir: str, entries: Iterable[dict]) -> int:
    """Every ``ok`` entry: the file exists with the recorded size and opens with ``nsys export``
    (or, for torch traces, as gzip JSON). Returns how many were checked."""
    import gzip

    from verlprof.backends.nsys.cli import export_sqlite

    checked = 0
    for entry in entries:
        if entry["status"] != "ok":
            continue
        path = os.path.join(output_dir, entry["path"])
        assert os.path.isfile(path), path
        assert os.path.getsize(path) == entry["bytes"] > 0, (path, entry["bytes"])
        if path.endswith(".nsys-rep"):
            export_sqlite(path, timeout_s=120,
                          out_path=os.path.join(output_dir, ".check",
                                                f"{checked}_{os.path.basename(path)}.sqlite"))
        else:
            with gzip.open(path, "rt") as handle:
                json.load(handle)
        checked += 1
    COUNTS["reports_checked"] += checked
    return checked


def by_status(manifest: dict) -> Dict[str, List[dict]]:
    out: Dict[str, List[dict]] = {}
    for entry in manifest["reports"]:
        out.setdefault(entry["status"], []).append(entry)
    return out


def raw_leftovers(output_dir: str) -> List[str]:
    """Files still under .raw/ (collection moves every finalised report out)."""
    raw = os.path.join(output_dir, ".raw")
    return sorted(os.path.relpath(os.path.join(d, f), raw) for d, _, fs in os.walk(raw)
                  for f in fs)
