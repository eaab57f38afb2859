"""The controller's first line tells a user which process to look for (``ps``, ``nsys``'s
``controller_<host>_<pid>`` report): it must name this host and this process, once, on
stdout and in the log (issue 13 item 6)."""

from __future__ import annotations

import logging
import os
import socket

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
