"""The page decoder against SQLite itself: the same values for any table it accepts, and
:class:`NotPlain` (never a wrong value) for every table it cannot decode exactly."""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import read_columns
from verlprof.backends.nsys.sqlite_pages import NotPlain

# integers at every serial type's edge: 0 and 1 (no bytes), 1..8-byte two's complement
EDGES = [0, 1, -1, 2, 127, 128, -128, -129, 255, 32767, 32768, -32768, -32769, 2**23 - 1,
         2**23, -2**23, 2**31 - 1, 2**31, -2**31, -2**31 - 1, 2**47 - 1, 2**47, -2**47,
         -2**47 - 1, 2**63 - 1, -2**63]
integers = st.one_of(st.sampled_from(EDGES), st.integers(-2**63, 2**63 - 1), st.none())
# a TEXT or BLOB column before the integers: its serial type grows to 2 bytes past 56 bytes
filler = st.one_of(st.none(), st.text(max_size=200), st.binary(max_size=200),
                   st.integers(-2**63, 2**63 - 1))


def make(path, rows, page_size=4096, extra_sql=()):
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA page_size = {page_size}")
    conn.execute("CREATE TABLE t (a INTEGER, filler, b INTEGER, c INTEGER)")
    conn.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", rows)
    for sql in extra_sql:
        conn.execute(sql)
    conn.commit()
    return conn


def decoded(conn, path, table, columns, pages_per_chunk=1 << 30):
    got = read_columns(conn, str(path), table, columns, pages_per_chunk)
    if got is None:
        return []
    return list(zip(*[[None if null else int(v) for v, null in zip(values, nulls)]
                      for values, nulls in zip(got.values, got.nulls)]))


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.tuples(integers, filler, integers, integers), max_size=400),
       page_size=st.sampled_from([512, 1024, 4096, 65536]),
       chunk=st.sampled_from([1, 2, 7, 1 << 30]))
def test_every_integer_as_sqlite_reads_it(tmp_path_factory, rows, page_size, chunk):
    path = tmp_path_factory.mktemp("db") / "t.sqlite"
    conn = make(path, rows, page_size)
    for columns in (["a", "b", "c"], ["c", "a"], ["b"]):
        want = conn.execute(f"SELECT {', '.join(columns)} FROM t ORDER BY rowid").fetchall()
        assert decoded(conn, path, "t", columns, chunk) == want


def test_a_deep_tree_with_rowid_gaps_and_large_rowids(tmp_path):
    """Three levels of pages at 512 bytes a page; rowids of 1 to 9 bytes."""
    path = tmp_path / "deep.sqlite"
    conn = make(path, [(i, "x" * (i % 90), i * 7919, -i) for i in range(30000)], 512)
    conn.execute("DELETE FROM t WHERE rowid % 3 = 0")
    conn.executemany("INSERT INTO t (rowid, a, b, c) VALUES (?, ?, ?, ?)",
                     [(r, r, 1, None) for r in (2**28, 2**35, 2**56 + 3, 2**63 - 1)])
    conn.commit()
    want = conn.execute("SELECT a, b, c FROM t ORDER BY rowid").fetchall()
    assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == len(want) > 20000
    for chunk in (1, 5, 1 << 30):
        assert decoded(conn, path, "t", ["a", "b", "c"], chunk) == want


def test_an_empty_table(tmp_path):
    path = tmp_path / "empty.sqlite"
    conn = make(path, [])
    assert decoded(conn, path, "t", ["a"]) == []


@pytest.mark.parametrize("case, sql", [
    ("a REAL", ["UPDATE t SET b = 1.5 WHERE rowid = 40"]),
    ("TEXT in an integer column", ["UPDATE t SET b = 'x' WHERE rowid = 40"]),
    ("a record on overflow pages", ["UPDATE t SET filler = zeroblob(9000) WHERE rowid = 40"]),
    ("a column added after the rows", ["ALTER TABLE t ADD COLUMN d INTEGER DEFAULT 7"]),
])
def test_what_it_cannot_decode_exactly_is_refused(tmp_path, case, sql):
    path = tmp_path / "odd.sqlite"
    conn = make(path, [(i, None, i, i) for i in range(100)], 4096, sql)
    columns = ["a", "d"] if "added" in case else ["a", "b"]
    with pytest.raises(NotPlain):
        decoded(conn, path, "t", columns)


def test_tables_that_are_not_plain_rowid_tables_are_refused(tmp_path):
    path = tmp_path / "kinds.sqlite"
    conn = make(path, [(1, None, 2, 3)], 4096, [
        "CREATE TABLE w (k INTEGER PRIMARY KEY, v INTEGER) WITHOUT ROWID",
        "INSERT INTO w VALUES (1, 2)",
        "CREATE TABLE ipk (id INTEGER PRIMARY KEY, v INTEGER)",
        "INSERT INTO ipk VALUES (5, 6)",
        "CREATE TABLE g (a INTEGER, b INTEGER GENERATED ALWAYS AS (a * 2) VIRTUAL)",
        "INSERT INTO g (a) VALUES (3)",
        "CREATE VIEW v AS SELECT a FROM t"])
    for table, columns in (("w", ["v"]), ("ipk", ["id"]), ("g", ["a"]), ("v", ["a"]),
                           ("t", ["nope"])):
        with pytest.raises(NotPlain):
            decoded(conn, path, table, columns)
    assert decoded(conn, path, "ipk", ["v"]) == [(6,)]  # its other columns are plain


def test_a_database_in_wal_mode_is_refused(tmp_path):
    path = tmp_path / "wal.sqlite"
    conn = make(path, [(1, None, 2, 3)])
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("INSERT INTO t VALUES (4, NULL, 5, 6)")  # lives in the -wal file for now
    conn.commit()
    with pytest.raises(NotPlain):
        decoded(conn, path, "t", ["a"])


def test_not_a_database_is_refused(tmp_path):
    path = tmp_path / "text.sqlite"
    path.write_bytes(b"not a database" * 100)
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (a INTEGER)")
    with pytest.raises(NotPlain):
        decoded(conn, path, "t", ["a"])


def sqlite_varint(value: int) -> bytes:
    """The file format's varint: 7 bits a byte, high bit set on all but the last; a ninth
    byte, when there is one, carries 8 bits."""
    value &= (1 << 64) - 1
    if value >= 1 << 56:
        head = [((value >> (8 + 7 * (7 - i))) & 0x7F) | 0x80 for i in range(8)]
        return bytes(head + [value & 0xFF])
    out = [value & 0x7F]
    value >>= 7
    while value:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    return bytes(reversed(out))


def test_varints_of_every_length():
    import numpy as np

    from verlprof.backends.nsys.sqlite_pages import _varint, _varint_length

    values = [0, 1, 127, 128, 2**14 - 1, 2**14, 2**21, 2**28 - 1, 2**28, 2**35, 2**42, 2**49,
              2**56 - 1, 2**56, 2**63 - 1, -1, -2**63]
    encoded = [sqlite_varint(v) for v in values]
    assert sorted({len(e) for e in encoded}) == list(range(1, 10))
    flat = np.frombuffer(b"".join(encoded) + bytes(16), dtype=np.uint8)
    at = np.cumsum([0] + [len(e) for e in encoded[:-1]])
    got, length = _varint(flat, at)
    assert got.tolist() == values and length.tolist() == [len(e) for e in encoded]
    assert _varint_length(flat, at).tolist() == [len(e) for e in encoded]


@pytest.mark.parametrize("filler", [None, "t" * 100])  # 1-byte serial types, then 2-byte
def test_wide_records_past_eight_columns(tmp_path, filler):
    import random

    rng = random.Random(7)
    names = [f"c{i}" for i in range(20)]
    path = tmp_path / "wide.sqlite"
    conn = sqlite3.connect(path)
    conn.execute(f"CREATE TABLE w (f, {', '.join(names)})")
    conn.executemany(f"INSERT INTO w VALUES (?{', ?' * 20})",
                     [(filler, *[rng.choice(EDGES + [None]) for _ in names])
                      for _ in range(3000)])
    conn.commit()
    for columns in (["c19", "c0", "c9", "c8"], ["c6", "c7"], ["c15"]):
        want = conn.execute(f"SELECT {', '.join(columns)} FROM w ORDER BY rowid").fetchall()
        assert decoded(conn, path, "w", columns, 3) == want
