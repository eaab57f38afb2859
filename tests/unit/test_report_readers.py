"""Readers on constructed inputs: an nsys sqlite export with (and without) CUDA tables, torch
Chrome traces with GPU events, and broken files. The real-tool cases are in
tests/integration/test_report_real.py."""

from __future__ import annotations

import gzip
import json
import sqlite3

from benchmarks.p4_gpu import CUDA_SCHEMA
from verlprof.backends.nsys.read import read_nsys_report, read_nsys_sqlite
from verlprof.backends.reading import attribute
from verlprof.backends.torch.read import read_torch_trace

MS = 1_000_000
T0 = 1_790_000_000 * 10**9

# the columns nsys 2022.4 writes (NVTX_EVENTS copied from a real export; CUPTI tables with the
# columns nsys' own report scripts read)
SCHEMA = """
CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL,
  rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER,
  endGlobalTid INTEGER, textId INTEGER, domainId INTEGER, uint64Value INTEGER,
  int64Value INTEGER, doubleValue REAL, uint32Value INTEGER, int32Value INTEGER,
  floatValue REAL, jsonTextId INTEGER, jsonText TEXT);
"""
TID = (4242 << 24) | 4242


def make_sqlite(path, cuda: bool):
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA + (CUDA_SCHEMA if cuda else ""))
    conn.execute("INSERT INTO StringIds VALUES (0, '[Unknown]'), (7, 'actor/update_actor')")
    conn.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, '', '')", (T0,))
    nvtx = [  # start, end, eventType, text, textId, domainId
        (-5, None, 75, "verlprof", None, 1),
        (0, 1000 * MS, 60, "VERLPROF_CAPTURE", None, 1),
        (100 * MS, 200 * MS, 59, "actor/compute_log_prob", None, 1),
        (300 * MS, 500 * MS, 59, None, 7, 1),
        (310 * MS, 320 * MS, 59, "other/in_default_domain", None, 0),
        (600 * MS, None, 59, "actor/never_ended", None, 1),
        # begun by the next step after the window's close call, cut off where nsys
        # registered the end (the end runs on a background thread): not this window's
        (990 * MS, 1000 * MS, 59, "rollout/generate_sequences", None, 1),
    ]
    conn.executemany("INSERT INTO NVTX_EVENTS (start, end, eventType, text, textId, domainId, "
                     "globalTid) VALUES (?, ?, ?, ?, ?, ?, ?)", [n + (TID,) for n in nvtx])
    if cuda:
        conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, correlationId) "
                         "VALUES (?, ?, ?)",
                         [(150 * MS, 151 * MS, 1), (350 * MS, 351 * MS, 2),
                          (310 * MS, 311 * MS, 3)])
        conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, correlationId, "
                         "globalPid) VALUES (?, ?, ?, ?)",
                         [(210 * MS, 230 * MS, 1, 4242 << 24),  # ran after its phase closed
                          (360 * MS, 380 * MS, 2, 4242 << 24),
                          (400 * MS, 410 * MS, 99, 4242 << 24)])  # no runtime row: GPU start
        conn.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, correlationId, bytes, "
                     "copyKind) VALUES (?, ?, 3, 4096, 1)", (320 * MS, 325 * MS))
    conn.commit()
    conn.close()
    return str(path)


def test_nsys_sqlite_with_kernels_and_memcpy(tmp_path):
    data = read_nsys_sqlite(make_sqlite(tmp_path / "gpu.sqlite", cuda=True))
    got = {r.name: r for r in data.ranges}
    assert set(got) == {"actor/compute_log_prob", "actor/update_actor"}
    log_prob, update = got["actor/compute_log_prob"], got["actor/update_actor"]
    assert (log_prob.start_ns, log_prob.end_ns) == (T0 + 100 * MS, T0 + 200 * MS)
    assert (update.start_ns, update.end_ns) == (T0 + 300 * MS, T0 + 500 * MS)
    assert (log_prob.kernel_ns, log_prob.kernel_count, log_prob.memcpy_ns) == (20 * MS, 1, 0)
    assert (update.kernel_ns, update.kernel_count, update.memcpy_ns) == (30 * MS, 2, 5 * MS)
    assert data.window == (T0, T0 + 1000 * MS)


def test_nsys_sqlite_without_cuda_tables(tmp_path):
    data = read_nsys_sqlite(make_sqlite(tmp_path / "cpu.sqlite", cuda=False))
    assert len(data.ranges) == 2
    assert all(r.kernel_ns is None and r.kernel_count is None and r.memcpy_ns is None
               for r in data.ranges)


def test_unreadable_nsys_report_is_an_error_not_an_exception(tmp_path):
    bad = tmp_path / "bad.nsys-rep"
    bad.write_bytes(b"not a report at all")
    data = read_nsys_report(str(bad), index=3, timeout=30)
    assert data.index == 3 and data.error and "\n" not in data.error and not data.ranges
    missing = read_nsys_report(str(tmp_path / "gone.nsys-rep"), timeout=30)
    assert missing.error


def test_attribute_keeps_absent_and_zero_apart():
    assert attribute([(0, 10)], None) == [(None, None)]
    assert attribute([(0, 10), (20, 30)], [(5, 3), (10, 1), (25, 4), (40, 9)]) == \
        [(4, 2), (4, 1)]


def write_trace(path, data):
    with gzip.open(path, "wt") as handle:
        json.dump(data, handle)
    return str(path)


BASE = 1_790_000_000_000_000_000


def torch_events():
    def x(name, cat, ts, dur, **args):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
                "args": args}
    return [
        x("ProfilerStep#3", "user_annotation", 1000.0, 900.0),
        x("actor/update_actor", "user_annotation", 1100.5, 500.25),
        x("actor/update_actor", "gpu_user_annotation", 1200.0, 600.0),
        x("aten::mm", "cpu_op", 1150.0, 10.0),
        x("cudaLaunchKernel", "cuda_runtime", 1200.0, 5.0, correlation=7),
        x("cudaMemcpyAsync", "cuda_runtime", 1300.0, 5.0, correlation=8),
        x("gemm", "kernel", 1700.0, 40.0, correlation=7),
        x("Memcpy HtoD", "gpu_memcpy", 1400.0, 2.0, correlation=8),
        {"ph": "i", "name": "instant", "ts": 1.0},
    ]


def test_torch_trace_with_base_time_and_gpu_events(tmp_path):
    path = write_trace(tmp_path / "t.pt.trace.json.gz", {
        "baseTimeNanoseconds": BASE, "traceEvents": torch_events(),
        "distributedInfo": {"rank": 1, "world_size": 2}})
    data = read_torch_trace(path, index=2)
    assert data.error is None and data.index == 2
    (phase,) = data.ranges
    assert phase.name == "actor/update_actor"
    assert (phase.start_ns, phase.end_ns) == (BASE + 1_100_500, BASE + 1_100_500 + 500_250)
    assert (phase.kernel_ns, phase.kernel_count, phase.memcpy_ns) == (40_000, 1, 2_000)
    assert [(m.step, m.start_ns) for m in data.marks] == [(3, BASE + 1_000_000)]
    assert data.window == (BASE + 1_000_000, BASE + 1_900_000)


def test_torch_trace_cpu_only_and_without_base_time(tmp_path):
    events = [e for e in torch_events() if e.get("cat") in ("user_annotation", "cpu_op")]
    path = write_trace(tmp_path / "cpu.pt.trace.json.gz", {"traceEvents": events})
    data = read_torch_trace(path, fallback_start_ns=BASE)
    (phase,) = data.ranges
    assert phase.kernel_ns is None and phase.memcpy_ns is None
    assert phase.start_ns == BASE + 100_500  # the first event (ProfilerStep#3) = window start
    epoch = [dict(e, ts=e["ts"] + 1.7e15) for e in events]
    path = write_trace(tmp_path / "epoch.pt.trace.json.gz", {"traceEvents": epoch})
    (phase,) = read_torch_trace(path).ranges
    assert abs(phase.start_ns - int((1.7e15 + 1100.5) * 1000)) < 1000


def test_broken_torch_traces(tmp_path):
    good = write_trace(tmp_path / "g.pt.trace.json.gz", {"baseTimeNanoseconds": BASE,
                                                          "traceEvents": torch_events()})
    with open(good, "rb") as handle:
        raw = handle.read()
    cut = tmp_path / "cut.pt.trace.json.gz"
    cut.write_bytes(raw[: len(raw) // 2])
    data = read_torch_trace(str(cut))
    assert data.error and not data.ranges and "\n" not in data.error
    other = write_trace(tmp_path / "o.pt.trace.json.gz", {"hello": 1})
    assert "not a Chrome trace" in read_torch_trace(other).error
    assert read_torch_trace(str(tmp_path / "absent.gz")).error.startswith("FileNotFoundError")


def test_read_only_report_dir_exports_to_a_temp_cache(tmp_path, monkeypatch):
    from verlprof.backends.nsys import read as read_nsys

    report = tmp_path / "r.nsys-rep"
    report.write_bytes(b"x")
    assert read_nsys._cache_path(str(report)) is None
    monkeypatch.setattr(read_nsys.os, "access", lambda path, mode: False)
    cached = read_nsys._cache_path(str(report))
    assert cached.endswith(".sqlite") and not cached.startswith(str(tmp_path))
