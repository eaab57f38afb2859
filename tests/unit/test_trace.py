"""``verlprof trace`` on a synthetic run: a manifest with a controller, an nsys rank (the
reader tests' export), a GPU rank (benchmarks/p4_gpu's synthetic export with kernels, memcpys
and their launches), a torch rank on a clock shifted on purpose, and reports that are missing,
incomplete or unreadable. The file is decoded by the ``perfetto`` package's own protobuf
classes (tests/trace_reader.py)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import pytest

from benchmarks import p4_gpu
from tests.helpers import trace_main
from tests.trace_reader import decode
from tests.unit.test_report_readers import MS, T0, make_sqlite, torch_events
from verlprof.manifest import Manifest, ProcessInfo, ReportEntry, read_manifest, write_manifest
from verlprof.trace.build import write_trace
from verlprof.trace.tracks import Filters

GROUP = "actor_rollout_ref"
SHIFT = 5_000_000_000
"""Rank 1's clock runs 5 s ahead of the controller's."""
SHIFT_ERROR = 2_000
TRUE_BASE = T0 + 2000 * MS
"""When rank 1's torch trace began, on the controller's clock."""


def _entry(steps, rank, path, status="ok", backend="nsys", reason=None, window=None, **kw):
    return ReportEntry(steps=steps, group=GROUP, rank=rank, component=GROUP, backend=backend,
                       path=path, status=status, reason=reason, roles=("actor", "rollout"),
                       window_start_ns=window[0] if window else None,
                       window_end_ns=window[1] if window else None, **kw)


def _nsys(out, rel: str, make) -> str:
    full = os.path.join(out, rel)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "wb") as handle:
        handle.write(b"not a real report: its export is already there")
    make(full[: -len(".nsys-rep")] + ".sqlite")
    os.utime(full, ns=(1, 1))  # older than its export: nothing to export again
    return rel


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("run"))
    nsys0 = _nsys(out, "step0001/r0/w.nsys-rep", lambda p: make_sqlite(p, cuda=True))
    gpu = _nsys(out, "step0001/r2/gpu.nsys-rep", lambda p: p4_gpu.build(p, 3000))
    torch1 = os.path.join(out, "step0001", "r1", "t.pt.trace.json.gz")
    os.makedirs(os.path.dirname(torch1))
    with gzip.open(torch1, "wt") as handle:  # written on rank 1's clock: SHIFT ahead
        json.dump({"baseTimeNanoseconds": TRUE_BASE + SHIFT, "traceEvents": torch_events()},
                  handle)
    bad = os.path.join(out, "step0002", "r1", "t.pt.trace.json.gz")
    os.makedirs(os.path.dirname(bad))
    with open(bad, "w") as handle:
        handle.write("{ truncated")
    win1 = (T0, T0 + 1000 * MS)
    entries = (
        _entry((1,), 0, nsys0, window=win1),
        _entry((1,), 1, os.path.relpath(torch1, out), backend="torch",
               window=(TRUE_BASE + SHIFT, TRUE_BASE + SHIFT + 2 * MS)),
        _entry((1,), 2, gpu, window=win1),
        _entry((2,), 0, "step0002/r0/w.nsys-rep", status="incomplete",
               reason="nsys was killed before it wrote the report",
               window=(T0 + 3000 * MS, T0 + 3500 * MS)),
        _entry((2,), 1, os.path.relpath(bad, out), backend="torch",
               window=(T0 + 3000 * MS + SHIFT, T0 + 3400 * MS + SHIFT)),
        _entry((2,), 3, "step0002/r3/w.nsys-rep", status="missing",
               reason="window never opened: step(s) [2] were never started"),
    )
    procs = tuple(ProcessInfo(group=GROUP, rank=r, host=f"node{r}", pid=100 + r,
                              clock_offset_ns=SHIFT if r == 1 else 10 * (r + 1),
                              clock_error_ns=SHIFT_ERROR if r == 1 else 500) for r in range(3))
    write_manifest(Manifest(tool="nsys", output_dir=out, step_windows=((1,), (2,)),
                            reports=entries, processes=procs, groups={GROUP: 4},
                            controller=ProcessInfo(group="controller", rank=0, host="head",
                                                   pid=1, clock_offset_ns=0, clock_error_ns=0),
                            run_id="20261126-000000-head-1"), out)
    return out


@pytest.fixture(scope="module")
def written(run_dir):
    result = write_trace(run_dir)
    return result, decode(result.path)


def test_one_process_track_per_process_with_its_identity(written):
    result, trace = written
    assert os.stat(result.path).st_mode & 0o044 == 0o044  # readable as the summary files are
    names = sorted(trace.processes.values())
    assert names == ["actor_rollout_ref rank 0 (node0 pid 100)",
                     "actor_rollout_ref rank 1 (node1 pid 101)",
                     "actor_rollout_ref rank 2 (node2 pid 102)",
                     "actor_rollout_ref rank 3 (process never registered)",
                     "controller (head pid 1)"]
    rank1 = trace.process_named("actor_rollout_ref rank 1")
    assert "roles: actor, rollout" in trace.labels[rank1]
    assert "clock offset +5000.000 ms ±0.002 ms" in trace.labels[rank1]
    assert result.written.processes == 5


def test_every_nvtx_range_of_every_domain_on_its_thread(written):
    _, trace = written
    rank0 = trace.slices_of_process(trace.process_named("actor_rollout_ref rank 0"))
    nvtx = [(s.name, s.start - T0 + 10, s.category) for s in rank0
            if s.category not in ("gpu", "cuda_runtime", "gap")]
    # placed at -10 ns: rank 0's clock is 10 ns ahead; the never-ended range is left out
    assert nvtx == [("VERLPROF_CAPTURE", 0, "verlprof"),
                    ("actor/compute_log_prob", 100 * MS, "verlprof"),
                    ("actor/update_actor", 300 * MS, "verlprof"),
                    ("other/in_default_domain", 310 * MS, "nvtx"),
                    ("rollout/generate_sequences", 990 * MS, "verlprof")]


def test_kernels_per_stream_with_flows_from_their_launch(written):
    _, trace = written
    gpu = trace.process_named("actor_rollout_ref rank 2")
    stream = trace.track_named(gpu, "GPU 0 stream 7")
    kernels = [s for s in trace.slices[stream]]
    assert len(kernels) == 3000 and all(s.name == "gemm" for s in kernels)
    copies = trace.slices[trace.track_named(gpu, "GPU 0 stream 8")]
    assert len(copies) == 300 and copies[0].name == "memcpy 4096 B kind 1"
    launches = {f for s in trace.slices_of_process(gpu) for f in s.flow_out}
    ends = [f for s in kernels + copies for f in s.flow_in]
    # every launch found in the runtime table (i % 97 != 3) gets its arrow; a CUDA graph's
    # second kernel (i % 50 == 7) ends at the same call as the first
    assert len(ends) == sum(1 for i in range(3000) if i % 97 != 3) + \
        sum(1 for i in range(0, 3000, 10) if i % 97 != 3)
    assert set(ends) == launches
    for s in kernels:  # a kernel starts after the call that launched it
        assert s.start > T0


def test_a_shifted_clock_is_placed_back_on_the_controllers(written):
    _, trace = written
    rank1 = trace.process_named("actor_rollout_ref rank 1")
    update = [s for s in trace.slices_of_process(rank1) if s.name == "actor/update_actor"
              and s.category == "user_annotation"]
    want = TRUE_BASE + 1_100_500
    assert [abs(s.start - want) <= SHIFT_ERROR for s in update] == [True]
    stream = [s for s in trace.slices_of_process(rank1) if s.name == "gemm"]
    launch = [s for s in trace.slices_of_process(rank1) if s.name == "cudaLaunchKernel"]
    assert stream[0].flow_in == launch[0].flow_out != ()


def test_missing_incomplete_and_unreadable_reports_are_marked_gaps(written):
    result, trace = written
    gaps = {}
    for uuid, (parent, name) in trace.tracks.items():
        if name.startswith("gaps"):
            for s in trace.slices[uuid]:
                gaps[(trace.processes[parent].split(" (")[0], s.name)] = s.args["reason"]
            for name_, _, args in trace.instants[uuid]:
                gaps[(trace.processes[parent].split(" (")[0], name_)] = args["reason"]
    assert set(gaps) == {
        ("actor_rollout_ref rank 0", "incomplete: actor_rollout_ref step 2"),
        ("actor_rollout_ref rank 0", "unreadable: actor_rollout_ref step 2"),
        ("actor_rollout_ref rank 1", "unreadable: actor_rollout_ref step 2"),
        ("actor_rollout_ref rank 3", "missing: actor_rollout_ref step 2")}
    assert gaps[("actor_rollout_ref rank 3", "missing: actor_rollout_ref step 2")] == \
        "window never opened: step(s) [2] were never started"
    assert "BadGzipFile" in gaps[("actor_rollout_ref rank 1",
                                      "unreadable: actor_rollout_ref step 2")]
    assert result.gaps == 4


def test_steps_in_order_with_their_boundaries_and_the_clock_bound(written):
    result, trace = written
    top = trace.track_named(None, "verlprof steps")
    assert [s.name for s in sorted(trace.slices[top], key=lambda s: s.start)] == \
        ["step 1", "step 2"]
    instants = sorted(trace.instants[top], key=lambda i: i[1])
    assert [n for n, _, _ in instants] == ["verlprof trace", "step 1 begins", "step 1 ends",
                                           "step 2 begins", "step 2 ends"]
    assert instants[0][2]["largest_clock_error_ns"] == SHIFT_ERROR
    assert "within ±0.002 ms" in result.line()


def test_filters_leave_out_what_they_say(run_dir, tmp_path):
    full = decode(write_trace(run_dir, out_path=str(tmp_path / "a.pftrace")).path)
    only = write_trace(run_dir, out_path=str(tmp_path / "b.pftrace"),
                       filters=Filters(ranks=(0, 1), kernels=False, min_duration_ns=150 * MS))
    trace = decode(only.path)
    assert sorted(n.split(" (")[0] for n in trace.processes.values()) == [
        "actor_rollout_ref rank 0", "actor_rollout_ref rank 1", "controller"]
    names = {s.name for t in trace.slices for s in trace.slices[t]}
    assert "gemm" not in names and "cudaLaunchKernel" not in names
    assert "actor/compute_log_prob" not in names  # 100 ms < 150 ms
    assert "actor/update_actor" in names and "VERLPROF_CAPTURE" in names
    stepped = decode(write_trace(run_dir, out_path=str(tmp_path / "c.pftrace"),
                                 filters=Filters(steps=(2,))).path)
    assert not any(s.name == "gemm" for t in stepped.slices for s in stepped.slices[t])
    assert len(full.processes) == 5 and only.written.bytes < os.path.getsize(
        str(tmp_path / "a.pftrace"))
    other = decode(write_trace(run_dir, out_path=str(tmp_path / "d.pftrace"),
                               filters=Filters(groups=("critic",))).path)
    assert [n.split(" (")[0] for n in other.processes.values()] == ["controller"]


def test_the_command_prints_the_size_and_a_bad_dir_is_one_line(run_dir, tmp_path, capsys):
    assert trace_main([run_dir, "--ranks", "0-1", "--no-kernels"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("trace: ") and "KiB: 3 processes" in line and "perfetto" in line
    assert trace_main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no manifest here" in err[0]
    proc = subprocess.run([sys.executable, "-m", "verlprof.cli", "trace", run_dir, "--steps",
                           "x"], capture_output=True, text=True)
    assert proc.returncode == 2 and "not a list of integers" in proc.stderr


def test_an_old_manifest_without_clocks_still_makes_a_trace(run_dir, tmp_path):
    manifest = read_manifest(run_dir)
    data = manifest.to_dict()
    for p in list(data["processes"]) + [data["controller"]]:
        del p["clock_offset_ns"], p["clock_error_ns"]
    old = Manifest.from_dict(data)
    result = write_trace(run_dir, manifest=old, out_path=str(tmp_path / "old.pftrace"))
    assert "clocks: not measured" in result.line()
    assert len(decode(result.path).processes) == 5


def test_the_writers_fast_path_writes_the_same_bytes():
    import io

    from verlprof.trace.writer import TraceWriter

    slow, fast = io.BytesIO(), io.BytesIO()
    writers = TraceWriter(slow), TraceWriter(fast)
    for w in writers:
        w.child_track(1, None, "t")
    for i in range(100):
        start = T0 + i * 1000 if i != 50 else 5  # a time before 2002: the plain path
        writers[0].slice(1, f"n{i % 3}", start, start + 500, "c")
        writers[1].plain_slice(1, f"n{i % 3}", "c", start, start + 500)
    assert slow.getvalue() == fast.getvalue()
    assert writers[0].written == writers[1].written


def test_reports_read_side_by_side_give_the_same_trace(run_dir, tmp_path):
    """Parts written by a pool and joined equal the reports read one after the other: the
    same tracks (a thread named in two parts is one track), slices and arrows."""
    def content(jobs):
        trace = decode(write_trace(run_dir, out_path=str(tmp_path / f"{jobs}.pftrace"),
                                   jobs=jobs).path)
        return {name: [(s.name, s.start, s.end, s.flow_in != (), s.flow_out != ())
                       for s in trace.slices_of_process(uuid)]
                for uuid, name in trace.processes.items()}, sorted(
                    (trace.processes[trace.process_of(t)], n) for t, (_, n) in
                    trace.tracks.items() if trace.process_of(t) is not None)

    one, two = content(1), content(2)
    assert one == two
    assert len(one[1]) == len(set(one[1]))  # no track twice


def test_the_batch_encoder_writes_what_the_one_by_one_path_writes():
    import io

    import numpy as np

    from verlprof.trace.writer import TraceWriter

    slow, fast = io.BytesIO(), io.BytesIO()
    writers = TraceWriter(slow), TraceWriter(fast)
    for w in writers:
        w.child_track(1, None, "t")
        w.child_track(2, None, "u")
    names = [(1, "n0", "c"), (2, "a longer name " * 12, "nvtx"), (1, "x", "")]
    rows = [(names[i % 3], T0 + i * 1000, T0 + i * 1000 + 500 + i) for i in range(300)]
    for key, start, end in rows:
        writers[0].plain_slice(*key, start, end)
    numbers = np.array([writers[1].template(*key) for key, _, _ in rows])
    writers[1].plain_slices(numbers, np.array([s for _, s, _ in rows], dtype=np.int64),
                            np.array([e for _, _, e in rows], dtype=np.int64))
    assert slow.getvalue() == fast.getvalue()
    assert writers[0].written == writers[1].written


def test_marks_and_ranges_left_open_in_an_nsys_report(tmp_path):
    """A mark is an instant; a range still open when the capture stopped is left out; the
    window range is kept under any --min-duration-us."""
    import sqlite3

    out = str(tmp_path)
    rel = _nsys(out, "r/w.nsys-rep", lambda p: make_sqlite(p, cuda=False))
    conn = sqlite3.connect(os.path.join(out, "r", "w.sqlite"))
    conn.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, domainId, globalTid) "
                 "VALUES (?, NULL, 34, 'checkpoint saved', 0, ?)", (50 * MS, (4242 << 24) | 7))
    conn.commit()
    conn.close()
    os.utime(os.path.join(out, rel), ns=(1, 1))
    write_manifest(Manifest(tool="nsys", output_dir=out, step_windows=((1,),),
                            reports=(_entry((1,), 0, rel),), groups={GROUP: 1}), out)
    trace = decode(write_trace(out, filters=Filters(min_duration_ns=5000 * MS)).path)
    rank0 = trace.process_named("actor_rollout_ref rank 0")
    marks = [i for t, items in trace.instants.items() if trace.process_of(t) == rank0
             for i in items]
    assert [(n, at - T0) for n, at, _ in marks] == [("checkpoint saved", 50 * MS)]
    names = [s.name for s in trace.slices_of_process(rank0)]
    assert names == ["VERLPROF_CAPTURE"]  # the rest is shorter than 5 s; never_ended: open
