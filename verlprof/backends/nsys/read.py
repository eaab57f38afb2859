"""Read one nsys report (``.nsys-rep``) into a :class:`ReportData`.

The report is exported once to ``<name>.sqlite`` next to it (cached:
:func:`verlprof.backends.nsys.cli.export_sqlite`; in a per-user temp cache when the report's
directory is read-only), then read with
:mod:`verlprof.backends.nsys.sqlite`: NVTX ranges of the ``verlprof`` domain (``<role>/<phase>``,
``controller/<phase>``, ``step/<n>``; ``VERLPROF_CAPTURE`` gives the window), on the wall clock
via the session's ``utcEpochNs``. GPU kernels and memcpys, when the report has those tables,
are attributed to the phase whose range contains the CUDA runtime call that launched them
(matched by ``correlationId`` in ``CUPTI_ACTIVITY_KIND_RUNTIME``), else their GPU start.
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import tempfile
import time
from typing import Dict, List, Optional, cast

from verlprof.backends.nsys.cli import export_sqlite
from verlprof.backends.nsys.nvtx import CAPTURE_RANGE, NVTX_DOMAIN
from verlprof.backends.nsys.sqlite import (
    list_tables,
    read_cuda_kernels,
    read_memcpy,
    read_nvtx_ranges,
    report_time_bounds,
)
from verlprof.backends.reading import RawRange, ReportData, ReportReadError, StepMark, attribute

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY_TABLE = "CUPTI_ACTIVITY_KIND_MEMCPY"
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
_STEP = re.compile(r"^step/(\d+)$")


def read_nsys_report(path: str, index: int = 0, timeout: float = 300.0) -> ReportData:
    """Export (cached) and read one report; failures become ``ReportData(error=...)``."""
    began = time.monotonic()
    try:
        sqlite_path = str(export_sqlite(path, timeout_s=timeout, out_path=_cache_path(path)))
        data = read_nsys_sqlite(sqlite_path, index)
    except ReportReadError as err:
        return ReportData(index=index, error=str(err).strip().splitlines()[0] if str(err)
                          else type(err).__name__, seconds=time.monotonic() - began)
    return ReportData(index=index, ranges=data.ranges, marks=data.marks, window=data.window,
                      seconds=time.monotonic() - began)


def read_nsys_sqlite(sqlite_path: str, index: int = 0) -> ReportData:
    """Read an existing sqlite export. Raises ReportReadError when it cannot be read."""
    bounds = report_time_bounds(sqlite_path)
    if bounds.utc_epoch_ns is None:
        raise ReportReadError(f"{sqlite_path}: no session start time "
                              "(TARGET_INFO_SESSION_START_TIME); cannot place it in time")
    base = bounds.utc_epoch_ns
    tables = set(list_tables(sqlite_path))
    nvtx = read_nvtx_ranges(sqlite_path, domain=NVTX_DOMAIN)
    has_kernels, has_copies = KERNEL_TABLE in tables, MEMCPY_TABLE in tables
    kernels = read_cuda_kernels(sqlite_path) if has_kernels else []
    copies = read_memcpy(sqlite_path) if has_copies else []
    launches = _launch_times(sqlite_path) if (kernels or copies) and RUNTIME_TABLE in tables \
        else {}

    phases = []
    marks: List[StepMark] = []
    window: Optional[tuple] = None
    for r in nvtx:
        start, end = base + r.start_ns, base + r.end_ns
        if r.text == CAPTURE_RANGE:
            window = (start, end) if window is None else (min(window[0], start),
                                                          max(window[1], end))
            continue
        step = _STEP.match(r.text)
        if step:
            marks.append(StepMark(int(step.group(1)), start, end))
        elif "/" in r.text:
            phases.append((r.text, r.start_ns, r.end_ns))
    if window is None and bounds.end_ns > bounds.start_ns:
        window = (base + bounds.start_ns, base + bounds.end_ns)

    spans = [(s, e) for _, s, e in phases]
    # an event without a correlation id (None) finds no launch and keeps its own start
    by_id = cast(Dict[Optional[int], int], launches)
    kern = attribute(spans, [(by_id.get(k.correlation_id, k.start_ns), k.duration_ns)
                             for k in kernels] if has_kernels else None)
    mem = attribute(spans, [(by_id.get(m.correlation_id, m.start_ns), m.duration_ns)
                            for m in copies] if has_copies else None)
    ranges = tuple(RawRange(text, base + s, base + e, kernel_ns=k[0], kernel_count=k[1],
                            memcpy_ns=m[0])
                   for (text, s, e), k, m in zip(phases, kern, mem))
    return ReportData(index=index, ranges=ranges, marks=tuple(marks), window=window)


def _cache_path(report: str) -> Optional[str]:
    """None (the sqlite goes next to the report) unless that directory is read-only: then a
    per-user temp cache keyed by the report's path, size and mtime."""
    folder = os.path.dirname(os.path.abspath(report))
    if os.access(folder, os.W_OK):
        return None
    try:
        st = os.stat(report)
    except OSError:
        return None
    key = hashlib.sha1(f"{os.path.abspath(report)}:{st.st_size}:{st.st_mtime_ns}".encode())
    cache = os.path.join(tempfile.gettempdir(), f"verlprof-sqlite-{os.getuid()}")
    return os.path.join(cache, key.hexdigest()[:20] + ".sqlite")


def _launch_times(sqlite_path: str) -> Dict[int, int]:
    """correlationId → session start (ns) of the CUDA runtime call that launched it."""
    try:
        conn = sqlite3.connect(f"file:{sqlite_path}?mode=ro", uri=True)
        try:
            rows = conn.execute(f"SELECT correlationId, start FROM {RUNTIME_TABLE} "
                                "WHERE correlationId IS NOT NULL").fetchall()
        finally:
            conn.close()
    except sqlite3.Error as err:
        raise ReportReadError(f"{sqlite_path}: cannot read {RUNTIME_TABLE} ({err})") from err
    return {int(c): int(s) for c, s in rows}
