"""wait_for_reports stops once the writer of a missing report is gone (its nsys session and its
target ended, no file came), with a reason naming both; fake process probes decide."""

from __future__ import annotations

import os
import time
from typing import List, Optional, Tuple

from verlprof.backends.nsys.reports import (
    ReportWriter,
    WriterWatch,
    own_writer,
    wait_for_reports,
)


class FakeProbe:
    """A session whose processes end after ``session_looks`` looks; a target alive for
    ``target_looks`` looks."""

    def __init__(self, session_looks: int, target_looks: int, name: Optional[str] = None):
        self.session_looks, self.target_looks, self.name = session_looks, target_looks, name
        self.looks = 0

    def session(self, cli_pid: int) -> Tuple[List[int], Optional[str]]:
        self.looks += 1
        live = [cli_pid, cli_pid + 7] if self.looks <= self.session_looks else []
        return live, (self.name if live else None)

    def alive(self, pid: int) -> bool:
        return self.looks <= self.target_looks


def test_the_writer_is_gone_only_when_session_and_target_both_ended_twice_in_a_row():
    watch = WriterWatch(ReportWriter(cli_pid=100, target_pid=120),
                        FakeProbe(session_looks=2, target_looks=4, name="profile-python-100"))
    answers = [watch.gone() for _ in range(6)]
    assert answers[:5] == [None] * 5  # session live (2), then the target (4), then one quiet look
    assert answers[5] is not None
    assert "profile-python-100" in answers[5] and "CLI pid 100" in answers[5]
    assert "target pid 120" in answers[5]


def test_a_session_that_comes_back_resets_the_count():
    class Flicker(FakeProbe):
        def session(self, cli_pid):
            self.looks += 1
            return ([cli_pid] if self.looks == 2 else []), None

    watch = WriterWatch(ReportWriter(cli_pid=5, target_pid=None), Flicker(0, 0))
    assert [watch.gone() is None for _ in range(3)] == [True, True, True]
    assert "profile-*-5" in (watch.gone() or "") and "pid unknown" in (watch.gone() or "")


def test_the_waiting_process_as_target_never_keeps_the_wait_alive():
    watch = WriterWatch(ReportWriter(cli_pid=9, target_pid=os.getpid()),
                        FakeProbe(session_looks=0, target_looks=10 ** 6))
    watch.gone()
    reason = watch.gone()
    assert reason is not None and f"this process pid {os.getpid()}" in reason


def test_wait_for_reports_returns_early_once_the_writer_is_gone(tmp_path):
    probe = FakeProbe(session_looks=3, target_looks=3)
    started = time.monotonic()
    waited = wait_for_reports(str(tmp_path / "w_1.*nsys-rep"), 2, timeout_s=300.0, poll_s=0.01,
                              writer=ReportWriter(cli_pid=42, target_pid=43), probe=probe)
    assert time.monotonic() - started < 30.0
    assert not waited.complete and waited.problem is not None
    assert "CLI pid 42" in waited.problem and "target pid 43" in waited.problem
    assert probe.looks >= 5


def test_a_live_writer_keeps_the_wait_going_to_its_deadline(tmp_path):
    waited = wait_for_reports(str(tmp_path / "w_1.*nsys-rep"), 1, timeout_s=0.3, poll_s=0.01,
                              writer=ReportWriter(cli_pid=42, target_pid=43),
                              probe=FakeProbe(session_looks=10 ** 6, target_looks=10 ** 6))
    assert waited.problem is None and waited.elapsed_s >= 0.3 and waited.missing


def test_a_report_that_is_there_is_returned_whatever_the_writer(tmp_path):
    report = tmp_path / "w_1.nsys-rep"
    report.write_bytes(b"x" * 10)
    waited = wait_for_reports(str(tmp_path / "w_1.*nsys-rep"), 1, timeout_s=30, poll_s=0.01,
                              writer=ReportWriter(cli_pid=42, target_pid=43),
                              probe=FakeProbe(session_looks=0, target_looks=0))
    assert waited.complete and waited.problem is None


def test_outside_nsys_there_is_no_own_writer():
    assert own_writer() is None
