"""``verlprof collect --address``: which processes are another node's to ask, and a bad
address refused in one line before Ray is started (``ray.init`` retries one for minutes)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from verlprof.cli import main
from verlprof.manifest import Manifest, read_manifest, write_manifest
from verlprof.records import ProcessIdentity
from verlprof.runtime.elsewhere import Cluster
from verlprof.runtime.run_lock import lock_path, this_process


def test_only_a_process_on_another_live_node_is_asked_there():
    cluster = Cluster(address="h:6379", local_node="a", alive=frozenset({"a", "b"}))
    on = {node: ProcessIdentity(host="h", pid=1, node_id=node) for node in ("a", "b", "c", "")}
    assert [n for n, where in on.items() if cluster.holds(where)] == ["b"]


@pytest.fixture
def dead_run(tmp_path):
    """An output directory whose controller died before finalize (its lock names a pid that
    has exited)."""
    out = str(tmp_path / "run")
    write_manifest(Manifest(tool="nsys", output_dir=out, step_windows=((1,),), reports=(),
                            run_id="dead", running=True), out)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    with open(lock_path(out), "w") as handle:
        json.dump(dict(vars(this_process("dead")), pid=int(gone.stdout), proc_start=0), handle)
    return out


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("address, says", [
    ("nonsense", "--address: 'nonsense' is not host:port (the job's Ray head"),
    ("127.0.0.1:{port}", "--address: nothing answers at 127.0.0.1:{port} (Connection refused)"),
])
def test_a_bad_address_is_one_line_and_the_run_is_left_as_it_was(dead_run, capsys, address,
                                                                 says):
    port = free_port()
    assert main(["collect", dead_run, "--address", address.format(port=port)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"verlprof: {says.format(port=port)}") and err.count("\n") == 1
    assert read_manifest(dead_run).running  # nothing placed, nothing rewritten


def test_status_suggests_the_address_when_the_run_had_processes_on_other_hosts(dead_run):
    from verlprof.runtime import leftovers
    from verlprof.runtime.journal import ProcessJournal, RunJournal, write_journal

    def journal(host: str) -> None:
        write_journal(RunJournal(run_id="dead", tool="nsys", output_dir=dead_run, processes=(
            ProcessJournal(group="critic", rank=0,
                           identity=ProcessIdentity(host=host, pid=1, node_id="b")),)), dead_run)

    journal(socket.gethostname())
    assert leftovers.run_state(dead_run)[0].endswith(
        f"run `verlprof collect {dead_run}` to place what it left")
    journal("node-b")
    assert leftovers.run_state(dead_run)[0].endswith(
        f"run `verlprof collect {dead_run} --address <the job's Ray address>` to place what it "
        "left")
