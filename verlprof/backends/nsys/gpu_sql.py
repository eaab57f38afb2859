"""GPU time per phase, computed inside SQLite: no Python object per kernel or copy.

A kernel (``CUPTI_ACTIVITY_KIND_KERNEL``) or copy (``..._MEMCPY``) belongs to every phase
range that contains its *reference time* on the right thread: the start of the CUDA runtime
call that launched it (``CUPTI_ACTIVITY_KIND_RUNTIME``, matched by ``correlationId``; the
last such row wins, as a dict would), made on the thread that pushed the phase; an event
without a runtime row keeps its own GPU start and is matched by time alone, as is a runtime
row without a thread or a phase without one. Bounds are inclusive at both ends.

How (two table scans, one temporary table, memory bounded by SQLite's page cache):

1. The phase bounds cut time into *slots* (``slot(t)`` = number of bounds ``<= t``; a phase
   ``[s, e]`` is the slots ``slot(s)..slot(e)``). The phases' threads give a *class* per
   runtime row: 0 unknown, 1..T a phase's thread, T+1 any other thread. One pass over the
   runtime table writes ``correlationId -> slot * (T + 2) + class`` into a temporary rowid
   table (the slot is a nested ``CASE`` binary search, written into the SQL).
2. One pass over the kernels (then the copies) looks each up by rowid and adds its duration
   to a small per-key accumulator table (an upsert; cheaper than GROUP BY's sort).
3. Python sums the accumulator's few rows per phase with prefix sums per class.

Temporary tables go where SQLite keeps temporary files (``SQLITE_TMPDIR``, else ``/var/tmp``
or ``/tmp``) through a page cache of ``cache_kib``: memory does not grow with the report.
"""

from __future__ import annotations

import bisect
import sqlite3
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY_TABLE = "CUPTI_ACTIVITY_KIND_MEMCPY"
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
DEFAULT_CACHE_KIB = 32 * 1024
"""SQLite page cache per connection (main and temp database each)."""

Totals = List[Tuple[int, int]]
"""Per phase ``(total ns, count)``."""


@dataclass(frozen=True)
class Span:
    """A phase range on the report's session time base."""

    start_ns: int
    end_ns: int
    global_tid: Optional[int] = None
    """nsys ``globalTid`` of the thread that pushed it (None: matches launches on any thread)."""


@dataclass(frozen=True)
class GpuTotals:
    """What :func:`gpu_totals` found; a field is None when the report has no such table."""

    kernels: Optional[Totals]
    memcpy: Optional[Totals]


def gpu_totals(conn: sqlite3.Connection, tables: set, spans: Sequence[Span],
               cache_kib: int = DEFAULT_CACHE_KIB) -> GpuTotals:
    """Kernel and memcpy ``(ns, count)`` per span, in span order (see the module doc)."""
    has_k, has_m = KERNEL_TABLE in tables, MEMCPY_TABLE in tables
    if not spans or not (has_k or has_m):
        empty: Totals = []
        return GpuTotals(empty if has_k else None, empty if has_m else None)
    conn.execute(f"PRAGMA cache_size = {-int(cache_kib)}")
    conn.execute(f"PRAGMA temp.cache_size = {-int(cache_kib)}")
    plan = _Plan(spans)
    events = [t for t in (KERNEL_TABLE, MEMCPY_TABLE) if t in tables and _any_row(conn, t)]
    launch = bool(events) and RUNTIME_TABLE in tables and \
        {"correlationId", "start"} <= _columns(conn, RUNTIME_TABLE)
    if launch:
        thread = "r.globalTid" if "globalTid" in _columns(conn, RUNTIME_TABLE) else "NULL"
        conn.execute("CREATE TEMP TABLE vp_launch (cid INTEGER PRIMARY KEY, key INTEGER)")
        conn.execute(f"INSERT OR REPLACE INTO vp_launch (cid, key) SELECT r.correlationId, "
                     f"{plan.slot_sql('r.start')} * {plan.width} + {plan.class_sql(thread)} "
                     f"FROM {RUNTIME_TABLE} r WHERE r.correlationId IS NOT NULL "
                     "AND r.start IS NOT NULL")
    out: Dict[str, Totals] = {}
    for table in (KERNEL_TABLE, MEMCPY_TABLE):
        if table not in tables:
            continue
        out[table] = plan.per_span(_accumulate(conn, table, plan, launch)) \
            if table in events else [(0, 0)] * len(spans)
    if launch:
        conn.execute("DROP TABLE temp.vp_launch")
    return GpuTotals(out.get(KERNEL_TABLE), out.get(MEMCPY_TABLE))


def _accumulate(conn: sqlite3.Connection, table: str, plan: _Plan,
                launch: bool) -> Dict[int, Tuple[int, int]]:
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


class _Plan:
    """Slots and thread classes of a set of spans, as SQL and back."""

    def __init__(self, spans: Sequence[Span]) -> None:
        self.spans = list(spans)
        self.bounds = sorted({s.start_ns for s in spans} | {s.end_ns + 1 for s in spans})
        self.threads = sorted({s.global_tid for s in spans if s.global_tid is not None})
        self.width = len(self.threads) + 2
        """Classes: 0 unknown thread, 1..T the spans' threads, T+1 another thread."""

    def slot_sql(self, column: str) -> str:
        """SQL for the number of bounds ``<= column``: a balanced tree of CASEs (depth
        log2 of the number of bounds), evaluated by SQLite per row."""
        def node(lo: int, hi: int) -> str:
            if lo == hi:
                return str(lo)
            mid = (lo + hi) // 2
            return (f"CASE WHEN {column} < {int(self.bounds[mid])} THEN {node(lo, mid)} "
                    f"ELSE {node(mid + 1, hi)} END")
        return f"({node(0, len(self.bounds))})"

    def class_sql(self, column: str) -> str:
        if column == "NULL":
            return "0"
        arms = " ".join(f"WHEN {int(t)} THEN {i + 1}" for i, t in enumerate(self.threads))
        other = self.width - 1
        return f"(CASE {column} {arms} ELSE (CASE WHEN {column} IS NULL THEN 0 " \
               f"ELSE {other} END) END)"

    def per_span(self, acc: Dict[int, Tuple[int, int]]) -> Totals:
        slots = len(self.bounds) + 1
        # prefix[c][j] = totals of class c over slots < j
        prefix_ns = [[0] * (slots + 1) for _ in range(self.width)]
        prefix_n = [[0] * (slots + 1) for _ in range(self.width)]
        for key, (ns, n) in acc.items():
            slot, cls = divmod(key, self.width)
            prefix_ns[cls][slot + 1] += ns
            prefix_n[cls][slot + 1] += n
        for cls in range(self.width):
            for j in range(1, slots + 1):
                prefix_ns[cls][j] += prefix_ns[cls][j - 1]
                prefix_n[cls][j] += prefix_n[cls][j - 1]
        out: Totals = []
        for span in self.spans:
            lo = bisect.bisect_right(self.bounds, span.start_ns)
            hi = bisect.bisect_right(self.bounds, span.end_ns)
            if span.global_tid is None:
                classes = list(range(self.width))
            else:
                classes = [0, self.threads.index(span.global_tid) + 1]
            out.append((sum(prefix_ns[c][hi + 1] - prefix_ns[c][lo] for c in classes),
                        sum(prefix_n[c][hi + 1] - prefix_n[c][lo] for c in classes)))
        return out


def _any_row(conn: sqlite3.Connection, table: str) -> bool:
    return conn.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone() is not None


def _columns(conn: sqlite3.Connection, table: str) -> set:
    return {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
