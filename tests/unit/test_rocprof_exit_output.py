"""rocprof-sys writes one set of files per process when it exits: the plan gives every window
of a process that one path, finalize records the windows as pending, and collection after the
workers exit takes the files of that pid only and rewrites the entries ``ok``. No Ray here:
everything runs on this node."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

from verlprof.backends import get_backend
from verlprof.backends.base import PENDING_AT_EXIT, OpenedWindow
from verlprof.backends.rocprof_sys.capture import RocprofCapture
from verlprof.backends.rocprof_sys.output import files_of_pid, is_output_of
from verlprof.config.schema import (
    ComponentConfig,
    ComponentsConfig,
    ProfilingConfig,
    RocprofSysConfig,
)
from verlprof.config.topology import Topology
from verlprof.manifest import Manifest, ReportEntry
from verlprof.plan import build_plan
from verlprof.runtime.collect import collect_at_exit

CPU = Topology.of({"actor_rollout_ref": 2, "critic": 2, "rm": 1}, cuda=False)


def plan_of(tmp_path, tool="rocprof_sys", steps=(1, 3), env=None):
    critic = ComponentConfig((1,), False, True, "critic.profile_ranks", "critic.profile_discrete")
    rm = ComponentConfig((0,), False, False, "reward_model.profile_ranks",
                         "reward_model.profile_discrete")
    return build_plan(ProfilingConfig(
        steps=steps, tool=tool, output_dir=str(tmp_path),
        components=ComponentsConfig(critic=critic, rm=rm),
        rocprof_sys=RocprofSysConfig(env=env or {})), CPU)


def touch(path, data=b"x"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(data)


def exited_pid() -> int:
    """The pid of a process that has exited (as a worker has when collection runs)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_pid_matches_only_its_own_files():
    assert is_output_of("critic_rank1_perfetto-trace-634.proto", "critic_rank1_", 634)
    assert is_output_of("critic_rank1_wall-clock-634.json", "critic_rank1_", 634)
    assert not is_output_of("critic_rank1_perfetto-trace-6345.proto", "critic_rank1_", 634)
    assert not is_output_of("critic_rank1_perfetto-trace-1634.proto", "critic_rank1_", 634)
    assert not is_output_of("critic_rank0_perfetto-trace-634.proto", "critic_rank1_", 634)
    assert not is_output_of("critic_rank1_wall-clock-12.634.json", "critic_rank1_", 634)
    assert not is_output_of("critic_rank1_perfetto-trace.proto", "critic_rank1_", 634)
    assert not is_output_of("fake_rocprof_argv_634.txt", "critic_rank1_", 634)


def test_files_of_a_pid_at_the_top_and_in_a_timestamp_directory(tmp_path):
    for name in ("p_wall-clock-7.txt", "p_perfetto-trace-7.proto", "p_wall-clock-77.txt",
                 "2026-11-23_16.50/p_wall-clock-7.json", "2026-11-23_16.50/p_metadata-8.json",
                 "a/b/p_wall-clock-7.txt"):  # two levels down: not rocprof-sys's layout
        touch(str(tmp_path / name))
    os.symlink("/etc/passwd", tmp_path / "p_metadata-7.json")
    assert files_of_pid(str(tmp_path), "p_", 7) == [
        "2026-11-23_16.50/p_wall-clock-7.json", "p_perfetto-trace-7.proto", "p_wall-clock-7.txt"]
    assert files_of_pid(str(tmp_path / "absent"), "p_", 7) == []


def test_the_plan_names_one_output_per_process_for_all_its_windows(tmp_path):
    plan = plan_of(tmp_path)
    critic, rm = plan.process("critic", 1), plan.process("rm", 0)
    assert len(critic.windows) == 4 and len(rm.windows) == 2
    assert {r.path for r in critic.reports} == {
        "step0001-0003/critic/rank1/critic_step1-3_rank1_{host}_{pid}.rocprof-sys"}
    assert {r.path for r in rm.reports} == {
        "step0001-0003/rm/rank0/rm_step1-3_rank0_{host}_{pid}.rocprof-sys"}
    # each window keeps its own identity (steps, phase); only the file is shared
    assert [(r.steps, r.phase) for r in critic.reports] == [
        ((1,), "compute_values"), ((1,), "update_critic"), ((3,), "compute_values"),
        ((3,), "update_critic")]
    # the other backends still write one report per window
    nsys = plan_of(tmp_path, tool="nsys").process("critic", 1)
    assert len({r.path for r in nsys.reports}) == 4


def test_finalize_reports_opened_windows_pending_and_unopened_missing(tmp_path):
    process = plan_of(tmp_path).process("rm", 0)
    capture = RocprofCapture(process)
    first, second = process.windows
    (pending, missing) = capture.collect([OpenedWindow(first, 5, 9)], [second], 1.0)
    assert (pending.status, pending.reason, pending.raw_path) == (
        "incomplete", PENDING_AT_EXIT, None)
    assert (pending.window_start_ns, pending.window_end_ns) == (5, 9)
    assert missing.status == "missing" and "never started" in missing.reason


def entries_of(plan, pids, status="incomplete", reason=PENDING_AT_EXIT):
    out = []
    for process in plan.processes:
        pid = pids[(process.group, process.rank)]
        for window in process.windows:
            path = window.report.path.replace("{host}", "vm").replace("{pid}", str(pid))
            out.append(ReportEntry.of(dataclasses.replace(window.report, path=path),
                                      status=status, reason=reason, host="vm", pid=pid,
                                      window_start_ns=1, window_end_ns=2))
    return out


def test_pending_entries_become_ok_with_the_processs_own_files(tmp_path):
    plan = plan_of(tmp_path, env={"ROCPROFSYS_OUTPUT_PREFIX": "mine_"})
    critic, rm = plan.process("critic", 1), plan.process("rm", 0)
    assert get_backend("rocprof_sys").output_at_exit
    pid, other = exited_pid(), exited_pid()
    pids = {("critic", 1): pid, ("rm", 0): other}
    entries = entries_of(plan, pids)
    entries[5] = dataclasses.replace(entries[5], status="missing", reason="never opened")
    manifest = Manifest(tool="rocprof_sys", output_dir=str(tmp_path), step_windows=((1,), (3,)),
                        reports=tuple(entries), warnings=("kept",))
    raw = critic.raw_dir
    touch(os.path.join(raw, f"mine_perfetto-trace-{pid}.proto"), b"12345")
    touch(os.path.join(raw, f"mine_wall-clock-{pid}.txt"), b"123")
    touch(os.path.join(raw, f"mine_wall-clock-{other}.txt"))  # another process's output
    touch(os.path.join(raw, f"critic_rank1_wall-clock-{pid}.txt"))  # not this prefix
    # rm wrote nothing: its entries say so and name the process

    rewritten, problems = collect_at_exit(manifest, plan, 5.0, "")

    target = entries[0].path
    assert sorted(os.listdir(tmp_path / target)) == [f"mine_perfetto-trace-{pid}.proto",
                                                       f"mine_wall-clock-{pid}.txt"]
    assert sorted(os.listdir(raw)) == [f"critic_rank1_wall-clock-{pid}.txt",
                                       f"mine_wall-clock-{other}.txt"]
    assert [(e.path, e.status, e.reason, e.bytes, e.transfer)
            for e in rewritten.reports[:4]] == [(target, "ok", None, 8, "rename")] * 4
    assert [(e.window_start_ns, e.phase) for e in rewritten.reports[:4]] == [
        (1, w.phase) for w in critic.windows]
    reason = (f"no output of pid {other} in {rm.raw_dir} after the process exited (it is "
              "written at a normal exit)")
    assert [(e.status, e.reason) for e in rewritten.reports[4:]] == [
        ("missing", reason), ("missing", "never opened")]
    assert problems == [f"rm rank 0: {reason}"]
    assert rewritten.warnings == ("kept", problems[0])
    assert dataclasses.replace(rewritten, reports=manifest.reports,
                               warnings=manifest.warnings) == manifest


def test_nothing_pending_leaves_the_manifest_as_it_is(tmp_path):
    plan = plan_of(tmp_path)
    pids = {("critic", 1): exited_pid(), ("rm", 0): exited_pid()}
    manifest = Manifest(tool="rocprof_sys", output_dir=str(tmp_path), step_windows=((1,), (3,)),
                        reports=tuple(entries_of(plan, pids, status="missing", reason="gone")))
    assert collect_at_exit(manifest, plan, 5.0, "") == (manifest, [])
    nsys = plan_of(tmp_path, tool="nsys")
    assert collect_at_exit(manifest, nsys, 5.0, "")[0] is manifest


def test_a_process_still_running_stays_incomplete_and_its_files_stay(tmp_path):
    plan = plan_of(tmp_path)
    pids = {("critic", 1): os.getpid(), ("rm", 0): exited_pid()}
    touch(os.path.join(plan.process("critic", 1).raw_dir,
                       f"critic_rank1_wall-clock-{os.getpid()}.txt"))
    manifest = Manifest(tool="rocprof_sys", output_dir=str(tmp_path), step_windows=((1,), (3,)),
                        reports=tuple(entries_of(plan, pids)))
    rewritten, problems = collect_at_exit(manifest, plan, 0.3, "")
    assert {(e.status, e.reason) for e in rewritten.reports[:4]} == {(
        "incomplete", f"pid {os.getpid()} was still running after 0.3s; its output is "
        "written when it exits")}
    assert not os.path.exists(tmp_path / rewritten.reports[0].path)
    assert len(problems) == 2
