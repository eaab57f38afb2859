"""A user's driver gets one SIGTERM while its finalize waits for a report that never comes:
the held signal comes due after ``finalize_timeout_s``, the manifest is written with those
entries ``missing`` (and why), and the driver exits 143, all within finalize_timeout_s plus a
few seconds. No Ray: the ranks are in-process (tests/unit/test_controller.py), on their own
threads; the driver is a real process getting a real signal."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FINALIZE_TIMEOUT_S = 3.0

DRIVER = """
import sys, time
from pathlib import Path
from tests.unit.test_controller import GROUP, Rank, plan_of
from verlprof.runtime.controller import ProfileController
from verlprof.runtime.local_rpc import InProcessRanks, OnOwnThread

out, ready, timeout = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3])

class NeverWrites(Rank):
    def verlprof_finalize(self, *args):
        ready.write_text("finalizing")
        time.sleep(3600)  # waits for a report that never comes, past every timeout

controller = ProfileController(plan_of(out, [1]), rpc=InProcessRanks(), echo=False,
                               preflight=False, finalize_timeout_s=timeout)
ranks = [NeverWrites(r) for r in range(2)]
controller.register_group(GROUP, [OnOwnThread(r) for r in ranks])
with controller:
    with controller.step(1):
        for rank in ranks:
            rank.generate_sequences()
print("not reached: the SIGTERM is passed on", flush=True)
"""


def test_one_sigterm_ends_a_driver_stuck_in_finalize_with_the_manifest_written(tmp_path):
    ready = tmp_path / "ready"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [
        str(ROOT), os.environ.get("PYTHONPATH")])))
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path / "out"), str(ready),
                               str(FINALIZE_TIMEOUT_S)], env=env, cwd=str(ROOT),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for _ in range(600):
            if ready.exists() or driver.poll() is not None:
                break
            time.sleep(0.05)
        assert ready.exists(), driver.communicate()[0]
        driver.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        output = driver.communicate(timeout=FINALIZE_TIMEOUT_S + 30)[0]
        took = time.monotonic() - sent
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    assert driver.returncode == 143, output
    assert took < FINALIZE_TIMEOUT_S + 5, (took, output)
    assert "not reached" not in output
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["reports"] and {e["status"] for e in manifest["reports"]} == {"missing"}
    for entry in manifest["reports"]:
        assert "finalize cut short by SIGTERM, held 3s" in entry["reason"], entry
