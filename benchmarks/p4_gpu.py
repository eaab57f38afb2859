"""P4 GPU: ``verlprof report``'s reader on a synthetic nsys export with millions of kernels.

No GPU here, so the export is built: the real table and column names of ``nsys export --type
sqlite`` (2022.4; as ``tests/unit/test_report_readers.py`` builds them), ``n`` kernels, their
CUDA runtime launch rows, some copies, and verlprof's phase ranges on two threads (one phase
nested in another). Every row comes from closed formulas of its index ``i`` (below), so the
per-phase totals have a reference computed from the same formulas with numpy, independently of
SQLite and of verlprof's reader.

Rows, for ``i`` in ``0..n-1`` (times in ns on the session base):

* runtime call ``i``: start ``LAUNCH0 + i * STEP``, correlationId ``i + 1``, thread by block of
  1,000 calls: T1, T2, T3 (T3 pushes no phase), NULL when ``i % 89 == 5``; absent when
  ``i % 97 == 3`` (its kernel falls back to its own GPU start);
* kernel ``i``: correlationId ``i + 1`` but ``i`` when ``i % 50 == 7`` (two kernels of one
  launch, as a CUDA graph gives), start = its call's start + 3,000, duration ``(i * 7919) %
  1500`` (some zero);
* copy for every ``i % 10 == 0``: correlationId ``i + 1``, duration ``100 + i % 300``.

The benchmark (:func:`run`) times the reader against one full scan of the kernel table
(``SELECT sum(end - start)``) in the same run (wall time, the goal; CPU time beside it, which
other work on the machine inflates less), and measures the reader's peak RSS in a fresh
process. The 5 M-kernel file is built once (~30 s) and cached next to the P4 reports.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time
from typing import Dict, List, Optional, Tuple

from benchmarks.bounds import deadline_s, run_bounded
from benchmarks.common import Result, median, ratios

STEP = 2000
LAUNCH0 = 1_000_000
T0 = 1_790_000_000 * 10**9
PID = 4242
T1, T2, T3 = ((PID << 24) | (PID + k) for k in range(3))
N_BENCH = 5_000_000
GOAL = 3.0

NVTX_SCHEMA = """
CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT);
CREATE TABLE ANALYSIS_DETAILS (globalVid INTEGER, duration INTEGER, startTime INTEGER,
  stopTime INTEGER);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL,
  rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER,
  endGlobalTid INTEGER, textId INTEGER, domainId INTEGER, uint64Value INTEGER,
  int64Value INTEGER, doubleValue REAL, uint32Value INTEGER, int32Value INTEGER,
  floatValue REAL, jsonTextId INTEGER, jsonText TEXT);
"""
CUDA_SCHEMA = """
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL,
  eventClass INTEGER, globalTid INTEGER, correlationId INTEGER, nameId INTEGER,
  returnValue INTEGER, callchainId INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,
  deviceId INTEGER, contextId INTEGER, streamId INTEGER, correlationId INTEGER,
  globalPid INTEGER, demangledName INTEGER, shortName INTEGER, gridX INTEGER, gridY INTEGER,
  gridZ INTEGER, blockX INTEGER, blockY INTEGER, blockZ INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL,
  deviceId INTEGER, contextId INTEGER, streamId INTEGER, correlationId INTEGER,
  globalPid INTEGER, bytes INTEGER, copyKind INTEGER, srcKind INTEGER, dstKind INTEGER);
"""
"""The GPU tables of ``nsys export --type sqlite`` that verlprof reads, with nsys' own names
(the report-reader unit tests build their small exports from it too)."""
SCHEMA = NVTX_SCHEMA + CUDA_SCHEMA

PHASE_NAMES = ("rollout/generate_sequences", "actor/compute_log_prob",
               "ref/compute_ref_log_prob", "actor/update_actor")


def phases(n: int) -> List[Tuple[str, int, int, int]]:
    """(name, start, end, globalTid) of the verlprof phase ranges for ``n`` calls: two steps;
    per step the four phases on T1, the same four shifted on T2, one nested phase on T1."""
    span = n * STEP
    out = []
    for step in range(2):
        base = LAUNCH0 + step * span // 2
        part = span // 10
        for k, name in enumerate(PHASE_NAMES):
            start = base + k * part + part // 10
            out.append((name, start, start + part * 8 // 10, T1))
            out.append((name, start + part // 3, start + part // 3 + part // 2, T2))
        inner = base + part + part // 4
        out.append(("actor/inner", inner, inner + part // 5, T1))
    return out


def build(path: str, n: int) -> str:
    """Write the synthetic export of ``n`` kernels to ``path`` (replaced)."""
    if os.path.exists(path):
        os.remove(path)
    tmp = path + ".tmp"
    if os.path.exists(tmp):
        os.remove(tmp)
    conn = sqlite3.connect(tmp)
    conn.executescript(SCHEMA)
    conn.execute("INSERT INTO StringIds VALUES (1, 'verlprof'), (2, 'actor/update_actor'), "
                 "(3, 'gemm')")
    conn.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, '', '')", (T0,))
    end = LAUNCH0 + n * STEP + 10**6
    conn.execute("INSERT INTO ANALYSIS_DETAILS VALUES (0, ?, 0, ?)", (end, end))
    nvtx: List[tuple] = [(-5, None, 75, "verlprof", None, 1, T1),
                         (0, end, 60, "VERLPROF_CAPTURE", None, 1, T1),
                         (LAUNCH0, LAUNCH0 + 500_000, 59, "other/default_domain", None, 0, T1)]
    for step, (lo, hi) in enumerate(((LAUNCH0, LAUNCH0 + n * STEP // 2),
                                     (LAUNCH0 + n * STEP // 2, LAUNCH0 + n * STEP))):
        nvtx.append((lo, hi - 1, 59, f"step/{step + 1}", None, 1, T1))
    for name, start, stop, tid in phases(n):
        registered = name == "actor/update_actor" and tid == T2
        nvtx.append((start, stop, 59, None if registered else name, 2 if registered else None,
                     1, tid))
    conn.executemany("INSERT INTO NVTX_EVENTS (start, end, eventType, text, textId, domainId, "
                     "globalTid) VALUES (?, ?, ?, ?, ?, ?, ?)", nvtx)
    series = f"WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s LIMIT {n})"
    conn.execute(
        f"INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME {series} SELECT {LAUNCH0} + i * {STEP}, "
        f"{LAUNCH0} + i * {STEP} + 900, 1, CASE WHEN i % 89 = 5 THEN NULL "
        f"WHEN (i / 1000) % 3 = 0 THEN {T1} WHEN (i / 1000) % 3 = 1 THEN {T2} ELSE {T3} END, "
        f"i + 1, 5, 0, 0 FROM s WHERE i % 97 != 3")
    conn.execute(
        f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL {series} SELECT {LAUNCH0} + i * {STEP} + 3000, "
        f"{LAUNCH0} + i * {STEP} + 3000 + (i * 7919) % 1500, 0, 1, 7, "
        f"CASE WHEN i % 50 = 7 THEN i ELSE i + 1 END, {PID << 24}, 3, 3, 64, 1, 1, 128, 1, 1 "
        "FROM s")
    conn.execute(
        f"INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY {series} SELECT {LAUNCH0} + i * {STEP} + 2500, "
        f"{LAUNCH0} + i * {STEP} + 2600 + i % 300, 0, 1, 8, i + 1, {PID << 24}, 4096, 1, 0, 2 "
        "FROM s WHERE i % 10 = 0")
    conn.commit()
    conn.close()
    os.replace(tmp, path)
    return path


def reference(n: int) -> Dict[str, List[Tuple[int, int, int]]]:
    """Per phase, in :func:`phases` order: (kernel ns, kernel count, memcpy ns), from the
    formulas with numpy (no SQL)."""
    import numpy as np

    i = np.arange(n, dtype=np.int64)
    call_start = LAUNCH0 + i * STEP
    block = (i // 1000) % 3
    tid = np.where(block == 0, T1, np.where(block == 1, T2, T3)).astype(np.int64)
    tid = np.where(i % 89 == 5, -1, tid)  # -1: unknown thread (NULL)
    exists = i % 97 != 3

    def launched(cid, own_start):
        j = cid - 1
        ok = (j >= 0) & exists[np.clip(j, 0, n - 1)]
        jj = np.clip(j, 0, n - 1)
        return np.where(ok, call_start[jj], own_start), np.where(ok, tid[jj], -1)

    k_cid = np.where(i % 50 == 7, i, i + 1)
    k_ref, k_tid = launched(k_cid, call_start + 3000)
    k_dur = (i * 7919) % 1500
    m = i[i % 10 == 0]
    m_ref, m_tid = launched(m + 1, LAUNCH0 + m * STEP + 2500)
    m_dur = 100 + m % 300
    out: Dict[str, List[Tuple[int, int, int]]] = {}
    for name, start, stop, ptid in phases(n):
        kin = (k_ref >= start) & (k_ref <= stop) & ((k_tid == -1) | (k_tid == ptid))
        min_ = (m_ref >= start) & (m_ref <= stop) & ((m_tid == -1) | (m_tid == ptid))
        out.setdefault(name, []).append((int(k_dur[kin].sum()), int(kin.sum()),
                                         int(m_dur[min_].sum())))
    return out


def totals_of(sqlite_path: str) -> Dict[str, List[Tuple[int, int, int]]]:
    """What verlprof's reader gives per phase, in start order per name."""
    from verlprof.backends.nsys.read import read_nsys_sqlite

    data = read_nsys_sqlite(sqlite_path)
    out: Dict[str, List[Tuple[int, int, int]]] = {}
    for r in data.ranges:
        out.setdefault(r.name, []).append((r.kernel_ns or 0, r.kernel_count or 0,
                                           r.memcpy_ns or 0))
    return out


def in_phase_order(n: int, got: Dict[str, List[Tuple[int, int, int]]]
                   ) -> Dict[str, List[Tuple[int, int, int]]]:
    """``got`` re-ordered as :func:`phases` lists them (the reader sorts by start)."""
    order: Dict[str, List[int]] = {}
    for name, start, _, _ in phases(n):
        order.setdefault(name, []).append(start)
    out = {}
    for name, starts in order.items():
        ranked = sorted(range(len(starts)), key=lambda k: starts[k])
        values = got.get(name, [])
        out[name] = [values[ranked.index(k)] for k in range(len(starts))] \
            if len(values) == len(starts) else values
    return out


def _child(path: str) -> None:
    import verlprof.backends.nsys.read  # noqa: F401 - imports are not the reader's time

    began, cpu = time.perf_counter(), time.process_time()
    totals_of(path)
    seconds, cpu = time.perf_counter() - began, time.process_time() - cpu
    # VmHWM: this address space's peak (ru_maxrss would keep the parent's across exec)
    with open("/proc/self/status") as handle:
        peak = [int(line.split()[1]) for line in handle if line.startswith("VmHWM:")][0]
    print(f"{seconds} {peak} {cpu}")


def run(cache_dir: Optional[str] = None, n: int = N_BENCH, rounds: int = 3, log=print) -> Result:
    from benchmarks.p4_sizes import cache_root

    folder = cache_dir or cache_root()
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"gpu_{n}.sqlite")
    if not os.path.isfile(path):
        began = time.monotonic()
        build(path, n)
        log(f"P4 GPU: built {path} ({os.path.getsize(path) >> 20} MiB, "
            f"{time.monotonic() - began:.0f} s)")
    scans: List[float] = []
    scan_cpu: List[float] = []
    reads: List[float] = []
    read_cpu: List[float] = []
    rss: List[int] = []
    for _ in range(rounds):
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        began, cpu = time.perf_counter(), time.process_time()
        conn.execute("SELECT sum(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
        scans.append(time.perf_counter() - began)
        scan_cpu.append(time.process_time() - cpu)
        conn.close()
        proc = run_bounded("p4-gpu-child", [sys.executable, "-m", "benchmarks.p4_gpu",
                                            "--child", path],
                           deadline_s(60, 60e-6, n), f"the GPU reader on {path}")
        if proc.returncode != 0:
            raise RuntimeError(f"the GPU reader failed: {proc.stderr.strip()[-300:]}")
        seconds, kib, cpu_s = proc.stdout.split()
        reads.append(float(seconds))
        read_cpu.append(float(cpu_s))
        rss.append(int(kib))
    got = in_phase_order(n, totals_of(path))
    want = reference(n)
    equal = got == want
    ratio = median(reads) / median(scans)
    return Result(
        f"P4 GPU: reader on {n / 1e6:g} M kernels vs one scan of the kernel table", ratio, GOAL,
        samples=ratios(reads, scans),
        details=[f"reader (read_nsys_sqlite, GPU per phase by gpu_numpy) {median(reads):.2f} s; "
                 f"SELECT sum(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL "
                 f"{median(scans):.2f} s; file {os.path.getsize(path) >> 20} MiB; "
                 f"load average {os.getloadavg()[0]:.1f}",
                 f"CPU time (both threads of the reader): {median(read_cpu):.2f} s vs "
                 f"{median(scan_cpu):.2f} s ({median(read_cpu) / median(scan_cpu):.2f}x)",
                 f"reader peak RSS {max(rss) / 1024:.0f} MiB (fresh process, imports "
                 "included)",
                 f"per-phase totals equal to the numpy reference: {equal}"],
        note="" if equal else "per-phase totals DIFFER from the reference")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        _child(sys.argv[2])
    else:
        res = run()
        print(res.line(), *res.details, sep="\n  ")
