"""An export's NVTX ranges as numpy columns decoded from its pages, for the trace.

Why: a report holds millions of NVTX ranges, and SQLite handing them to Python costs about
2 us a row before anything is done with them, more than the rest of the trace together. The
integer columns of ``NVTX_EVENTS`` (start, end, eventType, textId, domainId, globalTid) are
read straight from the file's B-tree pages instead
(:class:`~verlprof.backends.nsys.sqlite_pages.TablePages`) and the few distinct names come
from ``StringIds`` by id, once each.

Exact or nothing, as the page decoder is: a table it cannot decode, or a wanted row whose
name is written inline (``text``, not ``textId``: exports of nsys before 2021 and hand-made
ones), raises :class:`~verlprof.backends.nsys.sqlite_pages.NotPlain` and the caller reads the
rows through SQLite. Rows come in the order the SQL path gives (``ORDER BY start, end DESC``):
each chunk is sorted, and the rows at its last start wait for the next chunk (nsys writes the
table in start order; a table that is not gives the same rows, in another order).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from verlprof.backends.nsys.sqlite import open_export
from verlprof.backends.nsys.sqlite_pages import NotPlain, TablePages

COLUMNS = ("start", "end", "eventType", "textId", "domainId", "globalTid")
CHUNK_BYTES = 1 << 20
"""Leaf pages decoded at once: about 20,000 ranges."""
NO_TEXT = -1
"""``textId`` of a row without one."""
_IDS_PER_QUERY = 500


@dataclass(frozen=True)
class Ranges:
    """Rows of ``NVTX_EVENTS``, one array per column (int64; bool for ``open``)."""

    start: Any
    end: Any
    """The end, or the start where ``open``."""
    open: Any
    """True where the row has no end (a mark, or a range still open at the end)."""
    kind: Any
    text_id: Any
    """:data:`NO_TEXT` where NULL."""
    domain: Any
    """0 where NULL (the default domain)."""
    tid: Any
    """globalTid, 0 where NULL."""

    def __len__(self) -> int:
        return len(self.start)

    def take(self, rows: Any) -> Ranges:
        return Ranges(self.start[rows], self.end[rows], self.open[rows], self.kind[rows],
                      self.text_id[rows], self.domain[rows], self.tid[rows])

    def distinct(self) -> Tuple[List[Tuple[int, int, int]], Any]:
        """The distinct (textId, domain, globalTid) of the rows, and each row's index into
        them: a batch has a few hundred among tens of thousands of rows, so they are found
        by one code per row, without sorting where the codes' span is small."""
        code, span = np.zeros(len(self.start), dtype=np.int64), 1
        for column in (self.text_id, self.domain, self.tid):
            low, high = (int(column.min()), int(column.max())) if len(column) else (0, 0)
            if high - low < 1 << 20:
                index, size = column - low, high - low + 1
            else:
                values, index = np.unique(column, return_inverse=True)
                index, size = index.reshape(-1), len(values)
            code = code * size + index
            span *= size
        if span <= max(1 << 16, 4 * len(code)):
            seen = np.zeros(span, dtype=bool)
            seen[code] = True
            codes = np.flatnonzero(seen)
            slot = np.zeros(span, dtype=np.int64)
            slot[codes] = np.arange(len(codes))
            inverse = slot[code]
        else:
            codes, inverse = np.unique(code, return_inverse=True)
            inverse = inverse.reshape(-1)
        one = np.empty(len(codes), dtype=np.int64)  # a row of each
        one[inverse] = np.arange(len(code))
        triples = np.stack([self.text_id[one], self.domain[one], self.tid[one]], axis=1)
        return [(a, b, c) for a, b, c in triples.tolist()], inverse

    @staticmethod
    def join(parts: Sequence[Ranges]) -> Ranges:
        return Ranges(*(np.concatenate([getattr(p, f) for p in parts]) for f in
                        ("start", "end", "open", "kind", "text_id", "domain", "tid")))


class NvtxPages:
    """An export's ``NVTX_EVENTS`` read by pages; use as a context manager."""

    def __init__(self, sqlite_path: str):
        self._opened = open_export(sqlite_path)
        self.conn = self._opened.__enter__()
        self._texts: Dict[int, bytes] = {}
        try:
            path = next((str(f) for _, name, f in self.conn.execute("PRAGMA database_list")
                         if name == "main" and f), None)
            if path is None:
                raise NotPlain("not a file")
            # a shared lock for the whole read: no writer changes the file meanwhile
            self.conn.execute("BEGIN")
            self.conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()
            self.pages = TablePages(self.conn, path, "NVTX_EVENTS", COLUMNS, present=("text",))
        except sqlite3.Error as err:  # an older SQLite without sqlite_schema, say
            self._opened.__exit__(None, None, None)
            raise NotPlain(f"NVTX_EVENTS: {err}") from err
        except BaseException as err:
            self._opened.__exit__(type(err), err, err.__traceback__)
            raise

    def __enter__(self) -> NvtxPages:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.pages.close()
        self.conn.execute("ROLLBACK")
        self._opened.__exit__(*exc)

    def ranges(self, event_types: Sequence[int]) -> Iterator[Ranges]:
        """The rows of ``event_types``, in chunks, ordered as the SQL path orders them."""
        wanted = np.array(sorted(set(event_types)), dtype=np.int64)
        held: Optional[Ranges] = None
        for part in self.pages.chunks(max(1, CHUNK_BYTES // self.pages.page_size)):
            rows = self._rows(part, wanted)
            if held is not None:
                rows = Ranges.join([held, rows])
            if not len(rows):
                continue
            rows = rows.take(np.lexsort((np.where(rows.open, np.iinfo(np.int64).max,
                                                  -rows.end), rows.start)))
            last = rows.start[-1]
            cut = int(np.searchsorted(rows.start, last, side="left"))
            if cut == 0:
                held = rows  # one start throughout: wait for a later one
                continue
            held = rows.take(slice(cut, None))
            yield rows.take(slice(0, cut))
        if held is not None and len(held):
            yield held

    def _rows(self, part: Any, wanted: Any) -> Ranges:
        chunk = self.pages.read(part)
        start, end, kind, text_id, domain, tid = chunk.values
        keep = np.isin(kind, wanted)
        if bool(np.any(chunk.present[0] & keep)):
            raise NotPlain("an NVTX name written inline, not by textId")
        end_null, text_null = chunk.nulls[1], chunk.nulls[3]
        is_open = end_null if end_null is not None else np.zeros(len(start), dtype=bool)
        if text_null is not None:
            text_id = np.where(text_null, NO_TEXT, text_id)
        rows = Ranges(start, np.where(is_open, start, end), is_open, kind, text_id, domain, tid)
        return rows if bool(keep.all()) else rows.take(keep)

    def texts(self, ids: Sequence[int]) -> List[bytes]:
        """The names of ``ids`` (``textId`` values) as bytes; b"" for none."""
        missing = sorted({i for i in ids if i not in self._texts and i != NO_TEXT})
        for at in range(0, len(missing), _IDS_PER_QUERY):
            some = missing[at:at + _IDS_PER_QUERY]
            self._texts.update({i: b"" for i in some})
            marks = ", ".join("?" for _ in some)
            try:
                self._texts.update((int(i), bytes(v or b"")) for i, v in self.conn.execute(
                    f"SELECT id, CAST(value AS BLOB) FROM StringIds WHERE id IN ({marks})",
                    some))
            except sqlite3.Error as err:  # no StringIds table: the SQL path says what then
                raise NotPlain(f"StringIds: {err}") from err
        return [self._texts.get(i, b"") for i in ids]
