"""Integer columns of a SQLite table, decoded by numpy straight from the database file.

Why: a GPU report's kernel and runtime tables hold millions of rows, and every way of getting
them out through SQLite's API pays per value (a Python object, or a number printed as text and
parsed back) several times what SQLite itself pays to scan them. Here the table's B-tree leaf
pages are read from the file in chunks and their records decoded as arrays, column by column,
a few numpy operations per chunk (format: https://www.sqlite.org/fileformat2.html).

Exact or nothing: whatever this module does not decode exactly raises :class:`NotPlain` and
the caller asks SQLite instead. That is: a database in WAL mode (its newest rows may live in
the ``-wal`` file), a table without rowid, a view or virtual table, a record that spills onto
overflow pages or holds fewer columns than asked for (added by ``ALTER TABLE``), a value that
is not an integer or NULL (REAL, TEXT, BLOB), an ``INTEGER PRIMARY KEY`` column (stored as the
rowid), a page that is not what the tree says. The caller holds a read transaction on the
database while reading, so no writer changes the file under it.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from typing import Any, List, Sequence, Tuple

import numpy as np

HEADER_BYTES = 100
"""The database header at the start of page 1."""
LEAF_TABLE_PAGE = 13
INTERIOR_TABLE_PAGE = 5
LEAF_HEADER = 8
INTERIOR_HEADER = 12
PAD = 16
"""Zero bytes after a chunk's pages (at least): reads of 8 bytes, or of one byte per column
asked, at a record's last byte stay in bounds."""
# bytes of an integer's serial type 0..9 (0 NULL, 7 a float, 8 and 9 the constants 0 and 1)
_INT_BYTES = (0, 1, 2, 3, 4, 6, 8, 8, 0, 0)
_SIZES = np.array(_INT_BYTES + (0, 0) + tuple((t - 12) >> 1 for t in range(12, 256)),
                  dtype=np.int64)
"""Bytes of a value by its serial type, for types 0..255 (12 and up: BLOB and TEXT)."""
_HIGH_BITS = [sum(0x80 << (8 * j) for j in range(k)) for k in range(9)]
"""Per k, the high bits of the first k bytes of a word read little-endian."""
_SHIFTS = np.array([8 * (8 - b) if b else 56 for b in _INT_BYTES], dtype=np.int64)
"""Right shift that brings an integer of serial type 0..9 down from 8 bytes read at its
start (no-byte types shift by 56 and are set apart)."""


class NotPlain(Exception):
    """The table cannot be decoded from its pages exactly: read it through SQLite."""


@dataclass(frozen=True)
class Chunk:
    """One chunk of rows, in rowid order."""

    values: Tuple[Any, ...]
    """Per asked column, int64 values (0 where NULL)."""
    nulls: Tuple[Any, ...]
    """Per asked column, a bool array (True where NULL), or None when no row is NULL."""
    present: Tuple[Any, ...] = ()
    """Per column asked as ``present``, a bool array: True where not NULL (of any type)."""

    def __len__(self) -> int:
        return len(self.values[0]) if self.values else 0


class TablePages:
    """A rowid table's leaf pages in rowid order, and their decoding into :class:`Chunk`."""

    def __init__(self, conn: sqlite3.Connection, path: str, table: str,
                 columns: Sequence[str], present: Sequence[str] = ()) -> None:
        """``columns``: integer columns to decode; ``present``: columns of any type of which
        only whether they are NULL is wanted (text that rules a row out, say)."""
        self.fd = os.open(path, os.O_RDONLY)
        try:
            header = os.pread(self.fd, HEADER_BYTES, 0)
            if len(header) < HEADER_BYTES or not header.startswith(b"SQLite format 3\0"):
                raise NotPlain("not a SQLite 3 database file")
            if header[18] == 2 or header[19] == 2:
                raise NotPlain("WAL mode: rows may be in the -wal file")
            size = int.from_bytes(header[16:18], "big")
            self.page_size = 65536 if size == 1 else size
            self.usable = self.page_size - header[20]
            self.index = self._column_index(conn, table, columns)
            self.present = self._column_index(conn, table, present)
            self.reach = max(self.index + self.present, default=0)
            root = conn.execute("SELECT rootpage FROM sqlite_schema WHERE type = 'table' AND "
                                "name = ?", (table,)).fetchone()
            if not root or not root[0]:
                raise NotPlain(f"{table}: no B-tree of its own")
            self.leaves = self._leaves(int(root[0]))
        except BaseException:
            os.close(self.fd)
            raise

    def close(self) -> None:
        os.close(self.fd)

    def chunks(self, pages_per_chunk: int) -> List[Any]:
        """The leaf page numbers cut into runs of ``pages_per_chunk``, in rowid order."""
        step = max(1, pages_per_chunk)
        return [self.leaves[i:i + step] for i in range(0, len(self.leaves), step)]

    def read(self, pages: Any) -> Chunk:
        """Decode the rows of ``pages`` (leaf page numbers; see :meth:`chunks`)."""
        ps = self.page_size
        flat = self._load(pages)
        top = np.arange(len(pages), dtype=np.int64) * ps
        top += np.where(pages == 1, HEADER_BYTES, 0)  # see _btree_header
        if bool(np.any(flat[top] != LEAF_TABLE_PAGE)):
            raise NotPlain("a leaf of the table is not a table leaf page")
        cells = _be16(flat, top + 3)
        total = int(cells.sum())
        # each page's cell pointers (2-byte offsets into the page), then the cells
        first = top + LEAF_HEADER - 2 * (np.cumsum(cells) - cells)
        pointer = np.repeat(first, cells) + 2 * np.arange(total, dtype=np.int64)
        cell = np.repeat(np.arange(len(pages), dtype=np.int64) * ps, cells)
        cell += _be16(flat, pointer)
        del pointer
        payload, used = _varint(flat, cell)
        if total and int(payload.max()) > self.usable - 35:
            raise NotPlain("a record spills onto overflow pages")
        record = cell + used
        record += _varint_length(flat, record)  # past the rowid
        del cell, payload
        head, used = _varint(flat, record)
        kinds = self._serial_types(flat, record + used, record + head)
        body = record + head
        del record, head, used
        # at[j]: where column j's value starts (after the values before it)
        at = [body]
        for kind in kinds[:max(self.index)]:
            size = _SIZES.take(kind) if kind.dtype == np.uint8 else np.where(
                kind < 12, _SIZES.take(np.minimum(kind, 11)), (kind - 12) >> 1)
            at.append(at[-1] + size)
        words = _unaligned(flat, ">i8")
        values, nulls = [], []
        for j in self.index:
            kind = kinds[j]
            low, high = (int(kind.min()), int(kind.max())) if total else (1, 1)
            if high >= 10 or bool(np.any(kind == 7)):
                raise NotPlain("a value that is not an integer or NULL")
            # 8 bytes from the value's first: it is their top ``size`` bytes, and an
            # arithmetic shift right brings it down sign-extended
            value = words[at[j]].astype(np.int64)
            value >>= _SHIFTS[kind]
            null = None
            if low == 0 or high >= 8:  # NULL, and the constants 0 and 1: no bytes
                value[(kind == 0) | (kind == 8)] = 0
                value[kind == 9] = 1
                null = kind == 0 if low == 0 else None
            values.append(value)
            nulls.append(null)
        return Chunk(values=tuple(values), nulls=tuple(nulls),
                     present=tuple(kinds[j] != 0 for j in self.present))

    # --- the table's shape ------------------------------------------------------------------

    def _column_index(self, conn: sqlite3.Connection, table: str,
                      columns: Sequence[str]) -> Tuple[int, ...]:
        info = list(conn.execute(f"PRAGMA table_xinfo({table})"))
        if any(row[6] for row in info):
            raise NotPlain(f"{table} has generated or hidden columns")
        position = {row[1]: row[0] for row in info}
        keys = [row for row in info if row[5]]
        alias = keys[0][1] if len(keys) == 1 and str(keys[0][2]).upper() == "INTEGER" else None
        missing = [c for c in columns if c not in position]
        if missing:
            raise NotPlain(f"{table} has no column {missing[0]}")
        if alias in columns:
            raise NotPlain(f"{table}.{alias} is the rowid")
        return tuple(int(position[c]) for c in columns)

    def _leaves(self, root: int) -> Any:
        """Leaf page numbers under ``root``, left to right (all leaves are at one depth)."""
        level = np.array([root], dtype=np.int64)
        for _ in range(64):
            # a B-tree's leaves are all at one depth: the level's first page tells (and
            # :meth:`read` checks each leaf), so the leaves are not read twice
            first = self._load(level[:1])[_btree_header(int(level[0]))]
            if first == LEAF_TABLE_PAGE:
                return level
            flat = self._load(level)
            kinds = {int(flat[i * self.page_size + _btree_header(p)])
                     for i, p in enumerate(level.tolist())}
            if kinds != {INTERIOR_TABLE_PAGE}:
                raise NotPlain("not a table B-tree (a table without rowid?)")
            children: List[Any] = []
            for i, page in enumerate(level.tolist()):
                top = i * self.page_size + _btree_header(page)
                n = int(_be16(flat, np.array([top + 3]))[0])
                pointers = _be16(flat, top + INTERIOR_HEADER + 2 * np.arange(n)) \
                    + i * self.page_size
                children.append(_be32(flat, pointers))
                children.append(_be32(flat, np.array([top + 8])))  # the right-most child
            level = np.concatenate(children)
        raise NotPlain("a B-tree deeper than 64 levels")

    def _load(self, pages: Any) -> Any:
        """The pages' bytes, one after another, then zero bytes (at least :data:`PAD`)."""
        ps = self.page_size
        pad = max(PAD, self.reach + 9)
        flat = np.empty(len(pages) * ps + pad, dtype=np.uint8)
        flat[len(pages) * ps:] = 0
        order = pages.tolist()
        i = 0
        while i < len(order):  # runs of consecutive pages: one read each
            j = i + 1
            while j < len(order) and order[j] == order[j - 1] + 1:
                j += 1
            want = (j - i) * ps
            got = os.preadv(self.fd, [flat[i * ps:j * ps].data], (order[i] - 1) * ps)
            if got != want:
                raise NotPlain("a page past the end of the file")
            i = j
        return flat

    def _serial_types(self, flat: Any, at: Any, end: Any) -> List[Any]:
        """Serial types of columns ``0..max(index)`` of each record (``at``: where its types
        start, ``end``: where its header ends), an array per column."""
        k = self.reach + 1
        # the usual case, one byte per type: the k bytes as 8-byte words (one for k <= 8)
        words = -(-k // 8)
        word = _unaligned(flat, ">u8")[at[:, None] + 8 * np.arange(words)]
        # the high bit of file byte j is bit 8j + 7 of a word read little-endian
        high = [_HIGH_BITS[min(8, k - 8 * w)] for w in range(words)]
        if not bool(np.any(word.view("<u8") & np.array(high, dtype=np.uint64))):
            if bool(np.any(at + k > end)):
                raise NotPlain("a record holds fewer columns than asked for")
            grid = word.view(np.uint8).reshape(len(at), 8 * words)
            return [np.ascontiguousarray(grid[:, j]) for j in range(k)]
        kinds = []
        pos = at.copy()
        for _ in range(k):
            if bool(np.any(pos >= end)):
                raise NotPlain("a record holds fewer columns than asked for")
            kind, used = _varint(flat, pos)
            kinds.append(kind)
            pos = pos + used
        return kinds


def _btree_header(page: int) -> int:
    """Where a page's B-tree header starts: page 1 holds the database header first."""
    return HEADER_BYTES if page == 1 else 0


def _be16(flat: Any, at: Any) -> Any:
    return _unaligned(flat, ">u2")[at].astype(np.int64)


def _be32(flat: Any, at: Any) -> Any:
    out = np.zeros(len(at), dtype=np.int64)
    for k in range(4):
        out = out * 256 + flat[at + k]
    return out


def _varint(flat: Any, at: Any) -> Tuple[Any, Any]:
    """SQLite varints at ``at``: (values as int64, lengths in bytes)."""
    first = flat[at].astype(np.int64)
    value = first & 0x7F
    length = np.ones(len(at), dtype=np.int64)
    todo = np.flatnonzero(first >= 0x80)
    part = value[todo]
    for k in range(1, 9):
        if not len(todo):
            break
        byte = flat[at[todo] + k].astype(np.int64)
        length[todo] += 1
        if k == 8:  # the ninth byte gives all its 8 bits
            value[todo] = (part << 8) | byte
            break
        part = (part << 7) | (byte & 0x7F)
        done = byte < 0x80
        value[todo[done]] = part[done]
        todo, part = todo[~done], part[~done]
    return value, length


def _varint_length(flat: Any, at: Any) -> Any:
    """Lengths in bytes of the varints at ``at`` (their values are not needed)."""
    # the first four bytes as one word: ``stop`` has the high bit of each byte that ends a
    # varint (high bit clear), and its size says which byte is the first such
    stop = ~_unaligned(flat, ">u4")[at] & 0x80808080
    length = 1 + (stop < 0x80000000).astype(np.int64)
    for bound in (0x800000, 0x8000, 0x80):
        length += stop < bound
    todo = np.flatnonzero(length == 5)  # rowids of 2**28 and more: one byte at a time
    for k in range(4, 8):
        todo = todo[flat[at[todo] + k] >= 0x80]
        if not len(todo):
            break
        length[todo] += 1
    return length


def _unaligned(flat: Any, dtype: str) -> Any:
    """``flat`` seen as big-endian words starting at every byte (a view, no copy)."""
    size = np.dtype(dtype).itemsize
    return np.ndarray(buffer=flat, dtype=dtype, shape=(len(flat) - size + 1,), strides=(1,))

