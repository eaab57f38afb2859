"""Collection on this node (no Ray): each worker report reaches its contract path under
output_dir, or its manifest entry says why not; one bad report never loses the others."""

from __future__ import annotations

import dataclasses
import os

import pytest

from verlprof.config.schema import ComponentConfig, ComponentsConfig, ProfilingConfig
from verlprof.config.topology import Topology
from verlprof.plan import build_plan
from verlprof.records import ProcessIdentity, ReportIdentity, WorkerReport
from verlprof.runtime import collect
from verlprof.runtime.collect import (
    move_all,
    move_report,
    partial_reports,
    unreachable_reports,
)
from verlprof.storage import stamp_of

HERE = ProcessIdentity(host="node-a", pid=4242)


def item(raw, path="step0001/critic/rank0/critic_step1_{host}_{pid}.nsys-rep", *, size=None,
         rank=0, status="ok", where=HERE):
    """A worker's record of one report whose raw file is ``raw``."""
    return WorkerReport(
        report=ReportIdentity(steps=(1,), group="critic", rank=rank, component="critic",
                              backend="nsys", path=path),
        status=status, raw_path=str(raw) if raw else None,
        bytes=os.path.getsize(raw) if size is None and raw else size or 0, where=where,
        window_start_ns=10, window_end_ns=20)


def raw_file(tmp_path, name="critic_rank0_4242.1.nsys-rep", data=b"report"):
    raw = tmp_path / ".raw" / name
    raw.parent.mkdir(parents=True, exist_ok=True)
    raw.write_bytes(data)
    return raw


def files(root):
    return sorted(os.path.relpath(os.path.join(d, f), root)
                  for d, _, fs in os.walk(root) for f in fs)


def test_a_report_on_this_node_is_renamed_to_its_contract_path(tmp_path):
    raw = raw_file(tmp_path)
    entry = move_report(item(raw), str(tmp_path), "node-id", None)
    assert (entry.status, entry.transfer, entry.bytes, entry.reason) == ("ok", "rename", 6, None)
    assert entry.path == "step0001/critic/rank0/critic_step1_node-a_4242.nsys-rep"
    assert (entry.host, entry.pid, entry.window_start_ns, entry.window_end_ns) == (
        "node-a", 4242, 10, 20)
    assert files(tmp_path) == [entry.path] and (tmp_path / entry.path).read_bytes() == b"report"


ELSEWHERE = ProcessIdentity(host="node-b", pid=4242, node_id="node-b-id")


def test_a_report_of_another_node_on_one_shared_file_system_is_renamed_where_it_is(tmp_path):
    """The worker stamped its raw file and this node sees that very file: no byte travels."""
    raw = raw_file(tmp_path)
    report = dataclasses.replace(item(raw, where=ELSEWHERE), stamp=stamp_of(str(raw)))
    entry = move_report(report, str(tmp_path), "node-a-id", None)  # no actor: Ray is not asked
    assert (entry.status, entry.transfer, entry.bytes, entry.node_id) == (
        "ok", "shared", 6, "node-b-id")
    assert files(tmp_path) == [entry.path] and not raw.exists()


class Worker:
    """The worker actor's ``verlprof_discard`` as a Ray actor method: calls recorded."""

    def __init__(self):
        self.discarded = []
        self.verlprof_discard = self

    def remote(self, path):
        self.discarded.append(path)


@pytest.mark.parametrize("stamp", [None, "other file"])
def test_a_report_of_another_node_not_seen_as_the_same_file_travels_over_ray(
        tmp_path, monkeypatch, stamp):
    """A same-named file here that is not the stamped one (a node's own disk), or no stamp:
    read from the worker, deleted there once whole, and the file here is left alone."""
    raw = raw_file(tmp_path)
    theirs = None if stamp is None else dataclasses.replace(
        stamp_of(str(raw)), mtime_ns=stamp_of(str(raw)).mtime_ns + 1)
    asked = []

    def reader(actor, path):  # the worker's chunked read (a Ray actor call in the product)
        def read(offset):
            asked.append((actor, path, offset))
            return b"theirs"[offset:]
        return read

    monkeypatch.setattr(collect, "_actor_reader", reader)
    worker = Worker()
    entry = move_report(dataclasses.replace(item(raw, where=ELSEWHERE), stamp=theirs),
                        str(tmp_path), "node-a-id", worker)
    assert (entry.status, entry.transfer) == ("ok", "ray") and asked[0] == (worker, str(raw), 0)
    assert (tmp_path / entry.path).read_bytes() == b"theirs" and raw.read_bytes() == b"report"
    assert worker.discarded == [str(raw)]


def test_a_report_of_a_process_that_is_gone_is_read_and_deleted_by_its_node(tmp_path,
                                                                           monkeypatch):
    """No actor (``verlprof collect --address`` after the job died): a task pinned to the
    report's node reads it in chunks, and deletes it there once it arrived whole."""
    raw = raw_file(tmp_path)
    asked = []

    def on_node(func, node, *args, timeout_s=60.0):
        asked.append((func.__name__, node, *args))
        return func is collect.read_chunk and b"theirs"[args[2]:] or 1

    monkeypatch.setattr(collect, "on_node", on_node)
    entry = move_report(item(raw, where=ELSEWHERE), str(tmp_path), "node-a-id", None)
    assert (entry.status, entry.transfer, entry.bytes) == ("ok", "ray", 6)
    assert (tmp_path / entry.path).read_bytes() == b"theirs"
    where, name = str(raw.parent), raw.name
    assert asked == [("read_chunk", "node-b-id", where, name, 0, collect.CHUNK_BYTES),
                     ("discard", "node-b-id", where, [name])]


def test_a_report_directory_is_copied_whole(tmp_path):
    raw = tmp_path / ".raw" / "run.rocprof-sys"
    (raw / "sub").mkdir(parents=True)
    (raw / "a.proto").write_bytes(b"12345")
    (raw / "sub" / "b.json").write_bytes(b"67")
    entry = move_report(item(raw, "step0001/critic/rank0/r.rocprof-sys", size=7),
                        str(tmp_path), "", None)
    assert (entry.status, entry.bytes) == ("ok", 7)
    assert files(tmp_path / entry.path) == ["a.proto", "sub/b.json"]


@pytest.mark.parametrize("size, arrived", [(10, 6), (3, 6)])
def test_a_size_other_than_the_worker_saw_is_incomplete(tmp_path, size, arrived):
    entry = move_report(item(raw_file(tmp_path), size=size), str(tmp_path), "", None)
    assert (entry.status, entry.bytes) == ("incomplete", arrived)
    assert entry.reason == f"{arrived} of {size} bytes arrived"


def test_an_empty_report_is_incomplete(tmp_path):
    entry = move_report(item(raw_file(tmp_path, data=b""), size=0), str(tmp_path), "", None)
    assert (entry.status, entry.reason) == ("incomplete", "0 of 0 bytes arrived")


@pytest.mark.parametrize("path", ["../escaped.nsys-rep", "/etc/escaped.nsys-rep",
                                  "step0001/../../escaped.nsys-rep", "step0001/./x.nsys-rep",
                                  "", "step0001"])
def test_a_path_outside_output_dir_or_not_normal_is_refused(tmp_path, path):
    out = tmp_path / "out"
    (out / "step0001").mkdir(parents=True)
    raw = raw_file(tmp_path)
    entry = move_report(item(raw, path), str(out), "", None)
    assert entry.status == "missing" and entry.transfer is None
    assert entry.reason.startswith(f"could not collect {raw}: ")
    assert "\n" not in entry.reason
    assert raw.exists() and files(out) == []  # nothing moved, nothing written anywhere
    assert not (tmp_path / "escaped.nsys-rep").exists()


def test_a_missing_report_stays_missing_with_its_reason(tmp_path):
    gone = WorkerReport(report=item(None).report, status="missing", reason="window never "
                        "opened: step(s) [1] were never started", where=HERE)
    entry = move_report(gone, str(tmp_path), "", None)
    assert (entry.status, entry.reason, entry.bytes, entry.transfer) == (
        "missing", "window never opened: step(s) [1] were never started", 0, None)
    assert entry.path == "step0001/critic/rank0/critic_step1_node-a_4242.nsys-rep"


def test_one_failure_does_not_lose_the_others(tmp_path):
    good = [raw_file(tmp_path, f"critic_rank{r}_4242.1.nsys-rep", b"x" * (r + 1))
            for r in range(3)]
    bad = raw_file(tmp_path, "bad.nsys-rep")
    items = [item(good[0], "step0001/critic/rank0/a.nsys-rep", rank=0),
             item(bad, "../../outside.nsys-rep", rank=1),
             item(good[1], "step0001/critic/rank1/a.nsys-rep", rank=1),
             item(tmp_path / ".raw" / "vanished", "step0001/critic/rank2/b.nsys-rep", size=5,
                  rank=2),
             item(good[2], "step0001/critic/rank2/a.nsys-rep", rank=2)]
    entries = move_all(items, {}, str(tmp_path), "")
    assert [(e.path, e.status) for e in entries] == [
        ("step0001/critic/rank0/a.nsys-rep", "ok"), ("../../outside.nsys-rep", "missing"),
        ("step0001/critic/rank1/a.nsys-rep", "ok"), ("step0001/critic/rank2/b.nsys-rep",
                                                     "missing"),
        ("step0001/critic/rank2/a.nsys-rep", "ok")]
    assert [e.bytes for e in entries if e.status == "ok"] == [1, 2, 3]
    assert "vanished" in entries[3].reason


def _process_plan(tmp_path):
    cfg = ProfilingConfig(steps=(1, 2), tool="nsys", output_dir=str(tmp_path),
                          components=ComponentsConfig(critic=ComponentConfig(ranks=(1,))))
    return build_plan(cfg, Topology.of({"critic": 2}, cuda=False)).process("critic", 1)


def test_an_unreachable_process_has_every_report_missing_with_the_reason(tmp_path):
    process = _process_plan(tmp_path)
    reports = unreachable_reports(process, HERE, "worker process died (SIGKILL)")
    assert [(r.report.steps, r.status, r.reason, r.where, r.raw_path) for r in reports] == [
        ((s,), "missing", "worker process died (SIGKILL)", HERE, None) for s in (1, 2)]
    assert [r.report for r in reports] == list(process.reports)


def test_partial_reports_are_the_raw_files_of_that_process_only(tmp_path):
    process = _process_plan(tmp_path)
    raw = tmp_path / ".raw" / "critic" / "rank1"
    assert partial_reports(process, HERE) == []  # nothing written yet
    raw.mkdir(parents=True)
    for name in ("critic_rank1_4242.1.nsys-rep", "critic_rank1_4242.2.nsys-rep",
                 "critic_rank1_4242_tmp", "critic_rank1_42420.1.nsys-rep",
                 "critic_rank1_999.1.nsys-rep", "critic_rank10_4242.1.nsys-rep"):
        (raw / name).write_bytes(b"x")
    assert partial_reports(process, HERE) == [
        str(raw / n) for n in ("critic_rank1_4242.1.nsys-rep", "critic_rank1_4242.2.nsys-rep",
                               "critic_rank1_4242_tmp")]
    assert partial_reports(process, ProcessIdentity(host="node-a", pid=0)) == []


def _dead_rank_files(tmp_path, *names):
    raw = tmp_path / ".raw" / "critic" / "rank1"
    raw.mkdir(parents=True)
    for name in names:
        (raw / name).write_bytes(b"captured")
    return raw


DIED = "worker process died (SIGKILL)"


def test_what_nsys_wrote_before_a_death_is_placed_by_window(tmp_path):
    """nsys numbers the reports in closing order: step 1's closed (ok); step 2's window was
    open when the process died (incomplete, what nsys had captured); nothing is left."""
    process = _process_plan(tmp_path)
    raw = _dead_rank_files(tmp_path, "critic_rank1_4242.1.nsys-rep",
                           "critic_rank1_4242.2.nsys-rep")
    reports = unreachable_reports(process, HERE, DIED, [((1,), True), ((2,), False)], "nsys")
    assert [(r.report.steps, r.status, r.raw_path) for r in reports] == [
        ((1,), "ok", str(raw / "critic_rank1_4242.1.nsys-rep")),
        ((2,), "incomplete", str(raw / "critic_rank1_4242.2.nsys-rep"))]
    assert reports[0].reason is None and reports[0].bytes == len(b"captured")
    assert reports[1].reason == ("worker process died (SIGKILL) in this window; the report "
                                 "holds what was captured until then")
    entries = move_all(reports, {}, str(tmp_path), "")
    assert [e.status for e in entries] == ["ok", "incomplete"]
    assert files(tmp_path) == sorted(e.path for e in entries)  # .raw emptied


def test_a_death_before_a_window_opened_leaves_that_report_missing(tmp_path):
    """Step 2 was sent but its stop never came (the process died before): no second file, so
    step 2 is missing; a third file nsys could not map would be counted as left."""
    process = _process_plan(tmp_path)
    _dead_rank_files(tmp_path, "critic_rank1_4242.nsys-rep")  # one report: no ordinal
    reports = unreachable_reports(process, HERE, DIED, [((1,), True), ((2,), False)], "nsys")
    assert [(r.status, r.reason) for r in reports] == [("ok", None), ("missing", DIED)]


def test_reports_of_the_dead_are_not_guessed_when_the_numbering_is_unsure(tmp_path):
    """A window before the last that did not close (a refused start) may have no report, which
    would shift every later number; another node's files are not seen; a hung process (no
    history) is not waited for. Each keeps every report missing, naming the files left."""
    process = _process_plan(tmp_path)
    _dead_rank_files(tmp_path, "critic_rank1_4242.1.nsys-rep", "critic_rank1_4242.2.nsys-rep")
    elsewhere = ProcessIdentity(host="node-b", pid=4242, node_id="node-b")
    for where, history in ((HERE, [((1,), False), ((2,), True)]),
                           (elsewhere, [((1,), True), ((2,), True)]), (HERE, [])):
        reports = unreachable_reports(process, where, DIED, history, "nsys", "node-a")
        assert [r.status for r in reports] == ["missing", "missing"]
        assert reports[0].reason == (
            f"{DIED}; 2 uncollected file(s) left in .raw/critic/rank1"), (where, history)


def test_discrete_nsys_reports_of_the_dead_stay_in_raw(tmp_path):
    """Discrete windows follow the phases that ran, which only the dead process knew."""
    cfg = ProfilingConfig(steps=(1,), tool="nsys", output_dir=str(tmp_path),
                          components=ComponentsConfig(critic=ComponentConfig(
                              ranks=(1,), discrete=True)))
    process = build_plan(cfg, Topology.of({"critic": 2}, cuda=False)).process("critic", 1)
    _dead_rank_files(tmp_path, "critic_rank1_4242.1.nsys-rep")
    reports = unreachable_reports(process, HERE, DIED, [((1,), True)], "nsys")
    assert {r.status for r in reports} == {"missing"}


def test_torch_traces_of_the_dead_are_whole_where_written(tmp_path):
    """The torch profiler exports a window's trace when it closes, under its own name: each
    one there is whole, also in the step the death cut short."""
    cfg = ProfilingConfig(steps=(1, 2), tool="torch", output_dir=str(tmp_path),
                          components=ComponentsConfig(critic=ComponentConfig(
                              ranks=(1,), discrete=True)))
    process = build_plan(cfg, Topology.of({"critic": 2}, cuda=False)).process("critic", 1)
    by_steps = {}
    for w in process.windows:
        by_steps.setdefault(w.steps, []).append(w)
    written = [by_steps[(1,)][0], by_steps[(2,)][0]]  # one phase of each step ran
    raw = _dead_rank_files(tmp_path, *(os.path.basename(
        w.report.path.replace("{host}", "node-a").replace("{pid}", "4242")) for w in written))
    reports = unreachable_reports(process, HERE, DIED, [((1,), True), ((2,), False)], "torch")
    placed = {r.report.path: (r.status, r.raw_path) for r in reports if r.status != "missing"}
    assert placed == {w.report.path: ("ok", str(raw / os.path.basename(
        w.report.path.replace("{host}", "node-a").replace("{pid}", "4242")))) for w in written}
    assert len(reports) == len(process.windows) > 2


def test_the_final_manifest_reads_back_whole_with_one_report_per_line(tmp_path):
    """The final manifest is laid out for people by json's C encoder (one report per line),
    the running one is one line; both read back as the manifest written."""
    import json

    from verlprof.manifest import Manifest, read_manifest, write_manifest

    entries = tuple(move_report(item(None, status="missing", rank=r), str(tmp_path), "", None)
                    for r in range(3))
    final = Manifest(tool="nsys", output_dir=str(tmp_path), step_windows=((1,),),
                     reports=entries, warnings=('a warning, with "quotes"',))
    path = write_manifest(final, str(tmp_path))
    with open(path, encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    assert read_manifest(str(tmp_path)) == final
    assert json.loads("\n".join(lines)) == json.loads(json.dumps(final.to_dict()))
    assert sum(1 for line in lines if line.lstrip().startswith('{"')) == len(entries)
    write_manifest(dataclasses.replace(final, running=True), str(tmp_path))
    with open(path, encoding="utf-8") as handle:
        assert len(handle.read().splitlines()) == 1


def test_a_dead_controllers_own_reports_are_placed_by_the_windows_it_opened(tmp_path):
    """The controller under nsys, killed in its second of three planned windows: nsys wrote
    one report per window it opened (numbered in opening order) when the process ended. The
    first closed (ok), the second was cut (incomplete), the third never opened (missing);
    on another host, what this machine cannot see stays missing and says where it is."""
    import socket

    from verlprof.backends.nsys.controller_capture import left_by_dead_controller

    host = socket.gethostname()
    folder = tmp_path / "controller"
    folder.mkdir()
    for n in (1, 2):
        (folder / f"controller_{host}_777.{n}.nsys-rep").write_bytes(b"x" * n)
    planned = [(1,), (2,), (3,)]
    entries = left_by_dead_controller(str(tmp_path), host, 777, "node-a", planned,
                                      [((1,), True), ((2,), False)], "the run ended", 5.0)
    assert [(e.steps, e.status, e.path, e.bytes) for e in entries] == [
        ((1,), "ok", f"controller/controller_{host}_777.1.nsys-rep", 1),
        ((2,), "incomplete", f"controller/controller_{host}_777.2.nsys-rep", 2),
        ((3,), "missing", f"controller/controller_{host}_777.3.nsys-rep", 0)]
    assert entries[1].reason == ("the run ended in this window; the report holds what was "
                                 "captured until then")
    assert entries[2].reason == "window never opened: the run ended before step 3"
    assert {(e.group, e.rank, e.host, e.pid) for e in entries} == {("controller", 0, host, 777)}

    elsewhere = left_by_dead_controller(str(tmp_path), "other-host", 9, "node-b", planned[:1],
                                        [((1,), True)], "the run ended", 5.0)
    assert [(e.status, e.reason) for e in elsewhere] == [
        ("missing", "the run ended; its report stays on host other-host in controller/, if "
                    "that is kept")]
