"""output_dir that can no longer be written: the probe, the manifest's reserved room, the wait
for reports that gives up early, and the controller's policy (no more windows; raise when
asked). The real full disk, with nsys and Ray, is tests/faults/test_disk_full.py."""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from pathlib import Path

import pytest

from tests.unit.test_controller import controller_of, plan_of
from verlprof.backends.nsys.reports import wait_for_reports
from verlprof.errors import ProfilingRuntimeError
from verlprof.manifest import read_manifest
from verlprof.storage import (
    RESERVE_MAX_BYTES,
    RESERVE_MIN_BYTES,
    RESERVE_NAME,
    SpaceReserve,
    reserve_bytes,
    write_problem,
)


def test_a_writable_directory_has_no_problem_and_keeps_no_probe(tmp_path):
    assert write_problem(str(tmp_path)) is None
    assert os.listdir(tmp_path) == []


def test_a_directory_that_is_gone_is_named_with_the_reason(tmp_path):
    gone = tmp_path / "gone"
    problem = write_problem(str(gone))
    assert problem is not None and problem.startswith(str(gone))
    assert "No such file or directory" in problem


def test_the_reserve_holds_real_room_and_gives_it_back(tmp_path):
    reserve = SpaceReserve(str(tmp_path), 3 << 20)
    path = tmp_path / RESERVE_NAME
    assert reserve.held == 3 << 20 and path.stat().st_size == 3 << 20
    assert path.stat().st_blocks * 512 >= 3 << 20  # allocated, not a sparse file
    reserve.release()
    reserve.release()  # idempotent
    assert not path.exists() and reserve.held == 0


def test_the_reserve_grows_with_the_plan_within_bounds():
    assert reserve_bytes(0) == RESERVE_MIN_BYTES
    assert reserve_bytes(2000) == 2000 * 2048
    assert reserve_bytes(10 ** 7) == RESERVE_MAX_BYTES


def test_waiting_for_reports_in_a_directory_that_cannot_be_written_ends_early(tmp_path):
    gone = tmp_path / "removed"
    started = time.monotonic()
    waited = wait_for_reports(str(gone / "x_1.*nsys-rep"), 1, timeout_s=300.0, poll_s=0.05)
    assert time.monotonic() - started < 300.0
    assert waited.problem is not None and "No such file or directory" in waited.problem
    assert not waited.found and waited.missing


def _steps(controller, steps) -> list:
    trained = []
    for step in steps:
        with controller.step(step):
            trained.append(step)
    return trained


def _turn_into_a_file(out: Path) -> None:
    """``out`` becomes a file: nothing can be created below it. The controller's placer may
    be writing its running manifest there at that moment (and recreates the directory), so
    the directory is renamed away, never removed file by file, until the file takes its
    place."""
    for attempt in itertools.count():
        with contextlib.suppress(OSError):
            os.rename(out, out.with_name(f"{out.name}.gone{attempt}"))
        with contextlib.suppress(OSError):
            os.close(os.open(out, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return


def test_no_window_opens_once_output_dir_cannot_be_written_and_training_goes_on(tmp_path):
    out = tmp_path / "out"
    plan = plan_of(str(out), [1, 2, 3])
    controller, _, rpc = controller_of(plan, on_rank_failure="continue")
    assert (out / RESERVE_NAME).exists()  # room for the manifest from the start
    _steps(controller, [1])
    _turn_into_a_file(out)  # the directory turns unwritable during the run
    assert _steps(controller, [2, 3]) == [2, 3]
    warnings = [w for w in controller.context.warnings
                if w.startswith("trainer.profiler.output_dir")]
    assert len(warnings) == 1 and "no more profiling windows open" in warnings[0]
    assert [m for m, _ in rpc.sent].count("verlprof_start") == 1  # step 1's window only
    out.unlink()
    manifest = controller.finalize()
    skipped = [e for e in manifest.reports if tuple(e.steps) in ((2,), (3,))]
    assert skipped and all(e.reason.startswith(
        "not opened: trainer.profiler.output_dir could not be written") for e in skipped)
    assert read_manifest(str(out)).reports == manifest.reports


def test_with_on_rank_failure_raise_the_run_stops_at_the_next_window(tmp_path):
    out = tmp_path / "out"
    plan = plan_of(str(out), [1, 2])
    controller, _, _ = controller_of(plan, on_rank_failure="raise")
    _steps(controller, [1])
    _turn_into_a_file(out)
    with pytest.raises(ProfilingRuntimeError) as info:
        _steps(controller, [2])
    assert str(info.value).startswith("trainer.profiler.output_dir: ")
    assert "\n" not in str(info.value)
