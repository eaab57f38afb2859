"""GPU time per phase with numpy: SQLite streams compact text, numpy maps and sums.

The rule is :mod:`~verlprof.backends.nsys.gpu_plan`'s, computed as the SQL path of
:mod:`~verlprof.backends.nsys.gpu_sql` computes it, to the same totals; this path is about 3x
faster on millions of kernels, because the SQL path's per-row B-tree work (a temporary row per
runtime call, a lookup and an upsert per kernel) becomes array work here.

How, in chunks of ``chunk_rows`` rowids (so memory does not grow with the report):

1. The runtime table, in rowid order: one query per chunk returns
   ``group_concat(correlationId)`` and ``group_concat((start - base) * W + thread code)`` (one
   aggregate less than two columns; the code is 0 unknown thread, 1 another one, 2.. a phase's
   thread). numpy parses both (``np.fromstring``), computes each call's key (slot by
   ``searchsorted`` on the phase bounds) and writes it into a dense array indexed by
   correlationId, chunk after chunk, so the last row of a duplicate id wins, as in the SQL path.
2. Each event table: ``correlationId``, ``start - base`` and ``end - start`` per chunk; the key
   is the launching call's, else the event's own slot with class 0; ``np.bincount`` sums
   durations and counts per key.

Two threads run the chunks, each on its own read-only connection (sqlite3 releases the GIL
while SQLite steps). Whatever this path cannot do exactly raises :class:`Unfit` inside and
gives None: the caller then runs the SQL path. That is: a dense map larger than
``map_bytes`` (correlationIds too large or sparse), negative correlationIds, a value that is
not an integer or overflows (SQLite makes it a REAL, whose text does not parse), an export
that is not a file.
"""

from __future__ import annotations

import collections
import queue
import sqlite3
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional, Tuple

from verlprof.backends.nsys.gpu_plan import RUNTIME_TABLE, Plan

CHUNK_ROWS = 1 << 17
"""Rows per query: each in-flight chunk holds about 150 bytes per row (text and arrays)."""
MAP_BYTES = 48 << 20
"""Largest correlationId -> key map (2 or 4 bytes per id up to the largest id)."""
SCAN_CACHE_KIB = 1024
"""Page cache of each scanning connection: chunks are read once, in rowid order."""
THREADS = 2

Acc = Dict[int, Tuple[int, int]]
_DIGITS = b"0123456789,-"


class Unfit(Exception):
    """This path cannot give the exact totals for this report: the caller falls back."""


def numpy_totals(conn: sqlite3.Connection, plan: Plan, events: List[Tuple[str, bool]],
                 runtime_thread: Optional[str], launch: bool,
                 chunk_rows: int = CHUNK_ROWS, map_bytes: Optional[int] = None
                 ) -> Optional[Dict[str, Acc]]:
    """``table -> {key: (ns, count)}`` for each ``(table, has correlationId)`` in ``events``,
    or None when this path cannot give them exactly (see the module doc). ``launch``: the
    runtime table can be used; ``runtime_thread``: its thread column, or None;
    ``map_bytes``: the map's bound (None: :data:`MAP_BYTES`)."""
    import numpy  # here, not at import: only reports with many GPU rows pay for it

    map_bytes = MAP_BYTES if map_bytes is None else map_bytes
    if launch and _last_rowid(conn, RUNTIME_TABLE) * 2 > map_bytes:
        return None  # more calls than the map can hold ids (at 2 bytes each): don't start

    path = _main_file(conn)
    if path is None:
        return None
    pool = _Pool(path)
    try:
        calc = _Calc(numpy, plan)
        keys = calc.launch_map(pool, runtime_thread, chunk_rows, map_bytes) if launch \
            else None
        return {table: calc.event_totals(pool, table, keys if has_cid else None, chunk_rows)
                for table, has_cid in events}
    except Unfit:
        return None
    finally:
        pool.close()


class _Calc:
    """The per-chunk work, on numpy arrays."""

    def __init__(self, np: Any, plan: Plan) -> None:
        self.np = np
        self.plan = plan
        self.base = int(plan.bounds[0])
        self.bounds = np.array([b - self.base for b in plan.bounds], dtype=np.int64)
        self.width = plan.width
        t = len(plan.threads)
        # thread code -> class: 0 unknown -> 0, 1 another thread -> T+1, i+2 -> i+1
        self.classes = np.array([0, t + 1] + list(range(1, t + 1)), dtype=np.int64)
        self.key_type = np.int16 if plan.keys < (1 << 15) else np.int32

    def code_sql(self, column: Optional[str]) -> str:
        """SQL for a thread's code: 0 unknown, 1 another thread, i+2 the phases' i-th."""
        if column is None:
            return "0"
        arms = " ".join(f"WHEN {int(t)} THEN {i + 2}" for i, t in enumerate(self.plan.threads))
        return f"(CASE {column} {arms} ELSE {column} IS NOT NULL END)"

    def slot(self, rel_start: Any) -> Any:
        return self.np.searchsorted(self.bounds, rel_start, side="right")

    def launch_map(self, pool: _Pool, thread: Optional[str], chunk_rows: int,
                   map_bytes: int) -> Any:
        """Dense ``correlationId -> key`` array, -1 where no runtime row has the id."""
        np = self.np
        # no count(*): both values are non-NULL on every row kept, so the two lists align
        sql = (f"SELECT group_concat(correlationId), group_concat((start - {self.base}) * "
               f"{self.width} + {self.code_sql(thread)}) FROM {RUNTIME_TABLE} "
               "WHERE rowid BETWEEN ? AND ? AND correlationId IS NOT NULL"
               f"{pool.not_null(RUNTIME_TABLE, 'start')}")

        def chunk(conn: sqlite3.Connection, lo: int, hi: int) -> Tuple[Any, Any]:
            cid_text, packed_text = conn.execute(sql, (lo, hi)).fetchone()
            cid = _need(_ints(np, cid_text))
            count = len(cid)
            packed = _need(_ints(np, packed_text, count))
            rel, code = np.divmod(packed, self.width)
            del packed
            key = (self.slot(rel) * self.width + self.classes[code]).astype(self.key_type)
            if count and int(cid.min()) < 0:
                raise Unfit("negative correlationId")
            if count > 1 and not bool(np.all(cid[1:] > cid[:-1])):
                # duplicates within the chunk: keep each id's last row (rowid order)
                order = np.argsort(cid, kind="stable")
                cid, key = cid[order], key[order]
                last = np.append(cid[1:] != cid[:-1], True)
                cid, key = cid[last], key[last]
            return cid, key

        size = np.dtype(self.key_type).itemsize
        keys = np.full(0, -1, dtype=self.key_type)
        for cid, key in pool.ordered(RUNTIME_TABLE, chunk_rows, chunk):
            if not len(cid):
                continue
            top = int(cid.max()) + 1
            if top > len(keys):
                if top * size > map_bytes:
                    raise Unfit("correlationIds too large for a dense map")
                grown = np.full(min(max(top, len(keys) * 3 // 2), map_bytes // size), -1,
                                dtype=self.key_type)
                grown[:len(keys)] = keys
                keys = grown
            keys[cid] = key  # chunks in rowid order: a later row of an id wins
        return keys

    def event_totals(self, pool: _Pool, table: str, keys: Any, chunk_rows: int) -> Acc:
        """``key -> (ns, count)`` of ``table``'s events; ``keys``: the launch map, or None
        (each event by its own start)."""
        np = self.np
        where = f"FROM {table} WHERE rowid BETWEEN ? AND ?" \
                f"{pool.not_null(table, 'start')}{pool.not_null(table, 'end')}"
        # duration and id in one integer (one text value per event, no count(*)): exact
        # while every id is in 0..2^32-1 (CUPTI's are 32-bit); one that is not, or NULL, gives
        # 'x', and an overflow a REAL, neither an integer: the chunk is then read plainly
        packed = f"SELECT group_concat(CASE WHEN correlationId >> 32 = 0 THEN " \
                 f"(end - start) * 4294967296 + correlationId ELSE 'x' END) {where}"
        # the chunk's first and last rowids by two seeks (min() and max() would scan it)
        ends = f"SELECT (SELECT rowid FROM {table} WHERE rowid >= ? ORDER BY rowid LIMIT 1), " \
               f"(SELECT rowid FROM {table} WHERE rowid <= ? ORDER BY rowid DESC LIMIT 1)"
        cid_sql = "ifnull(correlationId, -1)" if keys is not None else "NULL"
        plain = f"SELECT group_concat({cid_sql}), group_concat(start - {self.base}), " \
                f"group_concat(end - start), count(*) {where}"
        own = f"SELECT group_concat(rowid), group_concat(start - {self.base}) FROM {table} " \
              "WHERE rowid IN (SELECT value FROM json_each(?))"

        def by_own_start(conn: sqlite3.Connection, lo: int, hi: int) -> Tuple[Any, Any]:
            cid_text, start_text, dur_text, count = conn.execute(plain, (lo, hi)).fetchone()
            dur = _need(_ints(np, dur_text, count))
            key = self.slot(_need(_ints(np, start_text, count))) * self.width
            if keys is not None:
                cid = _need(_ints(np, cid_text, count))
                known = (cid >= 0) & (cid < len(keys))
                launched = np.full(count, -1, dtype=np.int64)
                launched[known] = keys[cid[known]]
                key = np.where(launched >= 0, launched, key)
            return key, dur

        def chunk(conn: sqlite3.Connection, lo: int, hi: int) -> Tuple[Any, Any]:
            if keys is None:
                return self.sums(*by_own_start(conn, lo, hi))
            values = _ints(np, conn.execute(packed, (lo, hi)).fetchone()[0])
            if values is None:  # NULL ids, ids beyond 32 bits, overflow
                return self.sums(*by_own_start(conn, lo, hi))
            count = len(values)
            cid = values & 0xFFFFFFFF
            dur = values >> 32  # floor: a negative duration decodes as itself
            del values
            key = np.full(count, -1, dtype=np.int64)
            known = cid < len(keys)
            key[known] = keys[cid[known]]
            missing = np.flatnonzero(key < 0)  # no runtime row: the event's own start
            if len(missing):
                first, last = conn.execute(ends, (lo, hi)).fetchone()
                if len(missing) * 4 > count or last - first + 1 != count:
                    return self.sums(*by_own_start(conn, lo, hi))
                rowids = missing + first  # the chunk's rows are contiguous
                got_ids, got_start = conn.execute(own, (_json(rowids),)).fetchone()
                at = np.searchsorted(rowids, _need(_ints(np, got_ids, len(missing))))
                key[missing[at]] = self.slot(_need(_ints(np, got_start, len(missing)))) \
                    * self.width
            return self.sums(key, dur)

        total_ns = np.zeros(self.plan.keys, dtype=np.int64)
        total_n = np.zeros(self.plan.keys, dtype=np.int64)
        for ns, n in pool.ordered(table, chunk_rows, chunk):
            total_ns += ns
            total_n += n
        return {int(k): (int(total_ns[k]), int(total_n[k])) for k in np.flatnonzero(total_n)}

    def sums(self, key: Any, dur: Any) -> Tuple[Any, Any]:
        """Per key: total of ``max(dur, 0)`` and count."""
        np = self.np
        dur = np.maximum(dur, 0)
        n = np.bincount(key, minlength=self.plan.keys)
        if len(dur) and int(dur.max()) * len(dur) < (1 << 53):  # float sums stay exact
            ns = np.bincount(key, weights=dur, minlength=self.plan.keys).astype(np.int64)
        else:
            ns = np.zeros(self.plan.keys, dtype=np.int64)
            np.add.at(ns, key, dur)
        return ns, n


class _Pool:
    """Threads with one read-only connection each; chunks run in order, a few at once."""

    def __init__(self, path: str) -> None:
        self.conns: queue.Queue[sqlite3.Connection] = queue.Queue()
        self.opened: List[sqlite3.Connection] = []
        uri = Path(path).resolve().as_uri() + "?mode=ro"
        for _ in range(THREADS):
            conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
            conn.text_factory = bytes  # the numbers' text, parsed by numpy without decoding
            conn.execute(f"PRAGMA cache_size = {-SCAN_CACHE_KIB}")
            self.opened.append(conn)
            self.conns.put(conn)
        self.executor = ThreadPoolExecutor(THREADS, thread_name_prefix="verlprof-gpu")

    def ordered(self, table: str, chunk_rows: int,
                work: Callable[[sqlite3.Connection, int, int], Any]) -> Iterator[Any]:
        """``work(conn, lo, hi)`` over the table's rowid chunks, results in rowid order;
        at most two chunks per thread in flight (memory stays bounded)."""
        first, last = self.opened[0].execute(f"SELECT min(rowid), max(rowid) FROM {table}"
                                             ).fetchone()
        if first is None:
            return
        starts = iter(range(int(first), int(last) + 1, max(1, chunk_rows)))
        flight: Deque[Future] = collections.deque()

        def run(lo: int) -> Any:
            conn = self.conns.get()
            try:
                return work(conn, lo, lo + chunk_rows - 1)
            finally:
                self.conns.put(conn)

        try:
            for lo in starts:
                flight.append(self.executor.submit(run, lo))
                if len(flight) >= 2 * THREADS:
                    yield flight.popleft().result()
            while flight:
                yield flight.popleft().result()
        finally:
            for pending in flight:
                pending.cancel()
            for pending in flight:
                if not pending.cancelled():
                    pending.exception()  # wait: its connection must be idle when closed

    def not_null(self, table: str, column: str) -> str:
        """`` AND column IS NOT NULL``, unless the table declares the column NOT NULL."""
        declared = {r[1]: bool(r[3]) for r in self.opened[0].execute(
            f"PRAGMA table_info({table})")}
        return "" if declared.get(column) else f" AND {column} IS NOT NULL"

    def close(self) -> None:
        self.executor.shutdown(wait=True)
        for conn in self.opened:
            conn.close()


def _ints(np: Any, text: Optional[bytes], count: Optional[int] = None) -> Any:
    """The integers of a ``group_concat`` (``count`` of them when given), or None when it
    holds anything else (NULLs left out, REALs from an overflow, text)."""
    if text is None and not count:
        return np.zeros(0, dtype=np.int64)
    if text is None or text.translate(None, _DIGITS):
        return None
    values = np.fromstring(text, dtype=np.int64, sep=",")
    want = text.count(b",") + 1 if count is None else count
    return values if values.size == want else None


def _need(values: Any) -> Any:
    if values is None:
        raise Unfit("not one integer per row")
    return values


def _json(values: Any) -> str:
    return "[" + ",".join(map(str, values.tolist())) + "]"


def _last_rowid(conn: sqlite3.Connection, table: str) -> int:
    return int(conn.execute(f"SELECT max(rowid) FROM {table}").fetchone()[0] or 0)


def _main_file(conn: sqlite3.Connection) -> Optional[str]:
    for _, name, file in conn.execute("PRAGMA database_list"):
        if name == "main":
            return str(file) if file else None
    return None
