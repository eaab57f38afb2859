"""``python -m benchmarks`` always ends (issue 31), at its smallest sizes with real nsys:

* one SIGTERM while reports are being made under nsys ends it within 20 s, exit 143, and no
  process of the run is left (each carries the run's marker, printed in its header: nsys'
  CLIs, agents and apps included, which leave its process group);
* a generation step made to hang (the test hook ``VERLPROF_BENCH_HANG``; deadlines scaled to
  seconds) fails its row with what it waited for, ends what it started, and the next row
  completes.

The report cache is a fresh temporary directory, so the reports are really made."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List

import pytest

from benchmarks import bounds
from tests.helpers import require_nsys

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _start(tmp_path: Path, only: str, **env: str) -> subprocess.Popen:
    require_nsys()
    full = dict(os.environ, VERLPROF_BENCH_CACHE=str(tmp_path / "cache"),
                VERLPROF_BENCH_RUNS=str(tmp_path / "runs"), **env)
    full["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), full.get("PYTHONPATH")]))
    return subprocess.Popen([sys.executable, "-m", "benchmarks", "--quick", "--only", only],
                            env=full, cwd=str(ROOT), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _marker(bench: subprocess.Popen, seen: List[str]) -> str:
    assert bench.stdout is not None
    for line in bench.stdout:
        seen.append(line)
        found = re.search(rf"{bounds.RUN_ENV}=(\S+)", line)
        if found:
            return found.group(1)
    raise AssertionError("no run marker in the header:\n" + "".join(seen))


def _left(marker: str, within_s: float = 5.0) -> List[str]:
    until = time.monotonic() + within_s
    while True:
        left = [bounds.describe(p) for p in bounds.marked(bounds.RUN_ENV, marker)]
        if not left or time.monotonic() > until:
            return left
        time.sleep(0.2)


def _end(bench: subprocess.Popen, marker: str) -> None:
    if bench.poll() is None:
        bench.kill()
        bench.wait()
    if marker:
        bounds.end_marked(bounds.RUN_ENV, marker)


def test_one_sigterm_ends_the_run_within_20_s_leaving_no_process(tmp_path):
    bench, seen, marker = _start(tmp_path, "p4-scale"), [], ""
    try:
        marker = _marker(bench, seen)
        until = time.monotonic() + 120
        while not any("nsys" in bounds.describe(p)
                      for p in bounds.marked(bounds.RUN_ENV, marker)):
            assert time.monotonic() < until and bench.poll() is None, "".join(seen)
            time.sleep(0.2)
        bench.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        output = bench.communicate(timeout=60)[0]
        took = time.monotonic() - sent
        left = _left(marker)
    finally:
        _end(bench, marker)
    assert took < 20, (took, output)
    assert bench.returncode == 143, output
    assert "stopped by SIGTERM" in output
    assert left == [], left


def test_a_hung_generation_step_fails_its_row_and_the_next_row_completes(tmp_path):
    bench, seen, marker = _start(tmp_path, "p4-scale,scale",
                                 **{bounds.HANG_ENV: "p4-generate-app",
                                    bounds.SCALE_ENV: "0.05"}), [], ""
    try:
        marker = _marker(bench, seen)
        output = "".join(seen) + bench.communicate(timeout=300)[0]
        left = _left(marker)
    finally:
        _end(bench, marker)
    assert bench.returncode == 0, output
    row = next(line for line in output.splitlines() if line.startswith("P4 1 MB x 4")
               and "FAIL (" in line)
    assert "making ~1 MB under nsys: still running after" in row and "nsys profile" in row
    assert re.search(r"^report at scale: .* (PASS|MISS|WITHIN NOISE)\s*$", output, re.M), output
    assert left == [], left
    # its rows were kept where the test said, not in this checkout's history of real runs
    assert len(list((tmp_path / "runs").glob("*.json"))) == 1, output
