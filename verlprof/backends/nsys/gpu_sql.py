"""GPU time per phase: the numpy path for large reports, else inside SQLite.

The rule (:mod:`~verlprof.backends.nsys.gpu_plan`): a kernel (``CUPTI_ACTIVITY_KIND_KERNEL``)
or copy (``..._MEMCPY``) belongs to every phase range that contains its *reference time* on
the right thread: the start of the CUDA runtime call that launched it
(``CUPTI_ACTIVITY_KIND_RUNTIME``, matched by ``correlationId``; the last such row wins, as a
dict would), made on the thread that pushed the phase; an event without a runtime row keeps
its own GPU start and is matched by time alone, as is a runtime row without a thread or a
phase without one. Bounds are inclusive at both ends.

:func:`gpu_totals` hands reports with at least ``fast_min_rows`` kernels and copies to
:mod:`~verlprof.backends.nsys.gpu_numpy` (numpy; memory bounded by its chunks and its map),
and computes here, in SQLite, when that path declines (see its doc) or the report is small
(no numpy import). The SQL path: two table scans, one temporary table, memory bounded by
SQLite's page cache:

1. One pass over the runtime table writes ``correlationId -> slot * (T + 2) + class`` into a
   temporary rowid table (the slot is a nested ``CASE`` binary search, written into the SQL).
2. One pass over the kernels (then the copies) looks each up by rowid and adds its duration
   to a small per-key accumulator table (an upsert; cheaper than GROUP BY's sort).
3. :meth:`Plan.per_span` sums the accumulator's few rows per phase.

Temporary tables go where SQLite keeps temporary files (``SQLITE_TMPDIR``, else ``/var/tmp``
or ``/tmp``) through a page cache of ``cache_kib``: memory does not grow with the report.
"""

from __future__ import annotations

import sqlite3
from typing import Dict, List, Optional, Sequence

from verlprof.backends.nsys.gpu_plan import (
    KERNEL_TABLE,
    MEMCPY_TABLE,
    RUNTIME_TABLE,
    Acc,
    GpuTotals,
    Plan,
    Span,
    Totals,
)

__all__ = ["DEFAULT_CACHE_KIB", "FAST_MIN_ROWS", "KERNEL_TABLE", "MEMCPY_TABLE",
           "RUNTIME_TABLE", "GpuTotals", "Span", "Totals", "gpu_totals"]
DEFAULT_CACHE_KIB = 32 * 1024
"""SQLite page cache per connection (main and temp database each)."""
FAST_MIN_ROWS = 200_000
"""Kernels and copies (by rowid) from which the numpy path is tried: below, the SQL path
takes well under a second and the report is spared numpy's import."""


def gpu_totals(conn: sqlite3.Connection, tables: set, spans: Sequence[Span],
               cache_kib: int = DEFAULT_CACHE_KIB, fast_min_rows: Optional[int] = FAST_MIN_ROWS,
               chunk_bytes: Optional[int] = None) -> GpuTotals:
    """Kernel and memcpy ``(ns, count)`` per span, in span order (see the module doc).
    ``fast_min_rows``: from how many kernel and copy rows numpy is tried (None: never);
    ``chunk_bytes``: its chunks of pages (None: its default)."""
    has_k, has_m = KERNEL_TABLE in tables, MEMCPY_TABLE in tables
    if not spans or not (has_k or has_m):
        empty: Totals = []
        return GpuTotals(empty if has_k else None, empty if has_m else None)
    plan = Plan(spans)
    events = [t for t in (KERNEL_TABLE, MEMCPY_TABLE) if t in tables and _any_row(conn, t)]
    launch = bool(events) and RUNTIME_TABLE in tables and \
        {"correlationId", "start"} <= _columns(conn, RUNTIME_TABLE)
    thread = "globalTid" if launch and "globalTid" in _columns(conn, RUNTIME_TABLE) else None
    acc: Optional[Dict[str, Acc]] = None
    if events and fast_min_rows is not None and _rows(conn, events) >= fast_min_rows:
        from verlprof.backends.nsys import gpu_numpy  # numpy: only for large GPU tables

        acc = gpu_numpy.numpy_totals(
            conn, plan, [(t, launch and "correlationId" in _columns(conn, t)) for t in events],
            thread, launch, chunk_bytes or gpu_numpy.CHUNK_BYTES)
    if acc is None:
        acc = _sql_totals(conn, plan, events, thread, launch, cache_kib)
    out: Dict[str, Totals] = {}
    for table in (KERNEL_TABLE, MEMCPY_TABLE):
        if table in tables:
            out[table] = plan.per_span(acc[table]) if table in acc else [(0, 0)] * len(spans)
    return GpuTotals(out.get(KERNEL_TABLE), out.get(MEMCPY_TABLE))


def _sql_totals(conn: sqlite3.Connection, plan: Plan, events: List[str],
                thread: Optional[str], launch: bool, cache_kib: int) -> Dict[str, Acc]:
    """The SQL path: ``table -> {key: (ns, count)}`` for each table of ``events``."""
    conn.execute(f"PRAGMA cache_size = {-int(cache_kib)}")
    conn.execute(f"PRAGMA temp.cache_size = {-int(cache_kib)}")
    if launch:
        conn.execute("CREATE TEMP TABLE vp_launch (cid INTEGER PRIMARY KEY, key INTEGER)")
        who = f"r.{thread}" if thread else "NULL"
        conn.execute(f"INSERT OR REPLACE INTO vp_launch (cid, key) SELECT r.correlationId, "
                     f"{plan.slot_sql('r.start')} * {plan.width} + {plan.class_sql(who)} "
                     f"FROM {RUNTIME_TABLE} r WHERE r.correlationId IS NOT NULL "
                     "AND r.start IS NOT NULL")
    try:
        return {table: _accumulate(conn, table, plan, launch) for table in events}
    finally:
        if launch:
            conn.execute("DROP TABLE temp.vp_launch")


def _accumulate(conn: sqlite3.Connection, table: str, plan: Plan, launch: bool) -> Acc:
    """key -> (ns, count) of ``table``'s events."""
    has_cid = launch and "correlationId" in _columns(conn, table)
    own = f"{plan.slot_sql('e.start')} * {plan.width}"
    key, join = (f"coalesce(l.key, {own})",
                 "LEFT JOIN temp.vp_launch l ON l.cid = e.correlationId") if has_cid \
        else (own, "")
    conn.execute("CREATE TEMP TABLE vp_acc (key INTEGER PRIMARY KEY, ns INTEGER, n INTEGER)")
    try:
        # an upsert into a table of a few rows: no sort of the millions of events
        conn.execute(f"INSERT INTO vp_acc (key, ns, n) SELECT {key}, max(e.end - e.start, 0), 1 "
                     f"FROM {table} e {join} WHERE e.start IS NOT NULL AND e.end IS NOT NULL "
                     "ON CONFLICT (key) DO UPDATE SET ns = ns + excluded.ns, n = n + 1")
        return {int(k): (int(ns), int(n))
                for k, ns, n in conn.execute("SELECT key, ns, n FROM vp_acc")}
    finally:
        conn.execute("DROP TABLE temp.vp_acc")


def _any_row(conn: sqlite3.Connection, table: str) -> bool:
    return conn.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone() is not None


def _columns(conn: sqlite3.Connection, table: str) -> set:
    return {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}


def _rows(conn: sqlite3.Connection, tables: List[str]) -> int:
    """About how many rows the tables hold (their largest rowids: no scan)."""
    return sum(int(conn.execute(f"SELECT max(rowid) FROM {t}").fetchone()[0] or 0)
               for t in tables)
