"""Placement while the job runs, and the leftovers of a controller that died, driven without
Ray: the real controller, mixin and session over in-process ranks (tests/unit/test_controller.py)
whose capture writes each window's file when it closes, where and as the torch backend names
it. tests/integration/test_job_dies.py proves the same over Ray and nsys."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import threading
import time

from tests.unit.test_controller import FileCapture, Rank, controller_of, phases, plan_of
from verlprof.backends.torch.capture import raw_path
from verlprof.manifest import read_manifest
from verlprof.runtime import leftovers, placement
from verlprof.runtime.journal import journal_path, read_journal
from verlprof.runtime.run_lock import lock_path, read_lock


class AtClose(FileCapture):
    """Writes each window's file at close, named as the torch backend names it."""

    writes_at_close = True

    def close(self, window):
        n = len(self.files) + 1
        path = raw_path(self.plan, window, socket.gethostname(), os.getpid())
        with open(path, "w") as handle:
            handle.write(f"{list(window.steps)} {self.phases}")
        self.files[n] = path


class AtCloseRank(Rank):
    def verlprof_configure(self, plan):
        status = super().verlprof_configure(plan)
        self._verlprof_session.capture = AtClose(plan)
        return status


def ranked(monkeypatch):
    monkeypatch.setattr("tests.unit.test_controller.Rank", AtCloseRank)


def wait_for(predicate, timeout_s=20.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("not within the timeout")


def on_disk(output_dir):
    try:
        return read_manifest(str(output_dir))
    except ValueError:
        return None


def placement_threads():
    return {t for t in threading.enumerate() if t.name == "verlprof-placement"}


def statuses(manifest):
    return {(e.rank, e.steps): (e.status, e.reason) for e in manifest.reports}


def step(controller, ranks, n):
    with controller.step(n):
        phases(ranks)


def test_a_closed_window_is_placed_while_the_job_runs_and_finalize_keeps_it(
        tmp_path, monkeypatch):
    ranked(monkeypatch)
    out = tmp_path / "placed"
    controller, ranks, _ = controller_of(plan_of(out, [1, 2, 3]))
    for n in (1, 2):
        step(controller, ranks, n)
    running = wait_for(lambda: (m := on_disk(out)) is not None and sum(
        e.status == "ok" for e in m.reports) == 4 and m)
    assert running.running
    seen = statuses(running)
    assert [seen[(r, (s,))][0] for r in (0, 1) for s in (1, 2)] == ["ok"] * 4
    assert seen[(0, (3,))] == ("missing", placement.NOT_YET)
    for entry in running.reports:
        if entry.status == "ok":  # at its contract path, the raw name kept until finalize
            with open(out / entry.path) as handle:
                assert handle.read().startswith(str(list(entry.steps)))
    assert os.path.isfile(journal_path(str(out)))
    step(controller, ranks, 3)
    final = controller.finalize()

    assert controller.placed_while_running >= 4  # step 3's too, unless finalize came first
    placers = placement_threads()
    base = tmp_path / "before"  # place: at_end, finalize moves everything as before placement
    controller, ranks, _ = controller_of(plan_of(base, [1, 2, 3], place="at_end"))
    for n in (1, 2, 3):
        step(controller, ranks, n)
        time.sleep(0.2)  # time enough for a placer, had it run, to place step n's reports
        assert on_disk(base) is None and not os.path.exists(journal_path(str(base)))
    assert controller.placed_while_running == 0
    assert placement_threads() <= placers  # none started (another test's may have ended)
    before = controller.finalize()

    def essence(manifest):
        return [(e.path, e.status, e.bytes, e.transfer, e.steps, e.rank, e.reason)
                for e in manifest.reports]

    assert essence(final) == essence(before) and not final.running
    assert [e.status for e in final.reports] == ["ok"] * 6
    for folder in (out, base):
        assert not [f for _, _, fs in os.walk(folder / ".raw") for f in fs]


def test_leftovers_of_a_controller_that_died_are_placed_by_one_command(tmp_path, monkeypatch):
    ranked(monkeypatch)
    out = str(tmp_path)
    controller, ranks, _ = controller_of(plan_of(tmp_path, [1, 2, 3, 4]))
    for n in (1, 2):
        step(controller, ranks, n)
    opened = controller.step(3)
    opened.__enter__()  # step 3's window open when the controller "dies"
    phases(ranks)
    wait_for(lambda: (j := read_journal(out)) and all(
        (3,) in {s.steps for s in p.sent} for p in j.processes) and sum(
        e.status == "ok" for e in on_disk(out).reports) == 4)
    state, _ = leftovers.run_state(out)
    assert state == f"running (run owner pid {os.getpid()} on {socket.gethostname()})"
    controller._placement.finish()
    for rank in ranks:  # the workers end their window as they die; the tool writes it
        rank.verlprof_stop()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    holder = dataclasses.replace(read_lock(out), pid=int(gone.stdout), proc_start=0)
    with open(lock_path(out), "w") as handle:
        json.dump(dataclasses.asdict(holder), handle)

    state, _ = leftovers.run_state(out)
    assert state.startswith(f"{leftovers.ENDED}: run owner pid {holder.pid} is not running")
    assert state.endswith(f"run `verlprof collect {out}` to place what it left")
    collected = leftovers.collect_leftovers(out, timeout_s=1.0)
    manifest, problems = collected.manifest, collected.problems
    assert collected.settled == leftovers.Settled()  # no profiler, no agent of this run
    seen = statuses(manifest)
    assert [seen[(r, (s,))][0] for r in (0, 1) for s in (1, 2, 3)] == ["ok"] * 6
    why = seen[(0, (4,))]
    assert why[0] == "missing" and why[1].startswith(
        f"window never opened: {leftovers.ENDED} (run owner pid {holder.pid} is not running")
    assert len(problems) == 2 and not manifest.running
    for entry in manifest.reports:
        if entry.status == "ok":
            with open(tmp_path / entry.path) as handle:
                assert handle.read().startswith(str(list(entry.steps)))
    assert not [f for _, _, fs in os.walk(tmp_path / ".raw") for f in fs]  # links gone too
    assert leftovers.run_state(out)[0].startswith(leftovers.ENDED)
    assert leftovers.collect_leftovers(out) == leftovers.Collected(
        manifest=read_manifest(out))  # a second time: as is
    opened.__exit__(None, None, None)  # the test's controller ends its step (nothing moves)
