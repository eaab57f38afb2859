"""The whole suite: its order on two pytest-xdist workers, Ray's authentication mode, the Ray
work no test needs (switched off), and the fault suite's summary line.

``make test`` runs the suite on two pytest-xdist workers (``-n 2 --dist loadfile
--no-loadscope-reorder``): each module stays whole on one worker (one Ray cluster per module
still holds), and a worker that finishes a module takes the next. The longest modules (verl's
fits, which start one actor after the other) are handed out first, so that neither worker is
left with one of them at the end. A plain ``pytest`` (one process) keeps the usual order.
``--max-worker-restart=0``: a worker that dies (a crash in Ray's core worker did) fails its
test and the other worker runs the rest; xdist's default restart, under ``loadfile``, left
the run waiting forever.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

LONGEST_FIRST = ("tests/integration/test_verl_fit_cpu.py", "tests/integration/test_verl_bridge.py",
                 "tests/integration/test_multinode.py")
"""Under pytest-xdist, these modules come first, in this order (about 6, 2 and 1.5 minutes
alone; twice that beside the other worker); every other module keeps its place after them."""

# Every Ray cluster of the suite (local ray.init, ray start nodes, demo subprocesses) and every
# driver in token mode: a process caches Ray's mode when it first connects, so one that joined
# a cluster without authentication could not start a local one later (Ray 2.60 turns token
# mode on for new local clusters), whichever order a worker runs its modules in.
os.environ.setdefault("RAY_AUTH_MODE", "token")
# The suite is CPU-bound on 2 cores (98% busy over a whole run): Ray's work that no test looks
# at is switched off for every cluster it starts. Two idle workers prestarted at each driver's
# first connection (about 100 over the suite, most never used: profiled ranks start under nsys
# in processes of their own) and every process's metrics export. On test_runtime_nsys.py
# alone: 111 s and 181 CPU-s with Ray's defaults (twice), 96 s and 157 CPU-s without them.
os.environ.setdefault("RAY_prestart_worker_first_driver", "0")
os.environ.setdefault("RAY_enable_metrics_collection", "0")

FAULT_COUNTS: Counter = Counter()
"""The fault suite's counts gathered from the workers (``tests.faults.harness.COUNTS``)."""


def _worker() -> bool:
    return bool(os.environ.get("PYTEST_XDIST_WORKER"))


def pytest_configure(config):
    if _worker() or not getattr(config.option, "numprocesses", None):
        return
    # both workers start clusters at once: the token they share is made once, here, before
    # either could write its own over the other's (Ray writes ~/.ray/auth_token when missing)
    if not Path.home().joinpath(".ray", "auth_token").exists():
        ray = shutil.which("ray", path=str(Path(sys.executable).parent)) or "ray"
        subprocess.run([ray, "get-auth-token", "--generate"], check=True,
                       stdout=subprocess.DEVNULL, timeout=120)


def pytest_collection_modifyitems(config, items):
    if not _worker():
        return
    first = {path: index for index, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: first.get(item.nodeid.split("::")[0].replace("\\", "/"),
                                          len(first)))  # stable: the rest keep their order


def pytest_sessionfinish(session):
    harness = sys.modules.get("tests.faults.harness")
    workeroutput = getattr(session.config, "workeroutput", None)
    if harness is not None and workeroutput is not None:  # a worker: to the controller
        workeroutput["fault_counts"] = dict(harness.COUNTS)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    FAULT_COUNTS.update(getattr(node, "workeroutput", {}).get("fault_counts", {}))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """What the fault suite proved, in one or two lines (from this process's counts, or the
    workers')."""
    def ours(report) -> bool:
        return report.nodeid.replace("\\", "/").startswith("tests/faults/") and (
            report.when == "call" or report.outcome != "passed")

    outcomes = {}
    for outcome in ("passed", "failed", "error", "skipped"):
        outcomes[outcome] = sum(1 for r in terminalreporter.stats.get(outcome, []) if ours(r))
    cases = sum(outcomes.values())
    if not cases:
        return
    harness = sys.modules.get("tests.faults.harness")
    counts = FAULT_COUNTS + (harness.COUNTS if harness is not None else Counter())
    terminalreporter.write_sep("-", "fault suite")
    terminalreporter.write_line(
        f"faults: {cases} cases ({outcomes['passed']} passed, {outcomes['failed']} failed, "
        f"{outcomes['error']} errors, {outcomes['skipped']} skipped), "
        f"{counts['demo_runs']} demo runs, {counts['light_runs']} light runs, "
        f"{counts['reports_checked']} reports checked, "
        f"{counts['property_examples']} property examples")
    if counts["teardown_runs"]:
        terminalreporter.write_line(
            f"faults: teardown {counts['teardown_runs']} consecutive runs with ray.shutdown(), "
            f"0 reports lost, {counts['teardown_s'] / counts['teardown_runs']:.1f}s per run")
