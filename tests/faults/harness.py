"""Shared machinery of the fault suite: one Ray head for the suite (``ray start --head``,
tests/ray_start.py: its own temp dir, so no other Ray user on the machine connects to it by
accident), a marker in the environment of
every process this suite starts (so leaked nsys agents are attributed to it, never to another
run on the same machine), the smallest real demo configuration, and report checks that open
every report with ``nsys export``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence

from tests.ray_start import (  # noqa: F401 - the fault modules use them through the harness
    RayStartNode,
    cmdline,
    is_ours,
    our_processes,
    wait_until_gone,
)
from verlprof.backends.nsys.cli import list_agents, terminate_processes

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


def our_agents() -> List[int]:
    return [a.pid for a in list_agents() if is_ours(a.pid)]


def assert_no_leftovers(timeout_s: float = 30.0) -> None:
    """No ``nsys --start-agent`` and no ``nsys profile`` of this session (bounded wait for
    ones whose owner is still finishing). What is found is ended before the assertion, so
    that only the test that left it fails, not every later one that looks."""
    agents = _ended(our_agents, timeout_s)
    profilers = _ended(lambda: our_processes("nsys profile"), 5.0)
    assert not agents and not profilers, \
        f"nsys agents left behind: {agents}; nsys profile processes left: {profilers}"


def _ended(find: Callable[[], List[int]], wait_s: float) -> List[str]:
    """The command lines of what ``find`` still lists after ``wait_s``, ended."""
    found = wait_until_gone(find, wait_s)
    lines = [cmdline(p) for p in found]
    if found:
        terminate_processes(lambda: [p for p in find() if p in found])
    return lines


# ------------------------------------------------------------------------------ the Ray head


def RayHead(num_cpus: int = 2) -> RayStartNode:
    """The suite's ``ray start --head`` (tests/ray_start.py)."""
    return RayStartNode(name="head", num_cpus=num_cpus)


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


# ---------------------------------------------------------------------- a driver that dies


def verlprof_cli(*args: str) -> subprocess.CompletedProcess:
    """``verlprof ARGS`` in a process of its own, as a user runs it."""
    return subprocess.run([str(VENV_BIN / "verlprof"), *args], capture_output=True, text=True,
                          timeout=300, cwd=str(ROOT))


def kill_demo_at(args: Sequence[str], marker: str, timeout_s: float = 240.0) -> None:
    """``verlprof demo ARGS`` (counted), SIGKILLed once ``marker`` exists (a fault wrote it:
    the step it waits in has begun), as a driver that dies."""
    COUNTS["demo_runs"] += 1
    demo = subprocess.Popen([str(VENV_BIN / "verlprof"), "demo", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, cwd=str(ROOT))
    try:
        deadline = time.monotonic() + timeout_s
        while not os.path.exists(marker):
            assert demo.poll() is None, demo.stdout.read() if demo.stdout else ""
            assert time.monotonic() < deadline, f"{marker} never written"
            time.sleep(0.2)
        demo.send_signal(signal.SIGKILL)
        demo.wait(timeout=30)
    finally:
        if demo.poll() is None:
            demo.kill()


def wait_until_ended(output_dir: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess:
    """``verlprof status`` once it says the run ended without finalize (Ray ends a dead
    driver's actors, its controller too), within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while "ended without finalize" not in (status := verlprof_cli("status", output_dir)).stdout:
        assert time.monotonic() < deadline, status.stdout + status.stderr
        time.sleep(1)
    return status
