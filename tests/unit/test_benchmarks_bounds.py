"""benchmarks/bounds.py: a wait that expires names what it waited for and ends, by pid, every
process its step started (also one that left the process group, as nsys' agents do); the row
prints FAIL (why). Real processes, no nsys, a deadline of about a second."""

from __future__ import annotations

import os
import sys
import time

import pytest

from benchmarks import bounds
from benchmarks.__main__ import guarded, table
from benchmarks.common import Result

# starts a grandchild in a session of its own (as nsys' agent is), then hangs
_PARENT = """
import os, subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                              start_new_session=True)
open(sys.argv[1], "w").write(str(grandchild.pid))
time.sleep(600)
"""


def _gone(pid: int, within_s: float = 10.0) -> bool:
    until = time.monotonic() + within_s
    while time.monotonic() < until:
        info = bounds.proc_info(pid)
        if info is None or info.state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def test_an_expired_step_is_named_and_everything_it_started_is_ended(tmp_path):
    pid_file = tmp_path / "grandchild"
    started = time.monotonic()
    with pytest.raises(bounds.Stalled) as info:
        bounds.run_bounded("t-step", [sys.executable, "-c", _PARENT, str(pid_file)], 1.5,
                           "the test's parent process")
    assert time.monotonic() - started < 20
    message = str(info.value)
    assert message.startswith("the test's parent process: pid ") and "after 2s" in message
    assert _gone(int(pid_file.read_text()))


def test_the_hang_hook_and_the_deadline_scale(monkeypatch):
    monkeypatch.setenv(bounds.SCALE_ENV, "0.5")
    assert bounds.deadline_s(10, 2.0, 5) == 10.0
    monkeypatch.setenv(bounds.HANG_ENV, "t-hang")
    with pytest.raises(bounds.Stalled, match="t-hang's child"):
        bounds.run_bounded("t-hang", [sys.executable, "-c", "pass"], 0.5, "t-hang's child")
    done = bounds.run_bounded("t-other", [sys.executable, "-c", "print('hi')"], 30, "other")
    assert done.returncode == 0 and done.stdout.strip() == "hi"


def test_a_stalled_row_prints_fail_with_why_and_the_run_goes_on():
    def stalls():
        raise bounds.Stalled("nsys export of x.nsys-rep: pid 7 (nsys export) still running")

    rows = guarded("P9", stalls) + guarded("P10", lambda: [Result("P10 thing", 1.0, 2.0)])
    assert rows[0].verdict == ("FAIL (nsys export of x.nsys-rep: pid 7 (nsys export) still "
                               "running)")
    assert rows[1].verdict == "PASS"
    assert "FAIL (nsys export of x.nsys-rep" in table(rows)


def test_marked_finds_only_its_own_marker():
    assert os.getpid() not in bounds.marked(bounds.RUN_ENV, "no-such-run")
    assert bounds.marked(bounds.RUN_ENV, "no-such-run") == []
