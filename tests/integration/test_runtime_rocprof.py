"""rocprof-sys cannot run here (no AMD GPU): a stand-in executable records the argv and the
environment verlprof launches it with, then runs the worker with a sitecustomize that answers
the rocprof-sys user API and, at exit, writes the process's output as rocprof-sys names it
(``<prefix><data>-<pid>.<ext>``, one set per process covering every window). Only planned ranks
go through it, the argv is the plan's, and once the workers have exited every planned entry is
``ok`` with the process's own files (never another process's) at the plan's path."""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import sys

import pytest

from tests.integration.runtime_helpers import PHASES_OF_GROUP, run_case
from verlprof import paths
from verlprof.manifest import read_manifest
from verlprof.report.load import load

pytestmark = pytest.mark.integration

FAKE = os.path.join(os.path.dirname(__file__), "apps", "fake_rocprof_sys_python.sh")
DATA = ("metadata-{pid}.json", "perfetto-trace-{pid}.proto", "wall-clock-{pid}.json",
        "wall-clock-{pid}.txt")
"""The files the stand-in writes per process (as rocprof-sys names them, after the prefix)."""


def test_planned_ranks_run_under_rocprof_sys_and_their_output_is_collected(ray_cluster,
                                                                           tmp_path):
    out = str(tmp_path)
    plan, result = run_case(out, [
        "trainer.profiler.tool=rocprof_sys", f"+trainer.profiler.rocprof_sys.executable={FAKE}",
        "+trainer.profiler.rocprof_sys.args={trace: true, T: 'a b;c'}",
        "trainer.total_training_steps=1", "trainer.profile_steps=[1]",
        "actor_rollout_ref.actor.profile_ranks=[]", "actor_rollout_ref.rollout.profile_ranks=[]",
        "critic.profile_ranks=[1]", "critic.profile_discrete=true",
        "reward_model.profile_ranks=[0]"])
    assert [(p.group, p.rank, p.mode, len(p.windows)) for p in plan.processes] == [
        ("critic", 1, "discrete", 2), ("rm", 0, "whole", 1)]

    # launched through the stand-in with the plan's argv and environment, planned ranks only
    logs = sorted(glob.glob(os.path.join(out, ".raw", "*", "*", "fake_rocprof_argv_*.txt")))
    assert [os.path.basename(os.path.dirname(os.path.dirname(p))) for p in logs] == [
        "critic", "rm"]
    with open(logs[0]) as handle:
        argv = handle.read().splitlines()
    assert argv[:5] == [FAKE, "--trace=true", "-T", "a b;c", "--"]
    assert argv[5] == sys.executable
    with open(logs[0] + ".env") as handle:
        env = dict(line.split("=", 1) for line in handle.read().splitlines())
    assert env["ROCPROFSYS_OUTPUT_PATH"] == os.path.join(out, ".raw", "critic", "rank1")
    assert env["ROCPROFSYS_OUTPUT_PREFIX"] == "critic_rank1_"

    # the fit result carries the manifest rewritten after the workers exited: all ok
    manifest = result["manifest"]
    assert manifest == read_manifest(out).to_dict()
    pids = {(p["group"], p["rank"]): p["pid"] for p in manifest["processes"]}
    hosts = {(p["group"], p["rank"]): p["host"] for p in manifest["processes"]}
    assert len(manifest["reports"]) == len(plan.reports) == 3
    assert [(e["status"], e["reason"], e["transfer"]) for e in manifest["reports"]] == [
        ("ok", None, "rename")] * 3
    for process, log in zip(plan.processes, logs):
        target = (process.group, process.rank)
        pid = pids[target]
        # rocprof-sys-python execs the interpreter: the log's shell pid is the worker's pid
        assert log.endswith(f"_{pid}.txt")
        (planned,) = {paths.resolve_relpath(r.path, hosts[target], pid)
                      for r in process.reports}  # one output per process, for every window
        assert planned.startswith(f"step0001/{process.group}/rank{process.rank}/")
        entries = [e for e in manifest["reports"] if (e["group"], e["rank"]) == target]
        assert [e["path"] for e in entries] == [planned] * len(process.windows)
        prefix = f"{process.group}_rank{process.rank}_"
        folder = os.path.join(out, planned)
        assert sorted(os.listdir(folder)) == sorted(prefix + d.format(pid=pid) for d in DATA)
        size = sum(os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder))
        assert {e["bytes"] for e in entries} == {size}
        # the output is the process's own: every window it traced, in order, with its phases
        with open(os.path.join(folder, f"{prefix}wall-clock-{pid}.json")) as handle:
            traced = json.load(handle)
        assert traced["pid"] == pid
        if process.mode == "discrete":
            expected = [[f"{w.role}/{w.phase}"] for w in process.windows]
        else:
            expected = [PHASES_OF_GROUP[process.group]] * len(process.windows)
        assert [w["regions"] for w in traced["windows"]] == expected
        # the helper process the stand-in ran under rocprof-sys keeps its own files in .raw
        with open(log + ".child") as handle:
            child = int(handle.read())
        assert child != pid
        assert sorted(os.listdir(os.path.dirname(log))) == sorted(
            [os.path.basename(log) + s for s in ("", ".child", ".env")]
            + [prefix + d.format(pid=child) for d in DATA])

    # verlprof report: ok entries it cannot read are skipped with the reason, none missing
    loaded = load(out, read_manifest(out))
    assert [(p.kind, p.group, p.reason) for p in loaded.problems] == [
        ("skipped", e["group"], "no reader for rocprof_sys reports; open it in its own viewer")
        for e in manifest["reports"]]


def test_output_on_another_node_comes_over_ray_in_chunks(ray_cluster, tmp_path, monkeypatch):
    """The path taken when the process ran on another node, through real Ray tasks pinned to
    its node (here the same machine, named as another): its pid's files are found there, read
    in chunks, and deleted there once they arrived; another process's files stay."""
    import subprocess

    import ray

    from tests.integration.runtime_helpers import CONFIG
    from verlprof.backends.base import PENDING_AT_EXIT
    from verlprof.demo.run import plan_demo
    from verlprof.manifest import Manifest, ReportEntry
    from verlprof.runtime import collect

    out = str(tmp_path)
    _, plan, _ = plan_demo(CONFIG, [
        f"trainer.profiler.output_dir={out}", "trainer.profiler.tool=rocprof_sys",
        "trainer.profile_steps=[1]", "actor_rollout_ref.actor.profile_ranks=[]",
        "actor_rollout_ref.rollout.profile_ranks=[]", "critic.profile_ranks=[1]",
        "reward_model.profile_ranks=[]"])
    (process,) = plan.processes
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # the worker has exited
    node = ray.get_runtime_context().get_node_id()
    os.makedirs(process.raw_dir)
    names = {f"critic_rank1_perfetto-trace-{child.pid}.proto": b"0123456789",
             f"critic_rank1_wall-clock-{child.pid}.txt": b"abc",
             f"critic_rank1_wall-clock-{child.pid + 1}.txt": b"other"}
    for name, data in names.items():
        with open(os.path.join(process.raw_dir, name), "wb") as handle:
            handle.write(data)
    path = paths.resolve_relpath(process.windows[0].report.path, "vm", child.pid)
    entry = ReportEntry.of(dataclasses.replace(process.windows[0].report, path=path),
                           status="incomplete", reason=PENDING_AT_EXIT, host="vm",
                           pid=child.pid, node_id=node)
    manifest = Manifest(tool="rocprof_sys", output_dir=out, step_windows=((1,),),
                        reports=(entry,))
    monkeypatch.setattr(collect, "CHUNK_BYTES", 4)  # three chunks for the 10-byte file

    rewritten, problems = collect.collect_at_exit(manifest, plan, 30.0, "another-node")

    assert problems == []
    (done,) = rewritten.reports
    assert (done.status, done.transfer, done.bytes, done.reason) == ("ok", "ray", 13, None)
    folder = os.path.join(out, path)
    assert sorted(os.listdir(folder)) == sorted(list(names)[:2])
    with open(os.path.join(folder, list(names)[0]), "rb") as handle:
        assert handle.read() == b"0123456789"
    assert os.listdir(process.raw_dir) == [list(names)[2]]
