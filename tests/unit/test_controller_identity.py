"""The controller's first line tells a user which process to look for (``ps``, ``nsys``'s
``controller_<host>_<pid>`` report): it must name this host and this process, once, on
stdout and in the log (issue 13 item 6)."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys

from tests.unit.test_controller import Sent, plan_of
from verlprof.runtime.controller import ProfileController
from verlprof.safe_text import visible


def test_the_controller_prints_and_logs_its_host_and_pid_once(tmp_path, capsys, caplog):
    expected = f"verlprof controller: host={visible(socket.gethostname())} pid={os.getpid()}"
    with caplog.at_level(logging.INFO, logger="verlprof"):
        controller = ProfileController(plan_of(tmp_path, [1]), rpc=Sent(), echo=True,
                                       preflight=False, handle_signals=False)
    assert capsys.readouterr().out == expected + "\n"  # construction prints nothing else
    assert (controller.host, controller.pid) == (socket.gethostname(), os.getpid())
    logged = [r for r in caplog.records
              if r.name == "verlprof" and r.levelno == logging.INFO and r.getMessage() == expected]
    assert len(logged) == 1


def test_echo_false_keeps_stdout_quiet_but_still_logs(tmp_path, capsys, caplog):
    with caplog.at_level(logging.INFO, logger="verlprof"):
        ProfileController(plan_of(tmp_path, [1]), rpc=Sent(), echo=False, preflight=False,
                          handle_signals=False)
    assert "verlprof controller:" not in capsys.readouterr().out
    assert any(r.getMessage().startswith("verlprof controller: host=") for r in caplog.records)


def test_the_line_is_out_at_once_when_stdout_is_a_pipe(tmp_path):
    """A job's stdout is a pipe (Ray, a scheduler, ``| tee``): the line must reach it at once,
    not when a buffer fills, so it is there even when the driver then dies without flushing."""
    child = ("import os, sys\n"
             "from tests.unit.test_controller import Sent, plan_of\n"
             "from verlprof.runtime.controller import ProfileController\n"
             "ProfileController(plan_of(sys.argv[1], [1]), rpc=Sent(), preflight=False,\n"
             "                  handle_signals=False)\n"
             "os._exit(0)\n")
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    done = subprocess.run([sys.executable, "-c", child, str(tmp_path)], capture_output=True,
                          text=True, timeout=120, check=True, env=buffered)
    assert done.stdout.startswith("verlprof controller: host="), (done.stdout, done.stderr)
