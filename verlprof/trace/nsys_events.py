"""Events of one nsys report, read from the sqlite export ``verlprof report`` made (exported
here only when it is not there yet, by the same code: :func:`exported_sqlite`).

Every NVTX range of every domain goes on its thread's track (verlprof's ``<role>/<phase>`` and
``step/<n>`` ranges, ``record_function`` ranges, the user's own); with GPU tables, kernels and
memcpys go on one track per GPU stream, each with the CUDA runtime call that launched it on its
thread and an arrow from the call to the kernel (the export links them by ``correlationId``).
NVTX rows come as numpy columns from the export's pages (or in lists from SQLite), GPU rows
from SQLite cursors one at a time: memory does not grow with the report.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Dict, List, Optional, Set, Tuple

from verlprof.backends.nsys.gpu_plan import KERNEL_TABLE, MEMCPY_TABLE, RUNTIME_TABLE
from verlprof.backends.nsys.read import exported_sqlite
from verlprof.backends.nsys.sqlite import (
    EVENT_MARK,
    RANGE_EVENT_TYPES,
    iter_nvtx_ranges,
    list_tables,
    open_export,
    report_time_bounds,
)
from verlprof.backends.nsys.sqlite_pages import NotPlain
from verlprof.backends.reading import ReportReadError
from verlprof.records import CAPTURE_RANGE
from verlprof.trace.nvtx_pages import NvtxPages, Ranges
from verlprof.trace.tracks import ProcessTracks
from verlprof.trace.writer import NINE_BYTES, TEN_BYTES

_LOW24 = 0xFFFFFF


def nsys_events(report: str, tracks: ProcessTracks, timeout_s: float = 300.0) -> int:
    """Write ``report``'s events to ``tracks``; returns how many ranges were read. Raises
    :class:`ReportReadError` when it cannot be exported or read."""
    sqlite_path = exported_sqlite(report, timeout_s)
    bounds = report_time_bounds(sqlite_path)
    if bounds.utc_epoch_ns is None:
        raise ReportReadError(f"{sqlite_path}: no session start time; cannot place it in time")
    base = bounds.utc_epoch_ns
    read = _nvtx(sqlite_path, base, tracks)
    if tracks.filters.kernels:
        tables = set(list_tables(sqlite_path))
        with open_export(sqlite_path) as conn:
            conn.text_factory = lambda raw: raw.decode("utf-8", "replace")
            for table in (KERNEL_TABLE, MEMCPY_TABLE):
                if table in tables:
                    read += _gpu(conn, table, RUNTIME_TABLE in tables, base, tracks)
    return read


def _nvtx(sqlite_path: str, base: int, tracks: ProcessTracks) -> int:
    """Every NVTX range and mark of every domain on its thread's track, never as an object per
    range (a report holds millions): read as numpy columns from the export's pages
    (:mod:`verlprof.trace.nvtx_pages`), or, where those cannot be decoded exactly, in lists
    from SQLite; the plain ranges are filtered and encoded by numpy
    (:meth:`TraceWriter.plain_slices`), the few others (the window, step ranges, marks, ranges
    left open) one by one."""
    batches = iter_nvtx_ranges(sqlite_path, include_marks=True,
                               event_types=RANGE_EVENT_TYPES, raw=True)
    domains = next(batches, None)
    if domains is None:
        return 0
    encode = _Encoder(base, tracks, domains)
    mark = tracks.mark()
    try:
        with NvtxPages(sqlite_path) as pages:  # ``batches`` stays for the fallback below
            read = 0
            for rows in pages.ranges(RANGE_EVENT_TYPES + (EVENT_MARK,)):
                read += len(rows)
                encode.columns(rows, pages)
            return read
    except NotPlain:
        tracks.rewind(mark)  # what the pages gave so far is written again below
    encode = _Encoder(base, tracks, domains)
    read = 0
    for batch in batches:
        read += len(batch)
        encode.rows(batch)
    return read


class _Encoder:
    """Ranges to the writer in numpy batches (:meth:`columns`, :meth:`rows`)."""

    def __init__(self, base: int, tracks: ProcessTracks, domains: Dict[int, str]):
        self.base, self.tracks, self.domains = base, tracks, domains
        self.shift = base - tracks.alignment.offset_ns  # session time -> the controller's
        self.keys: Dict[Tuple[Any, Any, Any], int] = {}  # (text, domain, globalTid) -> number
        self.special: Dict[int, Tuple[int, str, str]] = {}  # negative: (track, text, domain)

    def columns(self, rows: Ranges, pages: NvtxPages) -> None:
        """Rows decoded from the pages: their names joined by ``textId``, once per distinct
        (textId, domain, thread) of the batch."""
        import numpy as np

        if self.tracks.writer.forget_templates():
            self.keys.clear()
        triples, inverse = rows.distinct()
        found = [self.keys.get(k) for k in triples]
        new = [i for i, n in enumerate(found) if n is None]
        names = pages.texts([triples[i][0] for i in new])
        for i, raw in zip(new, names):
            text_id, dom, gtid = triples[i]
            found[i] = self.keys[triples[i]] = self._template((raw, dom, gtid))
        numbers = np.array(found, dtype=np.int64)[inverse]
        self._encode(numbers, rows.start, rows.end, rows.open, rows.kind)

    def rows(self, batch: List[Tuple[Any, ...]]) -> None:
        """Rows as SQLite gives them: ``(text, start, end or None, domain, globalTid,
        eventType)``."""
        import numpy as np

        if self.tracks.writer.forget_templates():
            self.keys.clear()
        texts, starts, ends, doms, tids, kinds = zip(*batch)
        keys = list(zip(texts, doms, tids))
        for key in set(keys).difference(self.keys):
            self.keys[key] = self._template(key)
        numbers = np.fromiter(map(self.keys.__getitem__, keys), dtype=np.int64,
                              count=len(keys))
        start = np.array(starts, dtype=np.int64)
        is_open = np.array([e is None for e in ends]) if None in ends else \
            np.zeros(len(ends), dtype=bool)
        end = np.array([e if e is not None else s for e, s in zip(ends, starts)]
                       if None in ends else ends, dtype=np.int64)
        self._encode(numbers, start, end, is_open, np.array(kinds, dtype=np.int64))

    def _encode(self, numbers: Any, start: Any, end: Any, is_open: Any, kind: Any) -> None:
        import numpy as np

        tracks, writer = self.tracks, self.tracks.writer
        lo, hi = tracks.clip if tracks.clip is not None else (-(1 << 63), (1 << 63) - 1)
        begin, finish = start + self.shift, end + self.shift
        plain = (numbers >= 0) & (kind != EVENT_MARK) & ~is_open
        plain &= (finish - begin >= tracks.filters.min_duration_ns) & (finish >= lo) & \
            (begin <= hi)
        fits = plain & (begin >= NINE_BYTES) & (finish < TEN_BYTES) & (finish >= begin)
        if fits.any():
            writer.plain_slices(numbers[fits], begin[fits], finish[fits])
        todo = ~fits & ((numbers < 0) | (kind == EVENT_MARK) | plain)
        for i in np.flatnonzero(todo).tolist():
            self._one(int(start[i]), None if is_open[i] else int(end[i]), int(kind[i]),
                      int(numbers[i]), bool(plain[i]))

    def _template(self, key: Tuple[Any, Any, Any]) -> int:
        """The writer's template number of a (text, domain id, globalTid); negative for the
        ranges the filters always keep (the window, step ranges), written one by one."""
        raw, dom, gtid = key
        tracks = self.tracks
        track = tracks.thread((gtid or 0) & _LOW24)
        domain = self.domains.get(dom or 0, f"<domain {dom}>") or "nvtx"
        text = bytes(raw).decode("utf-8", "replace") if raw else ""
        if text == CAPTURE_RANGE or text.startswith("step/"):
            self.special[-1 - len(self.special)] = (track, text, domain)
            return -len(self.special)
        return tracks.writer.template(track, text, domain)

    def _one(self, start: int, end: Optional[int], kind: int, number: int,
             plain: bool) -> None:
        """One row the batch path did not write: a mark, the window or a step range (kept
        whatever the filters), a range left open (dropped), a time outside 2002-2262."""
        if end is None and kind != EVENT_MARK:
            return  # still open when the capture stopped
        tracks, base = self.tracks, self.base
        track, name, domain = self.special[number] if number < 0 else \
            tracks.writer.template_key(number)
        if kind == EVENT_MARK:
            tracks.instant(track, name, base + start, category=domain)
        elif end is not None and (number < 0 or plain):
            tracks.range(track, name, base + start, base + end, category=domain,
                         keep_short=number < 0)


def _gpu(conn: sqlite3.Connection, table: str, runtime: bool, base: int,
         tracks: ProcessTracks) -> int:
    """Kernels (or memcpys) by stream, each with its launching call when the export has it."""
    cols = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
    strings = bool(conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'StringIds'")
                   .fetchone())
    if table == KERNEL_TABLE:
        names = [f"(SELECT value FROM StringIds WHERE id = g.{c})"
                 for c in ("demangledName", "shortName") if c in cols and strings]
        name = f"coalesce({', '.join(names)}, 'kernel')" if names else "'kernel'"
    else:
        size = "g.bytes" if "bytes" in cols else "NULL"
        name = f"'memcpy ' || coalesce({size}, '?') || ' B kind ' || " \
               f"coalesce({'g.copyKind' if 'copyKind' in cols else 'NULL'}, '?')"
    device = "g.deviceId" if "deviceId" in cols else "0"
    stream = "g.streamId" if "streamId" in cols else "0"
    corr = "g.correlationId" if "correlationId" in cols else "NULL"
    launch = "NULL, NULL, NULL, NULL"
    join = ""
    if runtime and corr != "NULL":
        launch = ("r.start, r.end, r.globalTid, " +
                  ("(SELECT value FROM StringIds WHERE id = r.nameId)" if strings
                   else "NULL"))
        join = f"LEFT JOIN {RUNTIME_TABLE} r ON r.correlationId = {corr}"
    sql = (f"SELECT g.start, g.end, {device}, {stream}, {corr}, {name}, {launch} "
           f"FROM {table} g {join} ORDER BY g.start")
    flows = tracks.ids.flow_base()
    launched: Set[int] = set()  # this stream's last few launches: a CUDA graph's kernels
    last: Optional[int] = None  # share one; its call is drawn once
    count = 0
    for start, end, dev, strm, cid, text, l_start, l_end, l_tid, l_name in conn.execute(sql):
        count += 1
        flow = flows + int(cid) if cid is not None and l_start is not None else None
        drawn = tracks.range(tracks.stream(dev, strm), text or "", base + start, base + end,
                             category="gpu", flow_in=flow,
                             args={"correlation_id": int(cid)} if cid is not None else None)
        if not drawn or flow is None or cid == last or cid in launched:
            continue
        last = cid
        launched.add(cid)
        if len(launched) > 64:
            launched.clear()
        thread = tracks.thread(int(l_tid or 0) & _LOW24)
        tracks.range(thread, l_name or "cuda launch", base + l_start, base + (l_end or l_start),
                     category="cuda_runtime", flow_out=flow, keep_short=True)
    return count
