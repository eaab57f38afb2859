"""Pure helpers of verlprof.backends.nsys.cli (no nsys needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from verlprof.backends.nsys import cli as nsys_cli
from verlprof.backends.nsys import procs as nsys_procs


def test_parse_version():
    assert nsys_cli.parse_nsys_version(
        "NVIDIA Nsight Systems version 2022.4.2.1-df9881f") == "2022.4.2.1"
    assert nsys_cli.parse_nsys_version("NVIDIA Nsight Systems version 2025.3.1.90-253135822126v0"
                                       ) == "2025.3.1.90"
    assert nsys_cli.parse_nsys_version("garbage") is None
    assert nsys_cli.version_tuple("2022.4.2.1") == (2022, 4, 2, 1)


def test_sqlite_path_for():
    assert nsys_cli.sqlite_path_for("/a/worker_12.3.nsys-rep") == Path("/a/worker_12.3.sqlite")
    assert nsys_cli.sqlite_path_for("/a/b.nsys-rep") == Path("/a/b.sqlite")


def test_strip_output_options():
    opts = ["-t", "nvtx", "-o", "x", "--output=y", "-f", "true", "--force-overwrite=true",
            "--output", "z", "-c", "nvtx"]
    assert nsys_cli.strip_output_options(opts) == ["-t", "nvtx", "-c", "nvtx"]


def test_first_error_line_skips_progress_and_usage():
    stderr = ("Illegal --trace argument 'bogus'\nPossible --trace values are ...\n\n"
              "usage: nsys profile [<args>] [application] [<application args>]\n"
              "Try 'nsys profile --help' for more information.\n")
    assert nsys_cli.first_error_line(stderr) == "Illegal --trace argument 'bogus'"
    progress = "Exporting 206 events: [===50%   ]\rExporting 206 events: [====100%]\n"
    assert nsys_cli.first_error_line(progress + "Exportation error: Cannot read from stream.",
                                     failed=True) == "Exportation error: Cannot read from stream."
    assert nsys_cli.first_error_line("WARNING: CUDA memory usage will not be collected",
                                     failed=False) is None
    assert nsys_cli.first_error_line("", failed=True) is None


def test_agent_session_pid_parsing():
    assert nsys_procs._SESSION_PID_RE.match("profile-python-5517").group(1) == "5517"
    assert nsys_procs._SESSION_PID_RE.match("profile-my-app-1-77").group(1) == "77"
    assert nsys_procs._SESSION_PID_RE.match("mysession") is None



THROWN = ("/build/QuadD/Common/ProcessWaiter/Src/POSIX/ProcessWaiterImpl.cpp(166): Throw in "
          "function QuadDCommon::ProcessWaiter::ProcessWaiterImpl::ProcessWaiterImpl(...)")


BOGUS = "Illegal --trace argument 'bogus'"
LATE = "nsys did not finish a trial run of python within 60s (options that hang here?)"


@pytest.mark.parametrize("answers, runs, verdict", [
    ([THROWN, None], 2, None),
    (["End of file", None], 2, None),
    ([THROWN, THROWN], 2, THROWN),
    ([BOGUS, BOGUS], 2, BOGUS),
    ([LATE], 1, LATE)])
def test_a_failed_trial_run_is_made_once_more_before_its_options_are_refused(
        monkeypatch, answers, runs, verdict):
    """A fault of nsys' own (an exception in its code, a lost agent connection) is not a
    rejected option: one more trial run decides, and a rejected option fails it again. A trial
    past its timeout is not made again (another minute)."""
    from verlprof.backends.nsys import preflight

    made = []
    monkeypatch.setattr(preflight, "nsys_dry_run",
                        lambda argv, timeout_s: made.append(argv) or answers[len(made) - 1])
    why = preflight.check_launch_argv(["/bin/true", "profile", "--trace=nvtx"], timeout_s=60)
    assert len(made) == runs
    rejected = verdict and verdict != LATE
    assert why == (f"nsys rejected these options in a 60s trial run: {verdict}" if rejected
                   else verdict)
