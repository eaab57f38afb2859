"""A run owns its output directory (verlprof/runtime/ownership.py, run_lock.py): the lock
between real processes, stale locks, the existing_run policies and their one-line refusals,
the controller's claim, and `verlprof report` on a directory holding several runs."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.unit.test_controller import Rank, plan_of, run
from verlprof import paths
from verlprof.config import size_budget
from verlprof.config.loader import load_config
from verlprof.errors import ConfigError
from verlprof.manifest import read_manifest
from verlprof.plan import build_plan
from verlprof.report import runs as report_runs
from verlprof.runtime import ownership, run_lock
from verlprof.runtime.controller import ProfileController
from verlprof.runtime.local_rpc import InProcessRanks

CONFIG = os.path.join(os.path.dirname(__file__), "..", "..", "trainer_configs",
                      "ppo_trainer.yaml")
HOST = socket.gethostname()


def disk(directory) -> dict:
    """Every file under ``directory`` with its size and mtime: what 'untouched' means."""
    out = {}
    for root, _, files in os.walk(directory):
        for name in files:
            path = os.path.join(root, name)
            stat = os.stat(path)
            out[os.path.relpath(path, directory)] = (stat.st_size, stat.st_mtime_ns)
    return out


def finished_run(tmp_path, steps=(1,)) -> dict:
    """A real (in-process) run that ends with its manifest; returns the manifest as a dict."""
    controller = ProfileController(plan_of(tmp_path, steps, ranks=(0,)), rpc=InProcessRanks(),
                                   echo=False, preflight=False, handle_signals=False)
    ranks = [Rank(0), Rank(1)]
    controller.register_group("actor_rollout_ref", ranks)
    run(controller, ranks, list(steps))
    return controller.finalize().to_dict()


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def write_lock(directory, **fields) -> None:
    holder = {"run_id": "20260101-000000-other-1", "host": HOST, "pid": os.getpid(),
              "started": "2026-01-01T00:00:00+00:00", "started_s": time.time(), **fields}
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, run_lock.LOCK_NAME), "w") as handle:
        json.dump(holder, handle)


# -- run ids and the lock --------------------------------------------------------------------


def test_run_id_is_time_host_pid_and_one_safe_path_segment():
    import datetime

    now = datetime.datetime(2026, 11, 23, 16, 50, 12, tzinfo=datetime.timezone.utc)
    run_id = ownership.new_run_id(host="node 1/../x", pid=4242, now=now)
    assert run_id.startswith("20261123-165012-node_1_.._x-4242")
    assert paths.sanitize(run_id) == run_id and "/" not in run_id
    assert ownership.new_run_id() != ownership.new_run_id()  # same process, same second


def test_the_lock_names_its_holder_and_goes_with_the_run(tmp_path):
    plan = plan_of(tmp_path, [1])
    run = ownership.claim_output(plan)
    holder = json.loads((tmp_path / run_lock.LOCK_NAME).read_text())
    assert (holder["run_id"], holder["host"], holder["pid"]) == (run.run_id, HOST, os.getpid())
    assert holder["started"].endswith("+00:00")
    run.release()
    run.release()  # idempotent
    assert not (tmp_path / run_lock.LOCK_NAME).exists()


def _race(directory, barrier, results, n):
    barrier.wait()
    holder, _ = run_lock.acquire(directory, run_lock.this_process(f"racer-{n}"))
    results.put((n, holder is None))
    barrier.wait()  # hold the lock until every racer has tried


def test_of_processes_racing_for_one_directory_exactly_one_gets_it(tmp_path):
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(4), ctx.Queue()
    racers = [ctx.Process(target=_race, args=(str(tmp_path), barrier, results, n))
              for n in range(4)]
    for racer in racers:
        racer.start()
    outcome = dict(results.get(timeout=60) for _ in racers)
    for racer in racers:
        racer.join(60)
    assert sorted(outcome.values()) == [False, False, False, True]
    winner = next(n for n, won in outcome.items() if won)
    assert run_lock.read_lock(str(tmp_path)).run_id == f"racer-{winner}"


def test_a_lock_held_by_another_live_process_refuses_naming_its_host_and_pid(tmp_path):
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        write_lock(tmp_path, pid=other.pid, run_id="20261123-165000-h-1")
        before = disk(tmp_path)
        with pytest.raises(ConfigError) as info:
            ownership.claim_output(plan_of(tmp_path, [1]), policy="refuse")
        message = str(info.value)
        assert message.startswith("trainer.profiler.output_dir: ")
        assert f"host {HOST}, pid {other.pid}" in message and "20261123-165000-h-1" in message
        assert "trainer.profiler.existing_run=new_subdir" in message and "\n" not in message
        assert disk(tmp_path) == before
    finally:
        other.kill()
        other.wait()


def test_a_stale_lock_of_a_dead_pid_on_this_host_is_taken_over_with_a_warning(tmp_path):
    pid = dead_pid()
    write_lock(tmp_path, pid=pid)
    run = ownership.claim_output(plan_of(tmp_path, [1]))
    assert run_lock.read_lock(str(tmp_path)).run_id == run.run_id
    assert any(f"pid {pid} is not running" in note for note in run.notes)
    run.release()


def test_a_lock_of_another_host_is_refused_until_it_is_older_than_the_bound(tmp_path):
    write_lock(tmp_path, host="other-node", pid=1)
    with pytest.raises(ConfigError, match="host other-node, pid 1"):
        ownership.claim_output(plan_of(tmp_path, [1]), policy="reuse")
    write_lock(tmp_path, host="other-node", pid=1,
               started_s=time.time() - run_lock.OTHER_HOST_STALE_S - 60)
    run = ownership.claim_output(plan_of(tmp_path, [1]))
    assert "another host" in " ".join(run.notes)
    run.release()


# -- a directory that holds another run ------------------------------------------------------


def test_a_run_started_where_another_finished_moves_it_aside_into_its_run_id(tmp_path):
    first = finished_run(tmp_path)
    (tmp_path / "summary").mkdir()
    (tmp_path / "summary" / "summary.csv").write_text("its summary")
    (tmp_path / "notes.txt").write_text("a user's own file")
    before = disk(tmp_path)
    with ownership.claim_output(plan_of(tmp_path, [2])) as second:  # the default policy
        assert second.output_dir == str(tmp_path) and second.plan.output_dir == str(tmp_path)
        aside = tmp_path / first["run_id"]
        assert f"run {first['run_id']} moved to {aside}" in second.notes[0]
    moved = disk(aside)
    assert moved == {k: v for k, v in before.items() if k != "notes.txt"}  # renamed, as is
    assert (tmp_path / "notes.txt").exists() and not (tmp_path / "manifest.json").exists()
    assert read_manifest(str(aside)).run_id == first["run_id"]  # its paths hold there
    for entry in read_manifest(str(aside)).reports:
        assert entry.status != "ok" or os.path.exists(aside / entry.path)
    found = report_runs.find_runs(str(tmp_path))
    assert [r.run_id for r in found] == [first["run_id"]]


def test_reports_without_a_manifest_move_aside_under_a_previous_name(tmp_path):
    report = tmp_path / "step0001" / "actor_rollout_ref" / "rank0" / "r.pt.trace.json.gz"
    report.parent.mkdir(parents=True)
    report.write_bytes(b"x")
    with ownership.claim_output(plan_of(tmp_path, [1])) as run:
        assert "1 report file(s) that no manifest lists" in run.notes[0]
    (aside,) = [p for p in tmp_path.iterdir() if p.name.startswith("previous-")]
    assert (aside / "step0001" / "actor_rollout_ref" / "rank0" / "r.pt.trace.json.gz").exists()


def test_a_finished_run_in_the_directory_is_refused_in_one_line_and_left_untouched(tmp_path):
    first = finished_run(tmp_path)
    assert first["run_id"] and not (tmp_path / run_lock.LOCK_NAME).exists()
    before = disk(tmp_path)
    with pytest.raises(ConfigError) as info:
        ownership.claim_output(plan_of(tmp_path, [2]), policy="refuse")
    message = str(info.value)
    assert f"run {first['run_id']} (host {HOST}, written {first['created']})" in message
    assert "existing_run=new_subdir" in message and "existing_run=reuse" in message
    assert "\n" not in message and disk(tmp_path) == before


def test_reports_without_a_manifest_count_as_a_run(tmp_path):
    report = tmp_path / "step0001" / "actor_rollout_ref" / "rank0" / "r.pt.trace.json.gz"
    report.parent.mkdir(parents=True)
    report.write_bytes(b"x")
    (tmp_path / "notes.txt").write_text("a user's own file")
    with pytest.raises(ConfigError, match="1 report file.s. that no manifest lists"):
        ownership.claim_output(plan_of(tmp_path, [1]), policy="refuse")
    assert ownership.existing_run(str(tmp_path / "step0001")) is None  # other files: no run


def test_new_subdir_writes_the_next_run_beside_the_first_and_moves_nothing(tmp_path):
    first = finished_run(tmp_path)
    before = disk(tmp_path)
    cfg = load_config(CONFIG, [f"trainer.profiler.output_dir={tmp_path}",
                               "trainer.profiler.tool=torch",
                               "trainer.profiler.existing_run=new_subdir"])
    plan = build_plan(cfg.profiling, cfg.topology)
    assert plan.policy.existing_run == "new_subdir"
    with ownership.claim_output(plan) as run:
        assert run.output_dir == os.path.join(str(tmp_path), run.run_id)
        assert run.plan.output_dir == run.output_dir
        assert all(p.raw_dir.startswith(run.output_dir + "/") for p in run.plan.processes)
        assert first["run_id"] in run.notes[0] and run.output_dir in run.notes[0]
        assert os.path.exists(os.path.join(run.output_dir, run_lock.LOCK_NAME))
    assert {k: v for k, v in disk(tmp_path).items()} == before  # its own lock went with it


def test_new_subdir_beside_a_run_still_going(tmp_path):
    with ownership.claim_output(plan_of(tmp_path, [1])) as first:
        second = ownership.claim_output(plan_of(tmp_path, [1]), policy="new_subdir")
        assert second.output_dir == os.path.join(str(tmp_path), second.run_id)
        assert "in use by run " + first.run_id in second.notes[0]
        second.release()


def _claim_in_child(directory, results):
    try:
        ownership.claim_output(plan_of(directory, [1]), policy="reuse")
        results.put("claimed")
    except ConfigError as err:
        results.put(str(err))


def test_reuse_writes_into_the_directory_with_a_warning_but_never_beside_a_live_run(tmp_path):
    finished_run(tmp_path)
    with ownership.claim_output(plan_of(tmp_path, [1]), policy="reuse") as run:
        assert run.output_dir == str(tmp_path) and "manifest is replaced" in run.notes[0]
        ctx = multiprocessing.get_context("fork")  # another process: another pid
        results = ctx.Queue()
        child = ctx.Process(target=_claim_in_child, args=(str(tmp_path), results))
        child.start()
        message = results.get(timeout=60)
        child.join(60)
        assert f"in use by run {run.run_id} (host {HOST}, pid {os.getpid()}" in message


def test_retarget_is_the_plan_built_for_that_directory(tmp_path, monkeypatch):
    # the auto size budget reads free space at each load: the same figure for both (another
    # test writing files between the two loads changed it)
    monkeypatch.setattr(size_budget, "free_bytes", lambda d: (64 << 30, str(tmp_path)))
    overrides = ["trainer.profile_steps=[1,2]", "critic.profile_ranks=[0]"]
    a = load_config(CONFIG, [*overrides, f"trainer.profiler.output_dir={tmp_path}/a"])
    b = load_config(CONFIG, [*overrides, f"trainer.profiler.output_dir={tmp_path}/a/run-1"])
    plan_a = build_plan(a.profiling, a.topology)
    assert plan_a.controller.launch_argv  # nsys --output paths move too
    assert ownership.retarget(plan_a, f"{tmp_path}/a/run-1") == build_plan(b.profiling,
                                                                          b.topology)


def test_profiling_off_claims_nothing_and_never_replaces_a_manifest(tmp_path):
    finished_run(tmp_path)
    off = ownership.claim_output(plan_of(tmp_path, []))
    assert not off.owner and not off.writes_manifest
    assert ownership.claim_output(plan_of(tmp_path / "empty", [])).writes_manifest


# -- the controller ---------------------------------------------------------------------------


def test_the_controller_records_its_run_id_and_adopts_a_claim_handed_down(tmp_path, monkeypatch):
    manifest = finished_run(tmp_path / "a")
    assert read_manifest(str(tmp_path / "a")).run_id == manifest["run_id"]
    plan = plan_of(tmp_path / "b", [1])
    claim = ownership.claim_output(plan)
    monkeypatch.setenv(ownership.RUN_ENV, claim.env()[ownership.RUN_ENV])
    ownership._HELD.clear()  # as in the controller actor: only the environment tells
    adopted = ownership.adopt_or_claim(plan)
    assert (adopted.run_id, adopted.owner) == (claim.run_id, False)
    adopted.release()
    assert run_lock.read_lock(str(tmp_path / "b")).run_id == claim.run_id  # the driver's
    claim.release()


def test_a_second_controller_on_a_finished_run_is_refused_before_any_rank_is_asked(tmp_path):
    finished_run(tmp_path)
    plan = plan_of(tmp_path, [2])
    plan = plan.from_dict({**plan.to_dict(),
                           "policy": {**plan.to_dict()["policy"], "existing_run": "refuse"}})
    with pytest.raises(ConfigError, match="trainer.profiler.output_dir: .* already holds"):
        ProfileController(plan, rpc=InProcessRanks(), echo=False,
                          preflight=False, handle_signals=False)


# -- verlprof report on several runs ----------------------------------------------------------


def test_report_finds_each_run_and_the_reports_no_manifest_lists(tmp_path, capsys):
    first = finished_run(tmp_path)
    sub = tmp_path / "20990101-000000-x-1"
    second = finished_run(sub)
    orphan = tmp_path / "step0009" / "actor_rollout_ref" / "rank0" / "lost.pt.trace.json.gz"
    orphan.parent.mkdir(parents=True)
    orphan.write_bytes(b"x")
    found = report_runs.find_runs(str(tmp_path))
    assert [r.run_id for r in found] == [first["run_id"], second["run_id"]]
    assert report_runs.unlisted_reports(str(tmp_path), found) == [
        os.path.relpath(orphan, tmp_path)]
    seen = []
    args = argparse.Namespace(output_dir=str(tmp_path), run=None)
    assert report_runs.report_runs(args, lambda a: seen.append(a.output_dir) or 0) is None
    out, err = capsys.readouterr()  # its own run, the newest, as one run; the other named
    assert f"also keeps 1 other run(s) ({second['run_id']})" in err and "--run ID" in err
    assert "1 report file(s)" in err and "lost.pt.trace.json.gz" in err
    os.remove(tmp_path / paths.MANIFEST_NAME)  # no run of its own: each on its own
    assert report_runs.report_runs(args, lambda a: seen.append(a.output_dir) or 0) == 0
    assert seen == [str(sub)]
    seen.clear()
    finished_run(tmp_path / "20990101-000000-x-2")
    assert report_runs.report_runs(args, lambda a: seen.append(a.output_dir) or 0) == 0
    assert seen == [str(sub), str(tmp_path / "20990101-000000-x-2")]
    assert "holds 2 runs" in capsys.readouterr().out
    seen.clear()
    seen.clear()
    one = argparse.Namespace(output_dir=str(tmp_path), run=second["run_id"])
    assert report_runs.report_runs(one, lambda a: seen.append(a.output_dir) or 0) == 0
    assert seen == [str(sub)]
    wrong = argparse.Namespace(output_dir=str(tmp_path), run="nope")
    assert report_runs.report_runs(wrong, lambda a: 0) == 2
    assert f"no run nope in {tmp_path}; runs there: {second['run_id']}" in \
        capsys.readouterr().err
    single = argparse.Namespace(output_dir=str(sub), run=None)
    assert report_runs.report_runs(single, lambda a: 0) is None  # one run: as before


def test_verlprof_plan_says_what_a_run_started_now_would_meet(tmp_path, capsys):
    from verlprof.cli import main

    first = finished_run(tmp_path)
    capsys.readouterr()
    argv = ["plan", "--config", CONFIG, f"trainer.profiler.output_dir={tmp_path}"]
    assert main(argv) == 0
    assert (f"note: {tmp_path} holds the manifest of run {first['run_id']} (host {HOST}, "
            f"written {first['created']}); with trainer.profiler.existing_run=move_aside a run "
            "started now moves it into <output_dir>/<its run id>/ and writes into "
            "<output_dir>") in " ".join(capsys.readouterr().out.split())
    assert main([*argv[:3], f"trainer.profiler.output_dir={tmp_path / 'new'}"]) == 0
    assert "note:" not in capsys.readouterr().out


def test_the_verl_launcher_refuses_in_one_line_before_verl_starts_anything(tmp_path, capsys):
    from omegaconf import OmegaConf

    from verlprof.bridges.verl.launch import wrap_run_ppo

    first = finished_run(tmp_path)
    config = OmegaConf.load(CONFIG)
    OmegaConf.update(config, "trainer.profiler.output_dir", str(tmp_path))
    OmegaConf.update(config, "trainer.profiler.existing_run", "refuse")
    started = []
    with pytest.raises(SystemExit) as info:
        wrap_run_ppo(lambda *args, **kwargs: started.append(args))(config, None)
    err = capsys.readouterr().err
    assert info.value.code == 2 and not started
    assert err.startswith("verlprof: trainer.profiler.output_dir: ") and err.count("\n") == 1
    assert first["run_id"] in err


@pytest.mark.parametrize("ends", ["returns", "interrupted"])
def test_the_verl_launcher_looks_for_late_agents_and_waits_only_after_a_clean_end(
        tmp_path, monkeypatch, ends):
    """After ``run_ppo`` the launcher ends the run's late nsys agents on this node (a
    replica's, whose server went last), waiting for its nsys still running; after an error
    or ^C it looks once and does not wait."""
    from omegaconf import OmegaConf

    from verlprof.bridges.verl import launch
    from verlprof.runtime.teardown import LATE_AGENTS_WAIT_S, Settled

    config = OmegaConf.load(CONFIG)
    OmegaConf.update(config, "trainer.profiler.output_dir", str(tmp_path))
    OmegaConf.update(config, "trainer.profile_steps", None)
    looks = []
    monkeypatch.setattr(launch, "end_late_agents",
                        lambda owner, wait_s: looks.append((owner, wait_s)) or Settled())

    class TaskRunner:  # verl's, never started: run_ppo here only returns or is interrupted
        def run(self, config):
            return None

    def run_ppo(*args, **kwargs):
        if ends == "interrupted":
            raise KeyboardInterrupt
        return "fit done"

    if ends == "interrupted":
        with pytest.raises(KeyboardInterrupt):
            launch.wrap_run_ppo(run_ppo)(config, TaskRunner)
    else:
        assert launch.wrap_run_ppo(run_ppo)(config, TaskRunner) == "fit done"
    assert looks == [(str(tmp_path), 0.0 if ends == "interrupted" else LATE_AGENTS_WAIT_S)]


def test_a_run_that_ends_by_an_error_before_any_manifest_still_leaves_one(tmp_path):
    """SIGTERM in start-up (the controller killed before its step loop) used to leave only
    its 1 MiB reserve: ``verlprof report`` said 'no manifest here'. The claim's end writes one
    with every planned report missing and why, and frees the reserve; a clean end, or a run
    whose controller wrote a manifest, is left as it is."""
    from verlprof.runtime.signals import ProfilingTerminated

    plan = plan_of(tmp_path, [1, 2])
    (tmp_path / paths.RESERVE_NAME).write_bytes(b"\0" * 1024)  # the controller's, left behind
    with pytest.raises(ProfilingTerminated), ownership.claim_output(plan) as run:
        raise ProfilingTerminated(signal.SIGTERM)
    manifest = read_manifest(str(tmp_path))
    assert manifest.run_id == run.run_id and not manifest.running
    assert [(e.steps, e.status) for e in manifest.reports] == [
        (r.steps, "missing") for r in plan.reports] and manifest.reports
    why = "the run ended before any window's report was placed (received SIGTERM)"
    assert {e.reason for e in manifest.reports} == {f"window never opened: {why}"}
    assert manifest.warnings == (why,)
    assert sorted(os.listdir(tmp_path)) == ["manifest.json"]  # no reserve, no lock

    clean = tmp_path / "clean"
    with ownership.claim_output(plan_of(clean, [1])):
        pass
    assert not (clean / "manifest.json").exists()
