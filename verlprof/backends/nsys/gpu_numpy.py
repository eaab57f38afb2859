"""GPU time per phase with numpy, on columns decoded from the export's pages.

The rule is :mod:`~verlprof.backends.nsys.gpu_plan`'s, computed as the SQL path of
:mod:`~verlprof.backends.nsys.gpu_sql` computes it, to the same totals. The SQL path pays
SQLite's per-row B-tree work (a temporary row per runtime call, a lookup and an upsert per
kernel); here the columns come out of the database file's pages as arrays
(:mod:`~verlprof.backends.nsys.sqlite_pages`) and everything else is array work.

How, in chunks of :data:`CHUNK_BYTES` of leaf pages (so memory does not grow with the report):

1. The runtime table, in rowid order: each call's key (slot by ``searchsorted`` on the phase
   bounds, class by its thread) is written into a dense array indexed by correlationId, chunk
   after chunk, so the last row of a duplicate id wins, as in the SQL path.
2. Each event table: the key is the launching call's, else the event's own slot with class 0;
   ``np.bincount`` sums durations and counts per key.

Two threads decode the chunks (numpy releases the GIL in its loops). Whatever this path
cannot do exactly gives None and the caller runs the SQL path: a dense map larger than
``map_bytes`` (correlationIds too large or sparse), a negative correlationId, a table that
:class:`~verlprof.backends.nsys.sqlite_pages.TablePages` cannot decode (a REAL where an integer
belongs, WAL mode, ...), an export that is not a file.
"""

from __future__ import annotations

import collections
import sqlite3
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from verlprof.backends.nsys.gpu_plan import RUNTIME_TABLE, Acc, Plan
from verlprof.backends.nsys.sqlite_pages import Chunk, NotPlain, TablePages

CHUNK_BYTES = 2 << 20
"""Leaf pages per chunk, in bytes: a chunk's arrays take about 10x that while decoded."""
MAP_BYTES = 48 << 20
"""Largest correlationId -> key map (2 or 4 bytes per id up to the largest id)."""
THREADS = 2


class Unfit(Exception):
    """This path cannot give the exact totals for this report: the caller falls back."""


def numpy_totals(conn: sqlite3.Connection, plan: Plan, events: List[Tuple[str, bool]],
                 runtime_thread: Optional[str], launch: bool,
                 chunk_bytes: int = CHUNK_BYTES, map_bytes: Optional[int] = None
                 ) -> Optional[Dict[str, Acc]]:
    """``table -> {key: (ns, count)}`` for each ``(table, has correlationId)`` in ``events``,
    or None when this path cannot give them exactly (see the module doc). ``launch``: the
    runtime table can be used; ``runtime_thread``: its thread column, or None;
    ``map_bytes``: the map's bound (None: :data:`MAP_BYTES`)."""
    map_bytes = MAP_BYTES if map_bytes is None else map_bytes
    path = _main_file(conn)
    if path is None:
        return None
    began = not conn.in_transaction
    if began:  # a shared lock for the whole read: no writer changes the file meanwhile
        conn.execute("BEGIN")
    try:
        conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()
        calc = _Calc(plan, chunk_bytes)
        keys = calc.launch_map(conn, path, runtime_thread, map_bytes) if launch else None
        return {table: calc.event_totals(conn, path, table, keys if has_cid else None)
                for table, has_cid in events}
    except (Unfit, NotPlain):
        return None
    finally:
        if began:
            conn.execute("ROLLBACK")


class _Calc:
    """The per-chunk work, on numpy arrays."""

    def __init__(self, plan: Plan, chunk_bytes: int) -> None:
        self.plan = plan
        self.chunk_bytes = chunk_bytes
        self.bounds = np.array(plan.bounds, dtype=np.int64)
        self.width = plan.width
        self.threads = np.array(plan.threads, dtype=np.int64)
        self.key_type = np.int16 if plan.keys < (1 << 15) else np.int32

    def slot(self, start: Any) -> Any:
        return np.searchsorted(self.bounds, start, side="right")

    def thread_class(self, tid: Any, null: Optional[Any]) -> Any:
        """0 unknown thread (NULL), i+1 the phases' i-th thread, T+1 another thread."""
        t = len(self.threads)
        if not t:
            found = np.zeros(len(tid), dtype=bool)
            at = found.astype(np.int64)
        else:
            at = np.searchsorted(self.threads, tid)
            found = self.threads[np.minimum(at, t - 1)] == tid
        cls = np.where(found, at + 1, t + 1)
        if null is not None:
            cls[null] = 0
        return cls

    def launch_map(self, conn: sqlite3.Connection, path: str, thread: Optional[str],
                   map_bytes: int) -> Any:
        """Dense ``correlationId -> key`` array, -1 where no runtime row has the id."""
        columns = ["correlationId", "start"] + ([thread] if thread else [])

        def chunk(part: Chunk) -> Tuple[Any, Any]:
            (cid, start, *tid), (_, _, *tid_null) = _rows_with(part, 2)
            if len(cid) and int(cid.min()) < 0:
                raise Unfit("negative correlationId")
            cls = self.thread_class(tid[0], tid_null[0]) if tid else 0
            key = (self.slot(start) * self.width + cls).astype(self.key_type)
            if len(cid) > 1 and not bool(np.all(cid[1:] > cid[:-1])):
                # duplicates within the chunk: keep each id's last row (rowid order)
                order = np.argsort(cid, kind="stable")
                cid, key = cid[order], key[order]
                last = np.append(cid[1:] != cid[:-1], True)
                cid, key = cid[last], key[last]
            return cid, key

        size = np.dtype(self.key_type).itemsize
        keys = np.full(0, -1, dtype=self.key_type)
        for cid, key in self._ordered(conn, path, RUNTIME_TABLE, columns, chunk):
            if not len(cid):
                continue
            top = int(cid.max()) + 1
            if top > len(keys):
                if top * size > map_bytes:
                    raise Unfit("correlationIds too large for a dense map")
                grown = np.full(min(max(top, len(keys) * 2), map_bytes // size), -1,
                                dtype=self.key_type)
                grown[:len(keys)] = keys
                keys = grown
            keys[cid] = key  # chunks in rowid order: a later row of an id wins
        return keys

    def event_totals(self, conn: sqlite3.Connection, path: str, table: str,
                     keys: Optional[Any]) -> Acc:
        """``key -> (ns, count)`` of ``table``'s events; ``keys``: the launch map, or None
        (each event by its own start)."""
        columns = ["start", "end"] + (["correlationId"] if keys is not None else [])

        def chunk(part: Chunk) -> Tuple[Any, Any]:
            (start, end, *cid), (_, _, *cid_null) = _rows_with(part, 2)
            if keys is None or not len(keys):
                return self.sums(self.slot(start) * self.width, end - start)
            ids = cid[0]
            known = (ids >= 0) & (ids < len(keys))
            if cid_null[0] is not None:
                known &= ~cid_null[0]
            key = np.where(known, keys.take(np.clip(ids, 0, len(keys) - 1)), -1)
            own = np.flatnonzero(key < 0)  # no runtime row: the event's own start
            if len(own):
                key = key.astype(np.int64)
                key[own] = self.slot(start[own]) * self.width
            return self.sums(key, end - start)

        total_ns = np.zeros(self.plan.keys, dtype=np.int64)
        total_n = np.zeros(self.plan.keys, dtype=np.int64)
        for ns, n in self._ordered(conn, path, table, columns, chunk):
            total_ns += ns
            total_n += n
        return {int(k): (int(total_ns[k]), int(total_n[k])) for k in np.flatnonzero(total_n)}

    def sums(self, key: Any, dur: Any) -> Tuple[Any, Any]:
        """Per key: total of ``max(dur, 0)`` and count."""
        dur = np.maximum(dur, 0)
        n = np.bincount(key, minlength=self.plan.keys)
        if len(dur) and int(dur.max()) * len(dur) < (1 << 53):  # float sums stay exact
            ns = np.bincount(key, weights=dur, minlength=self.plan.keys).astype(np.int64)
        else:
            ns = np.zeros(self.plan.keys, dtype=np.int64)
            np.add.at(ns, key, dur)
        return ns, n

    def _ordered(self, conn: sqlite3.Connection, path: str, table: str,
                 columns: Sequence[str], work: Callable[[Chunk], Any]) -> Iterator[Any]:
        """``work`` on each chunk of ``table``, on :data:`THREADS` threads, results in rowid
        order; at most two chunks per thread in flight (memory stays bounded)."""
        pages = TablePages(conn, path, table, columns)
        flight: Deque[Future] = collections.deque()
        executor = ThreadPoolExecutor(THREADS, thread_name_prefix="verlprof-gpu")
        try:
            for part in pages.chunks(max(1, self.chunk_bytes // pages.page_size)):
                flight.append(executor.submit(lambda p: work(pages.read(p)), part))
                if len(flight) >= 2 * THREADS:
                    yield flight.popleft().result()
            while flight:
                yield flight.popleft().result()
        finally:
            for pending in flight:
                pending.cancel()
            executor.shutdown(wait=True)  # the file is closed only when no read is running
            pages.close()


def _rows_with(part: Chunk, required: int) -> Tuple[List[Any], List[Optional[Any]]]:
    """The chunk's values and NULL masks, less the rows where one of its first ``required``
    columns is NULL (the SQL path's ``IS NOT NULL``)."""
    values, nulls = list(part.values), list(part.nulls)
    present = [n for n in nulls[:required] if n is not None]
    if not present:
        return values, nulls
    keep = ~np.logical_or.reduce(present)
    return [v[keep] for v in values], [n[keep] if n is not None else None for n in nulls]


def _main_file(conn: sqlite3.Connection) -> Optional[str]:
    for _, name, file in conn.execute("PRAGMA database_list"):
        if name == "main":
            return str(file) if file else None
    return None
