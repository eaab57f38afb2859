"""GPU time per phase computed in SQLite (verlprof/backends/nsys/gpu_sql.py) against two
references computed in Python here: the attribution verlprof did before (one object per
kernel, a dict of launches, ``attribute``), kept below as it was, and an independent rule-by-rule
reference (launch by correlationId, same thread, inclusive bounds). Inputs: nsys-schema sqlite
files built like ``nsys export --type sqlite`` writes them (benchmarks/p4_gpu.py), small here;
the 5 M-kernel one is in ``make bench``."""

from __future__ import annotations

import shutil
import sqlite3
from typing import Dict, List, Optional, Tuple

import pytest

from benchmarks import p4_gpu
from tests.unit.test_report_readers import make_sqlite
from verlprof.backends.nsys import gpu_numpy, gpu_sql
from verlprof.backends.nsys.gpu_sql import GpuTotals, Span, gpu_totals
from verlprof.backends.nsys.nvtx import NVTX_DOMAIN
from verlprof.backends.nsys.read import read_nsys_sqlite
from verlprof.backends.nsys.sqlite import (
    list_tables,
    read_nvtx_ranges,
)
from verlprof.backends.reading import attribute

N = 8_000


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> str:
    return p4_gpu.build(str(tmp_path_factory.mktemp("gpu") / "gpu.sqlite"), N)


def phase_ranges(path: str):
    """The reader's phases: verlprof's ``<role>/<phase>`` ranges, less one still open where
    the capture window ended (read.py: it is the next step's)."""
    ranges = read_nvtx_ranges(path, domain=NVTX_DOMAIN)
    ends = [r.end_ns for r in ranges if r.text == "VERLPROF_CAPTURE"]
    return [r for r in ranges
            if "/" in r.text and not r.text.startswith("step/")
            and r.text != "VERLPROF_CAPTURE" and not (ends and r.end_ns >= max(ends))]


def old_attribution(path: str) -> List[Tuple[str, Optional[int], Optional[int], Optional[int]]]:
    """verlprof's attribution before it moved into SQLite (threads not considered)."""
    phases = phase_ranges(path)
    conn = sqlite3.connect(path)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    launches: Dict[Optional[int], int] = {}
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        launches = {int(c): int(s) for c, s in conn.execute(
            "SELECT correlationId, start FROM CUPTI_ACTIVITY_KIND_RUNTIME "
            "WHERE correlationId IS NOT NULL")}
    conn.close()
    spans = [(r.start_ns, r.end_ns) for r in phases]
    has_k = "CUPTI_ACTIVITY_KIND_KERNEL" in tables
    has_m = "CUPTI_ACTIVITY_KIND_MEMCPY" in tables
    def events(table: str) -> List[Tuple[int, int]]:  # (launch or start, duration), by start
        with sqlite3.connect(path) as db:
            rows = db.execute(f"SELECT start, end, correlationId FROM {table} "
                              "WHERE start IS NOT NULL AND end IS NOT NULL ORDER BY start")
            return [(launches.get(c, s), e - s) for s, e, c in rows]

    kern = attribute(spans, events("CUPTI_ACTIVITY_KIND_KERNEL") if has_k else None)
    mem = attribute(spans, events("CUPTI_ACTIVITY_KIND_MEMCPY") if has_m else None)
    return [(r.text, k[0], k[1], m[0]) for r, k, m in zip(phases, kern, mem)]


def independent(path: str) -> List[Tuple[str, int, int, int]]:
    """The rule, one event at a time: the launching call (last runtime row of the
    correlationId) on the phase's thread, else the event's own start on any thread."""
    conn = sqlite3.connect(path)
    calls = {}
    for cid, start, tid in conn.execute("SELECT correlationId, start, globalTid "
                                        "FROM CUPTI_ACTIVITY_KIND_RUNTIME"):
        if cid is not None:
            calls[cid] = (start, tid)
    kernels = list(conn.execute("SELECT correlationId, start, end "
                                "FROM CUPTI_ACTIVITY_KIND_KERNEL"))
    copies = list(conn.execute("SELECT correlationId, start, end "
                               "FROM CUPTI_ACTIVITY_KIND_MEMCPY"))
    conn.close()
    out = []
    for r in phase_ranges(path):
        def hits(rows, r=r):
            for cid, start, end in rows:
                if start is None or end is None:
                    continue  # not an event with a time
                ref, tid = calls.get(cid, (start, None))
                if r.start_ns <= ref <= r.end_ns and tid in (None, r.global_tid):
                    yield max(0, end - start)
        k = list(hits(kernels))
        out.append((r.text, sum(k), len(k), sum(hits(copies))))
    return out


def read(path: str) -> List[Tuple[str, Optional[int], Optional[int], Optional[int]]]:
    data = read_nsys_sqlite(path)
    return [(r.name, r.kernel_ns, r.kernel_count, r.memcpy_ns) for r in data.ranges]


def test_equals_the_old_attribution_on_the_reader_test_reports(tmp_path):
    for cuda in (True, False):
        path = make_sqlite(tmp_path / f"r{cuda}.sqlite", cuda=cuda)
        assert read(path) == old_attribution(path)


def test_equals_the_old_attribution_when_threads_are_unknown(synthetic, tmp_path):
    copy = str(tmp_path / "nothreads.sqlite")
    shutil.copy(synthetic, copy)
    with sqlite3.connect(copy) as conn:
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET globalTid = NULL")
    got = read(copy)
    assert len(got) == len(p4_gpu.phases(N)) and any(k for _, k, _, _ in got)
    assert got == old_attribution(copy)


def test_equals_the_independent_references_with_threads(synthetic):
    got = read(synthetic)
    assert got == independent(synthetic)
    by_name: Dict[str, List[Tuple[int, int, int]]] = {}
    for name, k, n, m in got:
        by_name.setdefault(name, []).append((k or 0, n or 0, m or 0))
    assert p4_gpu.in_phase_order(N, by_name) == p4_gpu.reference(N)
    # launches from T3 (no phase of its own) and the other phase thread count nowhere: the
    # thread rule really removed events that the time rule alone would count
    assert sum(n for _, _, n, _ in got) < sum(n for _, _, n, _ in old_attribution(synthetic))


def test_only_verlprof_ranges_reach_python(synthetic, tmp_path):
    copy = str(tmp_path / "domains.sqlite")
    shutil.copy(synthetic, copy)
    with sqlite3.connect(copy) as conn:
        # another named domain (registered name) holding look-alike phase names
        conn.execute("INSERT INTO StringIds VALUES (50, 'torch')")
        conn.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, textId, domainId) "
                     "VALUES (-4, NULL, 75, 50, 2)")
        conn.executemany("INSERT INTO NVTX_EVENTS (start, end, eventType, text, domainId, "
                         "globalTid) VALUES (?, ?, 59, 'actor/update_actor', 2, ?)",
                         [(p4_gpu.LAUNCH0 + k, p4_gpu.LAUNCH0 + k + 10, p4_gpu.T1)
                          for k in range(50)])
    ranges = read_nvtx_ranges(copy, domain=NVTX_DOMAIN)
    assert {r.domain for r in ranges} == {NVTX_DOMAIN}
    assert "other/default_domain" not in {r.text for r in ranges}
    assert len(read_nvtx_ranges(copy, domain="torch")) == 50
    assert {r.text for r in read_nvtx_ranges(copy, domain="")} == {"other/default_domain"}
    assert read_nvtx_ranges(copy, domain="absent") == []
    assert read(copy) == read(synthetic)


def test_phases_without_gpu_rows_and_no_phases(tmp_path):
    path = p4_gpu.build(str(tmp_path / "tiny.sqlite"), 50)
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL")
    got = read(path)
    assert got and all(k == 0 and n == 0 for _, k, n, _ in got)
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM NVTX_EVENTS WHERE eventType = 59")
    assert read(path) == []


# --- the numpy path (gpu_numpy) against the SQL path, on the same files ---------------------

def both_paths(path: str, monkeypatch, chunks=(4096, 3 * 4096, 64 * 4096, gpu_numpy.CHUNK_BYTES),
               fallback_ok: bool = False) -> GpuTotals:
    """The SQL path's totals, after checking that the numpy path gives the same ones at each
    chunk size (and really ran: the SQL path is made to fail while it is expected not to)."""
    tables = set(list_tables(path))
    spans = [Span(r.start_ns, r.end_ns, r.global_tid) for r in phase_ranges(path)]
    with sqlite3.connect(path) as conn:
        want = gpu_totals(conn, tables, spans, fast_min_rows=None)
        for rows in chunks:
            with monkeypatch.context() as patch:
                if not fallback_ok:
                    patch.setattr(gpu_sql, "_sql_totals", _no_sql)
                got = gpu_totals(conn, tables, spans, fast_min_rows=0, chunk_bytes=rows)
            assert got == want, f"chunk_bytes={rows}"
    return want


def _no_sql(*args, **kwargs):
    raise AssertionError("the numpy path fell back to SQL")


def test_numpy_path_equals_sql_path_and_the_reference(synthetic, monkeypatch):
    # duplicate kernel ids (two kernels of one launch), runtime rows missing, NULL threads
    totals = both_paths(synthetic, monkeypatch)
    assert [(k[0], k[1], m[0]) for k, m in zip(totals.kernels, totals.memcpy)] == \
        [(k, n, m) for _, k, n, m in independent(synthetic)]


def test_numpy_path_on_odd_runtime_and_event_rows(tmp_path, monkeypatch):
    """Runtime ids out of order and repeated (the last row wins, within a chunk and across
    chunks), kernels with NULL or 33-bit ids (read plainly), negative durations, NULL ends,
    rowid gaps; the numpy path must give the SQL path's and the reference's totals."""
    path = p4_gpu.build(str(tmp_path / "odd.sqlite"), 3000)
    t1, t2, t3 = p4_gpu.T1, p4_gpu.T2, p4_gpu.T3
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE r2 AS SELECT * FROM CUPTI_ACTIVITY_KIND_RUNTIME "
                     "ORDER BY (correlationId * 7919) % 3001")
        conn.execute("DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME")
        conn.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME SELECT * FROM r2")
        conn.execute("DROP TABLE r2")
        # repeats: later rows move launches to other threads and times
        conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, globalTid, "
                         "correlationId) VALUES (?, ?, ?, ?)",
                         [(p4_gpu.LAUNCH0 + (i * 37 % 3000) * p4_gpu.STEP, 0,
                           (t1, t2, t3, None)[i % 4], i * 13 % 3000 + 1) for i in range(400)])
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = NULL "
                     "WHERE rowid % 101 = 0")
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = 8589934592 + rowid "
                     "WHERE rowid % 211 = 0")
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start - 50 "
                     "WHERE rowid % 53 = 0")
        conn.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid % 307 = 0")
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET correlationId = 9999999 "
                     "WHERE rowid % 3 = 0")
    # NULL ends need a table without NOT NULL, as a hand-made export may have
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_MEMCPY RENAME TO m_old")
        conn.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER, end INTEGER, "
                     "correlationId INTEGER)")
        conn.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY SELECT start, CASE WHEN "
                     "rowid % 7 = 0 THEN NULL ELSE end END, correlationId FROM m_old")
        conn.execute("DROP TABLE m_old")
    totals = both_paths(path, monkeypatch)
    assert [(k[0], k[1], m[0]) for k, m in zip(totals.kernels, totals.memcpy)] == \
        [(k, n, m) for _, k, n, m in independent(path)]
    assert any(n for n, _ in totals.kernels)


def test_numpy_path_without_runtime_rows_or_threads(tmp_path, monkeypatch):
    path = p4_gpu.build(str(tmp_path / "bare.sqlite"), 2000)
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_RUNTIME DROP COLUMN globalTid")
    both_paths(path, monkeypatch, chunks=(4096, 64 * 4096))
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME")
    assert any(n for n, _ in both_paths(path, monkeypatch, chunks=(4096, 64 * 4096)).kernels)


def test_the_sql_path_takes_over_when_the_map_would_not_fit(synthetic, tmp_path, monkeypatch):
    calls = []
    real = gpu_sql._sql_totals

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(gpu_sql, "_sql_totals", counted)
    monkeypatch.setattr(gpu_numpy, "MAP_BYTES", 4096)  # fewer ids than the report's calls
    both_paths(synthetic, monkeypatch, chunks=(64 * 4096,), fallback_ok=True)
    assert len(calls) == 2  # the reference and the fallback
    monkeypatch.setattr(gpu_numpy, "MAP_BYTES", 1 << 20)
    copy = str(tmp_path / "negative.sqlite")
    shutil.copy(synthetic, copy)
    with sqlite3.connect(copy) as conn:  # a negative id: the map cannot hold it
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET correlationId = -5 "
                     "WHERE rowid = 3000")
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = -5 "
                     "WHERE rowid = 2000")
    del calls[:]
    both_paths(copy, monkeypatch, chunks=(64 * 4096,), fallback_ok=True)
    assert len(calls) == 2
