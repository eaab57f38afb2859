"""Reading an ``nsys export --type sqlite`` file directly (no ``nsys stats``, whose report names
changed between versions).

Schema facts used here, checked on exports of nsys 2022.4.2.1 (schema 3.0.0):

* ``NVTX_EVENTS(start, end, eventType, rangeId, category, color, text, globalTid, endGlobalTid,
  textId, domainId, ...)``. ``eventType``: 59 push/pop range, 60 start/end range, 34 mark,
  75 ``NvtxDomainCreate`` (``text`` = domain name, ``domainId`` = its id), 76 domain destroy.
  Registered strings have ``text`` NULL and ``textId`` → ``StringIds(id, value)``; ASCII
  messages are inline in ``text``. Domain id 0 is the default domain (no create event). Every
  report of a ``repeat`` capture run replays the domain-create events (with a negative start),
  so each file is self-contained. A range still open when the capture stopped has ``end`` NULL.
* ``globalTid`` = ``(pid << 24) | tid`` in its low 48 bits (``globalPid`` likewise with tid 0).
* Times are integer ns on the *session* time base. ``TARGET_INFO_SESSION_START_TIME.utcEpochNs``
  is the wall clock (ns since the Unix epoch) of session time 0: an event at ``start`` happened
  at ``utcEpochNs + start`` (checked against ``time.time_ns()`` in the profiled process: a few
  microseconds apart). With capture ranges each report has its own session start (its window's
  start). ``ANALYSIS_DETAILS(duration, startTime, stopTime)``: ``duration`` is the length of the
  recorded interval ``[0, duration]``; ``startTime`` is on a base shared by all reports of one
  nsys run (differences equal the differences of ``utcEpochNs``).
* CPU-only reports have no ``CUPTI_ACTIVITY_KIND_KERNEL``/``..._MEMCPY`` tables (nor
  ``NVTX_EVENTS`` when nvtx was not traced or nothing was emitted): readers return ``[]``.
  The GPU tables are read per phase, never event by event (:mod:`.gpu_plan`).

Every failure to read a file (missing, not SQLite, truncated, malformed) raises
:class:`ReportReadError`.
"""

from __future__ import annotations

import sqlite3
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

from verlprof.backends.reading import ReportReadError

EVENT_MARK = 34
EVENT_PUSH_POP = 59
EVENT_START_END = 60
EVENT_DOMAIN_CREATE = 75
RANGE_EVENT_TYPES = (EVENT_PUSH_POP, EVENT_START_END)
RAW_BATCH = 16_384
"""Rows per list of :func:`iter_nvtx_ranges` ``raw=True``."""

_SQLITE_MAGIC = b"SQLite format 3\x00"
_LOW24 = 0xFFFFFF

PathLike = Union[str, Path]


@dataclass(frozen=True)
class NvtxRange:
    """One NVTX range (or mark, with ``end_ns == start_ns``) on the session time base."""

    text: str
    start_ns: int
    end_ns: int
    domain: str
    """Domain name; ``""`` for the default domain."""
    thread_id: int
    """OS thread id (``threading.get_native_id()``) that started it."""
    event_type: int
    """59 push/pop, 60 start/end, 34 mark."""
    pid: int = 0
    global_tid: Optional[int] = None
    """nsys ``globalTid`` as stored (None when the export has none)."""

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def kind(self) -> str:
        return {EVENT_PUSH_POP: "push_pop", EVENT_START_END: "start_end",
                EVENT_MARK: "mark"}.get(self.event_type, str(self.event_type))


@dataclass(frozen=True)
class ReportTimeBounds:
    """The recorded interval of a report, relative (session ns) and absolute (epoch ns)."""

    start_ns: int
    """Session-relative start of the recorded interval (0)."""
    end_ns: int
    """Session-relative end (``ANALYSIS_DETAILS.duration``, else the last event's end)."""
    utc_epoch_ns: Optional[int]
    """Wall clock of session time 0, ns since the Unix epoch (``None`` if the table is absent)."""
    run_offset_ns: Optional[int] = None
    """``ANALYSIS_DETAILS.startTime``: this report's start on the base shared by all reports of
    one nsys run (orders the windows of a ``repeat`` capture run)."""

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@contextmanager
def _open(path: PathLike) -> Iterator[sqlite3.Connection]:
    p = Path(path)
    try:
        with open(p, "rb") as fh:
            head = fh.read(len(_SQLITE_MAGIC))
    except OSError as exc:
        raise ReportReadError(f"{p}: cannot read ({exc.strerror or exc})") from exc
    if head != _SQLITE_MAGIC:
        raise ReportReadError(f"{p}: not an SQLite file (empty, truncated or not an nsys "
                              "sqlite export)")
    try:
        conn = sqlite3.connect(p.resolve().as_uri() + "?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise ReportReadError(f"{p}: cannot open ({exc})") from exc
    try:
        yield conn
    except sqlite3.Error as exc:
        raise ReportReadError(f"{p}: unreadable nsys sqlite export ({exc})") from exc
    finally:
        conn.close()


open_export = _open
"""``with open_export(path) as conn``: a read-only connection; sqlite errors inside the block
become :class:`ReportReadError`."""


def _lenient_text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _tables(conn: sqlite3.Connection) -> set:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _columns(conn: sqlite3.Connection, table: str) -> set:
    return {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}


def list_tables(sqlite_path: PathLike) -> List[str]:
    """Names of the tables in an export (sorted)."""
    with _open(sqlite_path) as conn:
        return sorted(_tables(conn))


def _domain_names(conn: sqlite3.Connection, text_sql: str, join: str) -> Dict[int, str]:
    """Domain id -> name from the domain-create rows (name inline in ``text`` or, when
    registered, in ``StringIds`` through ``textId``); id 0 is the default domain ``""``."""
    names: Dict[int, str] = {0: ""}
    rows = conn.execute(f"SELECT e.domainId, {text_sql} FROM NVTX_EVENTS e {join} "
                        "WHERE e.eventType = ? AND e.domainId IS NOT NULL",
                        (EVENT_DOMAIN_CREATE,)).fetchall()
    for dom, text in rows:
        names[int(dom)] = text or ""
    return names


def read_nvtx_ranges(sqlite_path: PathLike, domain: Optional[str] = None,
                     include_marks: bool = False,
                     event_types: Sequence[int] = RANGE_EVENT_TYPES) -> List[NvtxRange]:
    """NVTX ranges of a report, sorted by start (then longest first): the list of
    :func:`iter_nvtx_ranges`."""
    return list(iter_nvtx_ranges(sqlite_path, domain, include_marks, event_types))


def iter_nvtx_ranges(sqlite_path: PathLike, domain: Optional[str] = None,
                     include_marks: bool = False,
                     event_types: Sequence[int] = RANGE_EVENT_TYPES,
                     raw: bool = False) -> Iterator[Any]:
    """NVTX ranges of a report, sorted by start (then longest first), one row at a time (the
    trace streams millions of them; ``verlprof report`` keeps only its own domain).
    ``raw``: first the domain names by id, then lists of up to :data:`RAW_BATCH` rows as
    SQLite gives them, ``(text as bytes, start, end or None, domain id, globalTid,
    eventType)``, for a caller that cannot afford an object per range.

    ``domain`` keeps one domain (``""`` = default); the filter is in the query's ``WHERE``
    (by domain id, from the domain-create rows), so the millions of rows of other domains
    never reach Python. Ranges with no end (still open when the capture stopped) are skipped.
    ``include_marks`` adds marks as zero-length ranges. No ``NVTX_EVENTS`` table (nvtx not
    traced, nothing emitted) → ``[]``.
    """
    types = list(event_types) + ([EVENT_MARK] if include_marks else [])
    with _open(sqlite_path) as conn:
        # range names are whatever bytes the application passed to NVTX: text that is not
        # UTF-8 is decoded with replacement, so one odd name never makes a report unreadable
        conn.text_factory = _lenient_text
        tables = _tables(conn)
        if "NVTX_EVENTS" not in tables:
            return
        cols = _columns(conn, "NVTX_EVENTS")
        text = "e.text" if "text" in cols else "NULL"
        if "StringIds" in tables and "textId" in cols:
            text_expr, join = f"coalesce({text}, s.value)", \
                "LEFT JOIN StringIds s ON e.textId = s.id"
        else:
            text_expr, join = text, ""
        domains = _domain_names(conn, text_expr, join) if "domainId" in cols else {0: ""}
        if raw:
            yield domains  # then the rows as they are: (text, start, end, domain id, tid, type)
        dom = "e.domainId" if "domainId" in cols else "0"
        where, args = f"e.eventType IN ({', '.join('?' for _ in types)})", list(types)
        if domain is not None:
            ids = sorted(i for i, name in domains.items() if name == domain)
            if not ids:
                return
            where += f" AND (coalesce({dom}, 0) IN ({', '.join('?' for _ in ids)}))"
            args += ids
        tid = "e.globalTid" if "globalTid" in cols else "NULL"
        # raw: the text as bytes, decoded by the caller once per distinct name, not per row
        shown = f"CAST({text_expr} AS BLOB)" if raw else text_expr
        sql = (f"SELECT {shown}, e.start, e.end, {dom}, {tid}, e.eventType "
               f"FROM NVTX_EVENTS e {join} WHERE {where} ORDER BY e.start, e.end DESC")
        if raw:
            cursor = conn.execute(sql, args)
            batch = cursor.fetchmany(RAW_BATCH)
            while batch:
                yield batch
                batch = cursor.fetchmany(RAW_BATCH)
            return
        for text_v, start, end, dom_id, gtid, etype in conn.execute(sql, args):
            if start is None:
                continue
            if end is None:
                if etype != EVENT_MARK:
                    continue
                end = start
            name = domains.get(int(dom_id or 0), f"<domain {dom_id}>")
            g = int(gtid or 0)
            yield NvtxRange(text_v or "", int(start), int(end), name, g & _LOW24, int(etype),
                            (g >> 24) & _LOW24, None if gtid is None else int(gtid))


def report_time_bounds(sqlite_path: PathLike) -> ReportTimeBounds:
    """Recorded interval of a report and the wall clock of its session time 0."""
    with _open(sqlite_path) as conn:
        tables = _tables(conn)
        utc = None
        if "TARGET_INFO_SESSION_START_TIME" in tables:
            row = conn.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME "
                               "LIMIT 1").fetchone()
            utc = int(row[0]) if row and row[0] is not None else None
        duration = offset = None
        if "ANALYSIS_DETAILS" in tables:
            cols = _columns(conn, "ANALYSIS_DETAILS")
            if "duration" in cols:
                sel = "duration, " + ("startTime" if "startTime" in cols else "NULL")
                row = conn.execute(f"SELECT {sel} FROM ANALYSIS_DETAILS LIMIT 1").fetchone()
                if row:
                    duration = int(row[0]) if row[0] is not None else None
                    offset = int(row[1]) if row[1] is not None else None
        if duration is None:
            duration = _last_event_end(conn, tables)
    return ReportTimeBounds(0, duration, utc, offset)


def _last_event_end(conn: sqlite3.Connection, tables: set) -> int:
    best = 0
    for table in ("NVTX_EVENTS", "OSRT_API", "CUPTI_ACTIVITY_KIND_KERNEL",
                  "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_RUNTIME"):
        if table in tables:
            row = conn.execute(f"SELECT max(coalesce(end, start)) FROM {table}").fetchone()
            if row and row[0] is not None:
                best = max(best, int(row[0]))
    return best


__all__ = ["EVENT_DOMAIN_CREATE", "EVENT_MARK", "EVENT_PUSH_POP", "EVENT_START_END",
           "NvtxRange", "ReportReadError", "ReportTimeBounds", "list_tables", "open_export",
           "read_nvtx_ranges", "report_time_bounds"]
