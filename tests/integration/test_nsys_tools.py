"""Real nsys (2022.4 here), no mocks: NVTX adapter, capture windows, nsys_cli, sqlite reading."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import NSYS_SAFE_OPTS, require_nsys, skip_or_fail
from verlprof.backends.nsys import cli as nsys_cli
from verlprof.backends.nsys.cli import (
    NsysExportError,
    dry_run,
    export_sqlite,
    list_agents,
    marked_processes,
    run_nsys,
    wait_for_reports,
)
from verlprof.backends.nsys.nvtx import CAPTURE_RANGE, NVTX_DOMAIN, nvtx_library_candidates
from verlprof.backends.nsys.procs import OWNER_ENV
from verlprof.backends.nsys.reports import ReportWriter
from verlprof.backends.nsys.sqlite import (
    ReportReadError,
    list_tables,
    read_nvtx_ranges,
    report_time_bounds,
)

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
APP = Path(__file__).resolve().parent / "apps" / "nvtx_windows.py"
_spec = importlib.util.spec_from_file_location("nvtx_windows_app", APP)
_app = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_app)
WINDOW_RANGES, window_names = _app.WINDOW_RANGES, _app.window_names

CAPTURE_OPTS = ["-t", "nvtx,osrt", *NSYS_SAFE_OPTS, "-c", "nvtx",
                "-p", f"{CAPTURE_RANGE}@{NVTX_DOMAIN}"]


def _app_env(**extra: str) -> dict:
    env = dict(os.environ)
    env["NSYS_NVTX_PROFILER_REGISTER_ONLY"] = "0"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    for key in ("VERLPROF_NVTX", "VERLPROF_NVTX_BACKEND"):
        env.pop(key, None)
    env.update(extra)
    return env


def _profile_app(nsys: str, out_dir: Path, windows: int, *, repeat: int, app_args=(),
                 env_extra=None, timeout_s: float = 60):
    info = out_dir / "app.json"
    argv = [nsys, "profile", *CAPTURE_OPTS, f"--capture-range-end=repeat:{repeat}", "-f",
            "true", "-o", str(out_dir / "worker_%p"), sys.executable, str(APP),
            "--windows", str(windows), "--out", str(info), *app_args]
    res = run_nsys(argv, timeout_s, env=_app_env(**(env_extra or {})), cwd=str(REPO))
    _MARKERS.append(res.marker)
    return res, info


@pytest.fixture(scope="module")
def nsys_exe() -> str:
    return require_nsys()


_MARKERS: list = []
"""Markers of every nsys run this module started (other sessions may run nsys meanwhile)."""


@pytest.fixture(scope="module", autouse=True)
def nothing_left_behind():
    yield
    left = {m: marked_processes(m) for m in _MARKERS}
    assert not any(left.values()), f"processes left behind by this module's nsys runs: {left}"




@pytest.fixture(scope="module")
def three_windows(nsys_exe, tmp_path_factory):
    """3 windows, the 3rd closed from a second thread; wait_for_reports runs meanwhile."""
    out = tmp_path_factory.mktemp("three")
    box = {}
    t = threading.Thread(target=lambda: box.update(zip(("res", "info"), _profile_app(
        nsys_exe, out, 3, repeat=3, app_args=["--close-from-thread", "3", "--linger", "2"]))))
    t0 = time.monotonic()
    t.start()
    waited = wait_for_reports(str(out / "worker_*.nsys-rep"), expected_count=3, timeout_s=45,
                              poll_s=0.2)
    waited_s = time.monotonic() - t0
    app_alive_at_wait = t.is_alive()
    t.join(60)
    assert not t.is_alive()
    info = json.loads(Path(box["info"]).read_text())
    return {"dir": out, "res": box["res"], "info": info, "waited": waited,
            "waited_s": waited_s, "alive_at_wait": app_alive_at_wait}


@pytest.fixture(scope="module")
def one_window(nsys_exe, tmp_path_factory):
    out = tmp_path_factory.mktemp("one")
    res, info = _profile_app(nsys_exe, out, 1, repeat=1)
    return {"dir": out, "res": res, "info": json.loads(info.read_text())}


def _texts(ranges):
    return {r.text for r in ranges if r.text != CAPTURE_RANGE}


# ----------------------------------------------------------------------------- capture windows


def test_three_windows_give_three_reports_named_by_ordinal(three_windows):
    pid = three_windows["info"]["pid"]
    names = sorted(p.name for p in three_windows["dir"].glob("*.nsys-rep"))
    assert names == [f"worker_{pid}.{i}.nsys-rep" for i in (1, 2, 3)]
    assert three_windows["info"]["enabled"] is True
    assert three_windows["info"]["backend"] == "nvtx"  # nvtx==0.2.11 is preferred


def test_wait_for_reports_returns_finalised_files_while_app_lives(three_windows):
    waited = three_windows["waited"]
    assert waited.complete, waited
    assert [p.name for p in waited.found] == sorted(
        p.name for p in three_windows["dir"].glob("*.nsys-rep"))
    assert not waited.pending and not waited.missing
    # repeat:3 writes all three when the 3rd window closes, 2 s before the app exits
    assert three_windows["alive_at_wait"], "wait returned only after the run ended"
    for p in waited.found:  # what wait_for_reports called final exports cleanly
        assert export_sqlite(p).is_file()


def test_each_report_holds_exactly_its_own_window(three_windows):
    pid = three_windows["info"]["pid"]
    for w in (1, 2, 3):
        sq = export_sqlite(three_windows["dir"] / f"worker_{pid}.{w}.nsys-rep")
        ranges = read_nvtx_ranges(sq, include_marks=True)
        assert _texts(ranges) == window_names(w)
        assert {r.domain for r in ranges} == {NVTX_DOMAIN}
        caps = [r for r in ranges if r.text == CAPTURE_RANGE]
        assert len(caps) == 1 and caps[0].event_type == 60
        assert all(r.pid == pid for r in ranges)
        kinds = {r.text: r.kind for r in ranges}
        group = WINDOW_RANGES[w - 1][0].split("/")[0]
        assert kinds[f"{group}/push"] == "push_pop" and kinds[f"{group}/mark"] == "mark"
        # a range ended on another thread is still a complete start/end range
        second = [r for r in ranges if r.text in window_names(w) and r.kind == "start_end"]
        assert len(second) == 2 and all(r.end_ns > r.start_ns for r in second)


def test_report_time_base_is_wall_clock(three_windows):
    pid = three_windows["info"]["pid"]
    offsets = []
    for w in (1, 2, 3):
        sq = export_sqlite(three_windows["dir"] / f"worker_{pid}.{w}.nsys-rep")
        bounds = report_time_bounds(sq)
        mark = next(r for r in read_nvtx_ranges(sq, include_marks=True) if r.kind == "mark")
        wall = three_windows["info"]["marks"][str(w)]
        assert abs(bounds.utc_epoch_ns + mark.start_ns - wall) < 20_000_000  # 20 ms
        assert bounds.start_ns <= mark.start_ns <= bounds.end_ns
        offsets.append(bounds.run_offset_ns)
    assert offsets == sorted(offsets)


def test_one_window_has_no_ordinal_suffix(one_window):
    pid = one_window["info"]["pid"]
    assert sorted(p.name for p in one_window["dir"].glob("*.nsys-rep")) == [
        f"worker_{pid}.nsys-rep"]
    ranges = read_nvtx_ranges(export_sqlite(one_window["dir"] / f"worker_{pid}.nsys-rep"),
                              include_marks=True)
    assert _texts(ranges) == window_names(1)
    assert {r.domain for r in ranges} == {NVTX_DOMAIN}


def test_ctypes_binding_records_in_domain(nsys_exe, tmp_path):
    if not any(os.path.exists(p) for p in nvtx_library_candidates() if p.startswith("/")):
        skip_or_fail("no libnvtx3interop/libnvToolsExt on this machine (setup.cfg's "
                     "nvidia-nvtx-cu12 installs it)")
    res, info = _profile_app(nsys_exe, tmp_path, 2, repeat=2,
                             app_args=["--close-from-thread", "1"],
                             env_extra={"VERLPROF_NVTX_BACKEND": "ctypes"})
    data = json.loads(info.read_text())
    assert data["backend"] == "ctypes"
    pid = data["pid"]
    for w in (1, 2):
        sq = export_sqlite(tmp_path / f"worker_{pid}.{w}.nsys-rep")
        ranges = read_nvtx_ranges(sq, include_marks=True)
        assert _texts(ranges) == window_names(w)
        assert {r.domain for r in ranges} == {NVTX_DOMAIN}


# --------------------------------------------------------------------------------- nsys_cli


def test_find_and_version(nsys_exe):
    assert os.path.isabs(nsys_exe)
    assert re.fullmatch(r"\d{4}\.\d+(\.\d+){0,2}", nsys_cli.nsys_version(nsys_exe))
    assert nsys_cli.find_nsys("definitely-not-nsys-xyz") is None
    assert nsys_cli.nsys_version("/nonexistent/nsys") is None


def test_run_nsys_rejects_shell_strings():
    with pytest.raises(TypeError):
        run_nsys("nsys --version", 5)


def test_run_nsys_timeout_kills_agent_and_app(nsys_exe, tmp_path):
    t0 = time.monotonic()
    res = run_nsys([nsys_exe, "profile", "-t", "nvtx,osrt", *NSYS_SAFE_OPTS, "-f", "true",
                    "-o", str(tmp_path / "slow"), sys.executable, "-c",
                    "import time; time.sleep(120)"], timeout_s=3)
    _MARKERS.append(res.marker)
    assert res.timed_out and res.killed
    assert time.monotonic() - t0 < 15
    assert not [a for a in list_agents() if a.owner_pid == res.pid]  # its agent is gone
    assert len(res.killed) >= 3  # CLI, agent, launcher/app at least
    assert not marked_processes(res.marker)
    for pid in res.killed:
        info = nsys_cli.proc_info(pid)
        assert info is None or info.state in ("Z", "X"), info
    # the capture stream the killed CLI held open was deleted, like nsys would have done
    assert any(re.search(r"/nsys-report-\w+\.qdstrm$", p) for p in res.removed_files)
    leftovers = [f"/tmp/nsys_termination_status_{p}" for p in res.killed] + res.removed_files
    assert not [p for p in leftovers if os.path.exists(p)]


def _orphaned_cli(nsys_exe, output: Path, marker: str, **extra_env: str):
    """An ``nsys profile`` of a sleeping app whose CLI is killed once collecting: its agent
    is left orphaned. Returns (cli pid, agents, capture streams they hold open)."""
    env = dict(os.environ, **{nsys_cli.MARKER_ENV: marker}, **extra_env)
    cli = subprocess.Popen([nsys_exe, "profile", "-t", "nvtx,osrt", *NSYS_SAFE_OPTS, "-f",
                            "true", "-o", str(output), sys.executable, "-c",
                            "import time; time.sleep(60)"], env=env, start_new_session=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        temps, mine, daemonised = set(), [], False
        deadline = time.monotonic() + 30
        while not (temps and daemonised) and time.monotonic() < deadline:
            mine = [a for a in list_agents() if a.owner_pid == cli.pid]
            temps = nsys_cli.nsys_temp_files(a.pid for a in mine)  # collecting: stream open
            # the agent double-forks: until the forks in between have exited (slow on a busy
            # machine: a full run once counted one as an agent) its chain is listed too
            daemonised = all(a.ppid not in {cli.pid, *(b.pid for b in mine)} for a in mine)
            time.sleep(0.1)
        assert temps and daemonised, "nsys never started collecting"
        assert cli.pid not in {a.owner_pid for a in nsys_cli.orphan_agents(0)}, "live: no orphan"
    finally:
        cli.kill()
        cli.wait()
    return cli.pid, mine, temps


def test_settle_marked_ends_what_an_nsys_run_left_behind_and_nothing_else(nsys_exe, tmp_path):
    """What ``run_nsys`` and docker/smoke.sh do after an nsys CLI exited: its agent, still
    there after the linger, is ended; an agent carrying another mark is left alone."""
    mine, other = uuid.uuid4().hex, uuid.uuid4().hex
    _MARKERS.extend([mine, other])
    temps: set = set()
    try:
        _, own, own_temps = _orphaned_cli(nsys_exe, tmp_path / "own", mine)
        _, foreign, foreign_temps = _orphaned_cli(nsys_exe, tmp_path / "foreign", other)
        temps |= own_temps | foreign_temps
        assert marked_processes(mine) and marked_processes(other)
        t0 = time.monotonic()
        killed = nsys_cli.settle_marked(mine, 1.0)
        assert time.monotonic() - t0 >= 1.0  # the linger came first
        assert {a.pid for a in own} <= set(killed) and not marked_processes(mine)
        assert {a.pid for a in foreign} <= set(marked_processes(other)), "another mark's ended"
        assert nsys_cli.settle_marked(mine, 1.0) == []  # nothing left: no wait, no signal
    finally:
        killed = nsys_cli.terminate_processes(
            lambda: marked_processes(mine) + marked_processes(other))
        for p in temps | {f"/tmp/nsys_termination_status_{q}" for q in killed}:
            if os.path.exists(p):
                os.unlink(p)
    assert not marked_processes(mine) and not marked_processes(other)


@dataclass
class _Orphans:
    """A run's own orphaned agent (marked with its output directory) and another job's."""

    run_dir: str
    own_cli: int
    own: list
    own_temps: set
    foreign_cli: int
    foreign: list
    foreign_temps: set


@contextlib.contextmanager
def _own_and_foreign_orphans(nsys_exe, tmp_path: Path):
    """Two ``nsys profile`` runs whose CLIs were killed: one of a verlprof run (its
    ``OWNER_ENV`` is ``tmp_path/run``), one of another job; whatever is left is ended after."""
    marker = uuid.uuid4().hex
    _MARKERS.append(marker)
    run_dir = str(tmp_path / "run")
    temps: set = set()
    try:
        foreign_cli, foreign, foreign_temps = _orphaned_cli(nsys_exe, tmp_path / "foreign",
                                                            marker)
        temps |= foreign_temps
        own_cli, own, own_temps = _orphaned_cli(nsys_exe, tmp_path / "own", marker,
                                                **{OWNER_ENV: run_dir})
        temps |= own_temps
        orphans = {a.pid for a in nsys_cli.orphan_agents(0)}
        assert {a.pid for a in foreign + own} <= orphans
        yield _Orphans(run_dir=run_dir, own_cli=own_cli, own=own, own_temps=own_temps,
                       foreign_cli=foreign_cli, foreign=foreign, foreign_temps=foreign_temps)
    finally:
        killed = nsys_cli.terminate_processes(lambda: marked_processes(marker))
        for p in temps | {f"/tmp/nsys_termination_status_{q}" for q in killed}:
            if os.path.exists(p):
                os.unlink(p)
    assert not marked_processes(marker)


def _only_own_ended(o: _Orphans) -> set:
    """The run's agent and its stream are gone, the other job's are all there; its pids."""
    assert not [a for a in list_agents() if a.owner_pid == o.own_cli]
    assert not [p for p in o.own_temps if os.path.exists(p)]  # its stream went with it
    survivors = {a.pid for a in list_agents() if a.owner_pid == o.foreign_cli}
    assert survivors == {a.pid for a in o.foreign}, "another job's agent was ended"
    assert all(os.path.exists(p) for p in o.foreign_temps)
    return survivors


def test_teardown_ends_only_its_own_orphaned_agents(nsys_exe, tmp_path):
    """Issue 30: a run's teardown (settle_profilers) ends the agent its own profiler
    orphaned, and leaves a foreign orphaned agent on the same machine (another job's nsys,
    started outside any verlprof run) alone."""
    from verlprof.runtime.teardown import Settled, settle_profilers

    with _own_and_foreign_orphans(nsys_exe, tmp_path) as o:
        settled = settle_profilers([o.own_cli], 10.0, o.run_dir)

        assert settled == Settled(ended_agents=tuple(a.pid for a in o.own))  # not a problem
        survivors = _only_own_ended(o)
        # nothing more of ours; the foreign CLI's pid alone does not make its agent ours
        assert settle_profilers([o.own_cli], 1.0, o.run_dir) == Settled()
        assert settle_profilers([o.foreign_cli], 1.0, o.run_dir) == Settled()
        assert {a.pid for a in list_agents() if a.owner_pid == o.foreign_cli} == survivors


def test_a_drivers_last_look_waits_for_the_runs_nsys_and_ends_its_orphans(nsys_exe, tmp_path):
    """The demo driver's and the verl launcher's last look (``end_late_agents``): the run's
    orphaned agent is ended, another job's left; while one of the run's nsys still runs (a
    replica's, torn down last) it waits for it, so that its agent too is gone on return."""
    from verlprof.backends.nsys.procs import owned_agents
    from verlprof.runtime.teardown import end_late_agents

    with _own_and_foreign_orphans(nsys_exe, tmp_path) as o:
        live = subprocess.Popen(
            [nsys_exe, "profile", "-t", "nvtx,osrt", *NSYS_SAFE_OPTS, "-f", "true", "-o",
             str(tmp_path / "live"), sys.executable, "-c", "import time; time.sleep(3)"],
            env=dict(os.environ, **{nsys_cli.MARKER_ENV: _MARKERS[-1], OWNER_ENV: o.run_dir}),
            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not [a for a in list_agents() if a.owner_pid == live.pid]:
            assert live.poll() is None and time.monotonic() < deadline, "no agent started"
            time.sleep(0.1)

        settled = end_late_agents(o.run_dir, wait_s=60)

        assert {a.pid for a in o.own} <= set(settled.ended_agents) and not settled.problems
        assert not owned_agents(o.run_dir)  # the live one's too: it waited
        _only_own_ended(o)
        assert live.wait(timeout=60) == 0  # its report was written, not cut
        assert (tmp_path / "live.nsys-rep").exists()


def test_collect_of_a_dead_run_ends_the_agents_its_profilers_left(nsys_exe, tmp_path, capsys):
    """A run whose driver was killed never reaches finalize, which ends the agents its nsys
    left after a clean run; CI once saw such an agent outlive a killed demo by minutes.
    ``verlprof collect`` of the dead run ends the run's own orphaned agent on this machine
    (named on its last line) and leaves another job's alone."""
    from verlprof.manifest import Manifest, write_manifest
    from verlprof.records import ProcessIdentity
    from verlprof.runtime import leftovers
    from verlprof.runtime.journal import ProcessJournal, RunJournal, write_journal
    from verlprof.runtime.run_lock import lock_path, this_process

    with _own_and_foreign_orphans(nsys_exe, tmp_path) as o:
        os.makedirs(o.run_dir)
        write_manifest(Manifest(tool="nsys", output_dir=o.run_dir, step_windows=((1,),),
                                reports=(), run_id="dead", running=True), o.run_dir)
        rank = ProcessIdentity(host=socket.gethostname(), pid=o.own_cli, under_profiler=True,
                               profiler_pid=o.own_cli)
        write_journal(RunJournal(run_id="dead", tool="nsys", output_dir=o.run_dir, processes=(
            ProcessJournal(group="actor", rank=0, identity=rank),)), o.run_dir)
        with open(lock_path(o.run_dir), "w") as handle:  # its controller: a pid that exited
            json.dump(dict(vars(this_process("dead")), pid=o.own_cli, proc_start=0), handle)
        state = leftovers.run_state(o.run_dir)[0]  # verlprof status: what collect will do
        assert state.startswith(leftovers.ENDED) and state.endswith(
            f"to place what it left and end its {len(o.own)} nsys agent(s) still running here")

        assert leftovers.run_collect(o.run_dir, 5.0) == 0  # nothing planned, nothing missing
        last = capsys.readouterr().out.splitlines()[-1]
        pids = ", ".join(str(a.pid) for a in o.own)
        assert last == f"verlprof: ended {len(o.own)} nsys agent(s) nsys left behind (pid {pids})"
        _only_own_ended(o)
        assert leftovers.run_state(o.run_dir)[0].startswith(leftovers.ENDED)  # finalized now


def test_dry_run(nsys_exe, tmp_path):
    good = [nsys_exe, "profile", *CAPTURE_OPTS, "--capture-range-end=repeat:3", "-o",
            str(tmp_path / "missing_dir" / "w_%p"), "-f", "true"]
    assert dry_run(good, timeout_s=30) is None
    assert not (tmp_path / "missing_dir").exists()
    assert dry_run(["-t", "bogus", *NSYS_SAFE_OPTS], 30) == "Illegal --trace argument 'bogus'"
    err = dry_run(["-t", "nvtx", *NSYS_SAFE_OPTS, "--capture-range-end=repeat:2"], 30)
    assert err and "--capture-range-end" in err
    assert "unrecognised option '--no-such-flag'" in dry_run(["--no-such-flag"], 30)


# ------------------------------------------------------------------------------ exporting


def test_export_sqlite_caches_and_is_concurrency_safe(one_window):
    rep = one_window["dir"] / f"worker_{one_window['info']['pid']}.nsys-rep"
    results, errors = [], []

    def go():
        try:
            results.append(export_sqlite(rep, force=True))
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=go) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(set(results)) == 1
    sq = results[0]
    assert sq == rep.with_name(rep.name.replace(".nsys-rep", ".sqlite"))
    mtime = sq.stat().st_mtime_ns
    t0 = time.monotonic()
    assert export_sqlite(rep) == sq and sq.stat().st_mtime_ns == mtime  # cached
    assert time.monotonic() - t0 < 0.5
    assert not [n for n in os.listdir(rep.parent) if ".tmp." in n]


def test_export_sqlite_truncated_report_is_a_clear_error(one_window, tmp_path):
    rep = one_window["dir"] / f"worker_{one_window['info']['pid']}.nsys-rep"
    bad = tmp_path / "truncated.nsys-rep"
    bad.write_bytes(rep.read_bytes()[: rep.stat().st_size // 2])
    t0 = time.monotonic()
    with pytest.raises(NsysExportError) as err:
        export_sqlite(bad, timeout_s=30)
    assert time.monotonic() - t0 < 20
    assert isinstance(err.value, ReportReadError)
    assert "truncated.nsys-rep" in str(err.value) and "error" in str(err.value).lower()
    assert sorted(os.listdir(tmp_path)) == ["truncated.nsys-rep"]
    with pytest.raises(NsysExportError, match="cannot export"):
        export_sqlite(tmp_path / "absent.nsys-rep")


# -------------------------------------------------------------------------- sqlite reading


def test_cpu_report_has_no_cuda_rows(one_window):
    sq = export_sqlite(one_window["dir"] / f"worker_{one_window['info']['pid']}.nsys-rep")
    assert not {"CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY"} & set(
        list_tables(sq))
    bounds = report_time_bounds(sq)
    assert bounds.utc_epoch_ns and bounds.end_ns > 0


def test_corrupt_sqlite_raises_report_read_error(one_window, tmp_path):
    sq = export_sqlite(one_window["dir"] / f"worker_{one_window['info']['pid']}.nsys-rep")
    half = tmp_path / "half.sqlite"
    half.write_bytes(sq.read_bytes()[: sq.stat().st_size // 3])
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database at all" * 10)
    for path in (half, junk, tmp_path / "absent.sqlite"):
        with pytest.raises(ReportReadError):
            read_nvtx_ranges(path)
            report_time_bounds(path)


def test_page_decoder_reads_a_real_export_as_sqlite_does(one_window):
    """Every table of an export written by nsys' own SQLite: each integer column decoded
    from the pages equals SQLite's reading; what it cannot decode exactly is refused."""
    from tests.helpers import read_columns
    from verlprof.backends.nsys.sqlite_pages import NotPlain

    sq = export_sqlite(one_window["dir"] / f"worker_{one_window['info']['pid']}.nsys-rep")
    con = sqlite3.connect(f"file:{sq}?mode=ro", uri=True)
    decoded = refused = 0
    for (table,) in con.execute("SELECT name FROM sqlite_schema WHERE type = 'table'"):
        plain = [c for _, c, _, _, _, pk in con.execute(f"PRAGMA table_info({table})")
                 if not pk and not con.execute(f"SELECT 1 FROM {table} WHERE typeof({c}) "
                                               "NOT IN ('integer', 'null') LIMIT 1").fetchone()]
        if not plain:
            continue
        try:
            got = read_columns(con, str(sq), table, plain, pages_per_chunk=3)
        except NotPlain:
            refused += 1
            continue
        want = con.execute(f"SELECT {', '.join(plain)} FROM {table} ORDER BY rowid").fetchall()
        rows = [] if got is None else list(zip(*[
            [None if null else int(v) for v, null in zip(values, nulls)]
            for values, nulls in zip(got.values, got.nulls)]))
        assert rows == want, table
        decoded += bool(want)
    assert decoded >= 3 and refused <= 2  # NVTX_EVENTS, threads, processes...


# --------------------------------------------------------------------------- waiting edges


def test_wait_for_reports_reports_missing_and_pending(tmp_path):
    empty = tmp_path / "w_1.nsys-rep"
    empty.touch()  # a report nsys started but never filled
    t0 = time.monotonic()
    res = wait_for_reports([str(tmp_path / "w_*.nsys-rep"), tmp_path / "other.nsys-rep"],
                           expected_count=2, timeout_s=1.0, poll_s=0.2)
    assert 1.0 <= time.monotonic() - t0 < 5
    assert not res.complete and res.found == []
    assert res.pending == [empty.resolve()]
    assert str(tmp_path / "other.nsys-rep") in res.missing


_DIES_IN_WINDOW = """
import os, signal, sys
from verlprof.backends.nsys import nvtx
open(sys.argv[1] + ".tmp", "w").write(str(os.getpid()))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
nvtx.capture_open()
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_wait_for_reports_ends_when_the_target_dies_inside_its_window(nsys_exe, tmp_path):
    """Two windows planned; the app dies inside the first: the wait ends soon after nsys does,
    naming the session and the target's pid, long before its deadline."""
    marker = uuid.uuid4().hex
    _MARKERS.append(marker)
    pid_file = tmp_path / "pid"
    argv = [nsys_exe, "profile", *CAPTURE_OPTS, "--capture-range-end=repeat:2", "-f", "true",
            "-o", str(tmp_path / "worker_%p"), sys.executable, "-c", _DIES_IN_WINDOW,
            str(pid_file)]
    cli = subprocess.Popen(argv, env=_app_env(**{nsys_cli.MARKER_ENV: marker}), cwd=str(REPO),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            if pid_file.exists() or cli.poll() is not None:
                break
            time.sleep(0.1)
        target = int(pid_file.read_text())
        started = time.monotonic()
        waited = wait_for_reports(str(tmp_path / "worker_*.nsys-rep"), 2, timeout_s=300,
                                  poll_s=0.2, writer=ReportWriter(cli.pid, target))
        elapsed = time.monotonic() - started
    finally:
        cli.wait(60)
    assert waited.problem is not None and elapsed < 120, (elapsed, waited)
    assert f"CLI pid {cli.pid}" in waited.problem and f"target pid {target}" in waited.problem
    assert not waited.complete
