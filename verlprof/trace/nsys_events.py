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
from typing import Optional, Set

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

_LOW24 = 0xFFFFFF


def nsys_events(report: str, tracks: ProcessTracks, timeout_s: float = 300.0) -> int:
    """Write ``report``'s events to ``tracks``; returns how many ranges were read. Raises
    :class:`ReportReadError` when it cannot be exported or read."""
    sqlite_path = exported_sqlite(report, timeout_s)
    bounds = report_time_bounds(sqlite_path)
    if bounds.utc_epoch_ns is None:
        raise ReportReadError(f"{sqlite_path}: no session start time; cannot place it in time")
    base = bounds.utc_epoch_ns
    read = 0
    for r in iter_nvtx_ranges(sqlite_path, include_marks=True,
                              event_types=RANGE_EVENT_TYPES):
        read += 1
        track = tracks.thread(r.thread_id)
        start, end = base + r.start_ns, base + r.end_ns
        if r.event_type == EVENT_MARK:
            tracks.instant(track, r.text, start, category=r.domain or "nvtx")
        else:
            tracks.range(track, r.text, start, end, category=r.domain or "nvtx",
                         keep_short=r.text == CAPTURE_RANGE or r.text.startswith("step/"))
    if tracks.filters.kernels:
        tables = set(list_tables(sqlite_path))
        with open_export(sqlite_path) as conn:
            conn.text_factory = lambda raw: raw.decode("utf-8", "replace")
            for table in (KERNEL_TABLE, MEMCPY_TABLE):
                if table in tables:
                    read += _gpu(conn, table, RUNTIME_TABLE in tables, base, tracks)
    return read


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
