"""Read one nsys report (``.nsys-rep``) into a :class:`ReportData`.

The report is exported once to ``<name>.sqlite`` next to it (cached:
:func:`verlprof.backends.nsys.cli.export_sqlite`; in a per-user temp cache when the report's
directory is read-only), then read with
:mod:`verlprof.backends.nsys.sqlite`: NVTX ranges of the ``verlprof`` domain (``<role>/<phase>``,
``controller/<phase>``, ``step/<n>``; ``VERLPROF_CAPTURE`` gives the window), on the wall clock
via the session's ``utcEpochNs``. GPU kernels and memcpys, when the report has those tables,
are attributed to the phase whose range contains the CUDA runtime call that launched them
(matched by ``correlationId`` in ``CUPTI_ACTIVITY_KIND_RUNTIME``) on the thread that pushed the
phase, else their GPU start; SQLite sums them (:mod:`verlprof.backends.nsys.gpu_sql`), so only
verlprof's own ranges and a few totals reach Python, whatever the report's size.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import time
from typing import List, Optional

from verlprof.backends.nsys.cli import export_sqlite
from verlprof.backends.nsys.gpu_sql import (
    DEFAULT_CACHE_KIB,
    KERNEL_TABLE,
    MEMCPY_TABLE,
    RUNTIME_TABLE,
    Span,
    gpu_totals,
)
from verlprof.backends.nsys.sqlite import (
    list_tables,
    open_export,
    read_nvtx_ranges,
    report_time_bounds,
)
from verlprof.backends.reading import RawRange, ReportData, ReportReadError, StepMark
from verlprof.records import CAPTURE_RANGE, NVTX_DOMAIN

__all__ = ["KERNEL_TABLE", "MEMCPY_TABLE", "RUNTIME_TABLE", "exported_sqlite",
           "read_nsys_report", "read_nsys_sqlite"]
_STEP = re.compile(r"^step/(\d+)$")


def read_nsys_report(path: str, index: int = 0, timeout: float = 300.0,
                     cache_kib: int = DEFAULT_CACHE_KIB) -> ReportData:
    """Export (cached) and read one report; failures become ``ReportData(error=...)``."""
    began = time.monotonic()
    try:
        sqlite_path = exported_sqlite(path, timeout)
        data = read_nsys_sqlite(sqlite_path, index, cache_kib)
    except ReportReadError as err:
        return ReportData(index=index, error=str(err).strip().splitlines()[0] if str(err)
                          else type(err).__name__, seconds=time.monotonic() - began)
    return ReportData(index=index, ranges=data.ranges, marks=data.marks, window=data.window,
                      seconds=time.monotonic() - began)


def exported_sqlite(path: str, timeout: float = 300.0) -> str:
    """The sqlite export of report ``path``, made once: next to it, or in the temp cache when
    its folder is read-only (``verlprof trace`` reads the exports ``verlprof report`` made).
    Raises :class:`ReportReadError` when it cannot be exported."""
    return str(export_sqlite(path, timeout_s=timeout, out_path=_cache_path(path)))


def read_nsys_sqlite(sqlite_path: str, index: int = 0,
                     cache_kib: int = DEFAULT_CACHE_KIB) -> ReportData:
    """Read an existing sqlite export. Raises ReportReadError when it cannot be read.
    ``cache_kib``: SQLite's page cache for the GPU tables (the reader's memory bound)."""
    bounds = report_time_bounds(sqlite_path)
    if bounds.utc_epoch_ns is None:
        raise ReportReadError(f"{sqlite_path}: no session start time "
                              "(TARGET_INFO_SESSION_START_TIME); cannot place it in time")
    base = bounds.utc_epoch_ns
    tables = set(list_tables(sqlite_path))
    nvtx = read_nvtx_ranges(sqlite_path, domain=NVTX_DOMAIN)

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
            phases.append((r.text, r.start_ns, r.end_ns, r.global_tid))
    if window is not None:
        # the window ends on a background thread (capture_range): a range that the next step
        # began before nsys registered the end is still open at the window's end, where nsys
        # cuts it off; a phase of the window itself ended before the window was closed
        phases = [p for p in phases if base + p[2] < window[1]]
    elif bounds.end_ns > bounds.start_ns:
        window = (base + bounds.start_ns, base + bounds.end_ns)

    # GPU time per phase is summed by SQLite (gpu_sql): never one Python object per kernel
    with open_export(sqlite_path) as conn:
        gpu = gpu_totals(conn, tables, [Span(s, e, tid) for _, s, e, tid in phases],
                         cache_kib=cache_kib)
    none = [(None, None)] * len(phases)
    kern = gpu.kernels if gpu.kernels is not None else none
    mem = gpu.memcpy if gpu.memcpy is not None else none
    ranges = tuple(RawRange(text, base + s, base + e, kernel_ns=k[0], kernel_count=k[1],
                            memcpy_ns=m[0])
                   for (text, s, e, _), k, m in zip(phases, kern, mem))
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
