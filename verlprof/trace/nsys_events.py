"""Events of one nsys report, read from the sqlite export ``verlprof report`` made (exported
here only when it is not there yet, by the same code: :func:`exported_sqlite`).

Every NVTX range of every domain goes on its thread's track (verlprof's ``<role>/<phase>`` and
``step/<n>`` ranges, ``record_function`` ranges, the user's own); with GPU tables, kernels and
memcpys go on one track per GPU stream, each with the CUDA runtime call that launched it on its
thread and an arrow from the call to the kernel (the export links them by ``correlationId``).
Rows come from SQLite cursors one at a time: memory does not grow with the report.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Dict, Optional, Set, Tuple

from verlprof.backends.nsys.gpu_plan import KERNEL_TABLE, MEMCPY_TABLE, RUNTIME_TABLE
from verlprof.backends.nsys.nvtx_base import CAPTURE_RANGE
from verlprof.backends.nsys.read import exported_sqlite
from verlprof.backends.nsys.sqlite import (
    EVENT_MARK,
    RANGE_EVENT_TYPES,
    iter_nvtx_ranges,
    list_tables,
    open_export,
    report_time_bounds,
)
from verlprof.backends.reading import ReportReadError
from verlprof.trace.tracks import ProcessTracks
from verlprof.trace.writer import NINE_BYTES as _NINE_BYTES
from verlprof.trace.writer import TEN_BYTES as _TEN_BYTES

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
    """Every NVTX range and mark of every domain on its thread's track. The rows come in
    lists, never as an object per range (a report holds millions): the plain ranges of a list
    are filtered and encoded by numpy (:meth:`TraceWriter.plain_slices`), the few others (the
    window, step ranges, marks, ranges left open) one by one."""
    import numpy as np

    batches = iter_nvtx_ranges(sqlite_path, include_marks=True,
                               event_types=RANGE_EVENT_TYPES, raw=True)
    domains = next(batches, None)
    if domains is None:
        return 0
    shift = base - tracks.alignment.offset_ns  # session time -> the controller's clock
    shortest = tracks.filters.min_duration_ns
    lo, hi = tracks.clip if tracks.clip is not None else (-(1 << 63), (1 << 63) - 1)
    keys: Dict[Tuple[Any, Any, Any], int] = {}  # (text, domain id, globalTid) -> template
    special: Dict[int, Tuple[int, str, str]] = {}  # negative numbers: (track, text, domain)
    writer = tracks.writer
    read = 0
    for batch in batches:
        read += len(batch)
        if writer.forget_templates():
            keys.clear()
        texts, starts, ends, doms, tids, kinds = zip(*batch)
        rows = list(zip(texts, doms, tids))
        for key in set(rows).difference(keys):
            keys[key] = _template(key, domains, tracks, special)
        numbers = np.fromiter(map(keys.__getitem__, rows), dtype=np.int64, count=len(rows))
        begin = np.array(starts, dtype=np.int64) + shift
        kind = np.array(kinds, dtype=np.int64)
        plain = (numbers >= 0) & (kind != EVENT_MARK)
        if None in ends:
            plain &= np.array([e is not None for e in ends])
        finish = np.array([e if e is not None else s for e, s in zip(ends, starts)]
                          if None in ends else ends, dtype=np.int64) + shift
        plain &= (finish - begin >= shortest) & (finish >= lo) & (begin <= hi)
        fits = plain & (begin >= _NINE_BYTES) & (finish < _TEN_BYTES) & (finish >= begin)
        if fits.any():
            writer.plain_slices(numbers[fits], begin[fits], finish[fits])
        todo = ~fits & ((numbers < 0) | (kind == EVENT_MARK) | plain)
        for i in np.flatnonzero(todo).tolist():
            _one(batch[i], int(numbers[i]), bool(plain[i]), base, tracks, special, writer)
    return read


def _template(key: Tuple[Any, Any, Any], domains: Dict[int, str], tracks: ProcessTracks,
              special: Dict[int, Tuple[int, str, str]]) -> int:
    """The writer's template number of a (text, domain id, globalTid); negative for the
    ranges the filters always keep (the window, step ranges), written one by one."""
    raw, dom, gtid = key
    track = tracks.thread((gtid or 0) & _LOW24)
    domain = domains.get(dom or 0, f"<domain {dom}>") or "nvtx"
    text = bytes(raw).decode("utf-8", "replace") if raw else ""
    if text == CAPTURE_RANGE or text.startswith("step/"):
        special[-1 - len(special)] = (track, text, domain)
        return -len(special)
    return tracks.writer.template(track, text, domain)


def _one(row: Tuple[Any, ...], number: int, plain: bool, base: int, tracks: ProcessTracks,
         special: Dict[int, Tuple[int, str, str]], writer: Any) -> None:
    """One row the batch path did not write: a mark, the window or a step range (kept
    whatever the filters), a range left open (dropped), a time outside 2002-2262."""
    _, start, end, _, _, kind = row
    if start is None or (end is None and kind != EVENT_MARK):
        return  # still open when the capture stopped
    track, name, domain = special[number] if number < 0 else writer.template_key(number)
    if kind == EVENT_MARK:
        tracks.instant(track, name, base + start, category=domain)
    elif number < 0 or plain:
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
