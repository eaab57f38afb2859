"""A report's summary: what ``verlprof report`` reads out of one report, kept beside it.

Reading a report is the expensive part of ``verlprof report`` (``nsys export``, then SQLite
sums over the GPU tables; parsing a torch trace). What comes out of it is small: verlprof's own
ranges with their GPU totals, the step marks and the window (a :class:`ReportData`). A
:class:`ReportSummary` is that, with what it was made from, written as JSON next to the report
(``<report><SUMMARY_SUFFIX>``): on Ray by a task on the node that holds the report
(:mod:`verlprof.runtime.summarise`), or by ``verlprof report`` itself after it read a report.
The next reader takes the summary instead of reading the report again.

A summary is used only for the report it was made from: same format, backend, file name and
window start (a torch trace without absolute times is placed there), and the same
:class:`Fingerprint` (size, modification time and a hash of its first and last 64 KiB). Anything
else (changed, replaced, copied without its times, a summary of another report, a newer format,
a file that is not a summary) makes it stale, and the report is read again: a summary never
hides a report it does not match. An unreadable report gets no summary (its error may pass, as
an export timeout does), so it is tried again each time.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Any, Dict, Optional, Tuple

from verlprof.backends import get_backend
from verlprof.backends.reading import RawRange, ReportData, StepMark

SUMMARY_FORMAT = 1
"""Bumped whenever a reader's output changes meaning: a summary of another format is stale."""
SUMMARY_SUFFIX = ".verlprof-summary.json"
"""A report's summary is ``<report path><SUMMARY_SUFFIX>``."""
EDGE_BYTES = 64 << 10
"""Bytes hashed at each end of a report for its fingerprint: never the whole report. With the
size and the modification time, 64 KiB at each end tell a replaced report in under a
millisecond (SHA-256 of 128 KiB: 0.6 ms on this 2-core machine; 1 MiB at each end: 11 ms, most
of what a second ``verlprof report`` of 64 reports spent)."""


@dataclass(frozen=True)
class Fingerprint:
    """Which file a summary was made from, cheap to take again."""

    bytes: int
    """Size of the report."""
    mtime_ns: int
    """Its modification time."""
    edges_sha256: str
    """SHA-256 of its size and its first and last :data:`EDGE_BYTES` (all of it when
    smaller)."""


@dataclass(frozen=True)
class ReportSummary:
    """One report's readout (:class:`ReportData` without the error) and what it was made of."""

    format: int
    """:data:`SUMMARY_FORMAT` of the verlprof that made it."""
    backend: str
    """The backend whose reader made it."""
    report: str
    """File name of the report it summarises."""
    fingerprint: Fingerprint
    window_start_ns: Optional[int]
    """The window start the reader was given (it places a trace without absolute times)."""
    node_id: str
    """Ray node id it was made on (empty: made without Ray, e.g. by ``verlprof report``)."""
    host: str
    """Host it was made on."""
    made_at: float
    """When it was made (seconds since the epoch)."""
    read_seconds: float
    """How long reading the report took."""
    ranges: Tuple[RawRange, ...]
    marks: Tuple[StepMark, ...]
    window: Optional[Tuple[int, int]]

    def data(self, index: int) -> ReportData:
        """The :class:`ReportData` the reader returned, for entry ``index``."""
        return ReportData(index=index, ranges=self.ranges, marks=self.marks, window=self.window)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_dict(cls, raw: Dict[str, Any]) -> ReportSummary:
        """Raises KeyError, TypeError or ValueError for anything that is not a summary."""
        window = raw["window"]
        return cls(format=int(raw["format"]), backend=str(raw["backend"]),
                   report=str(raw["report"]), fingerprint=Fingerprint(**raw["fingerprint"]),
                   window_start_ns=raw["window_start_ns"], node_id=str(raw["node_id"]),
                   host=str(raw["host"]), made_at=float(raw["made_at"]),
                   read_seconds=float(raw["read_seconds"]),
                   ranges=tuple(RawRange(**r) for r in raw["ranges"]),
                   marks=tuple(StepMark(**m) for m in raw["marks"]),
                   window=None if window is None else (int(window[0]), int(window[1])))


def summary_path(report: str) -> str:
    """Where the summary of ``report`` lives (also a manifest entry's ``summary``, relative)."""
    return report + SUMMARY_SUFFIX


def fingerprint(report: str) -> Fingerprint:
    """The report's fingerprint; OSError when it cannot be read."""
    with open(report, "rb") as handle:
        st = os.fstat(handle.fileno())
        digest = hashlib.sha256(st.st_size.to_bytes(8, "little"))
        digest.update(handle.read(EDGE_BYTES))
        if st.st_size > EDGE_BYTES:
            handle.seek(max(EDGE_BYTES, st.st_size - EDGE_BYTES))
            digest.update(handle.read(EDGE_BYTES))
    return Fingerprint(bytes=st.st_size, mtime_ns=st.st_mtime_ns,
                       edges_sha256=digest.hexdigest())


def load_summary(report: str, backend: str, window_start_ns: Optional[int]
                 ) -> Optional[ReportSummary]:
    """The summary beside ``report`` when it matches it (see the module's text); else None."""
    try:
        with open(summary_path(report)) as handle:
            summary = ReportSummary.from_dict(json.load(handle))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if (summary.format != SUMMARY_FORMAT or summary.backend != backend
            or summary.report != os.path.basename(report)
            or summary.window_start_ns != window_start_ns):
        return None
    try:
        return summary if fingerprint(report) == summary.fingerprint else None
    except OSError:
        return None


def make_summary(report: str, backend: str, *, index: int, window_start_ns: Optional[int],
                 timeout_s: float, node_id: str = "") -> Tuple[ReportData, Optional[ReportSummary]]:
    """Read ``report`` (its backend's reader) and summarise what came out; the summary is None
    when it could not be read (``ReportData.error`` says why). The fingerprint is taken first:
    a report that changes while it is read leaves a summary that is stale at once."""
    try:
        before = fingerprint(report)
    except OSError as err:
        return ReportData(index=index, error=f"cannot read {report}: {err.strerror}"), None
    began = time.monotonic()
    data = get_backend(backend).read(report, index=index, window_start_ns=window_start_ns,
                                     timeout_s=timeout_s)
    if data.error:
        return data, None
    return data, ReportSummary(
        format=SUMMARY_FORMAT, backend=backend, report=os.path.basename(report),
        fingerprint=before, window_start_ns=window_start_ns, node_id=node_id,
        host=socket.gethostname(), made_at=time.time(), read_seconds=time.monotonic() - began,
        ranges=data.ranges, marks=data.marks, window=data.window)


def write_summary(summary: ReportSummary, report: str) -> Optional[str]:
    """Write ``summary`` beside ``report`` atomically (a reader never sees half of one); its
    path, or None when the folder cannot be written (the report is simply read next time)."""
    target = summary_path(report)
    try:
        fd, tmp = tempfile.mkstemp(prefix=".summary.", dir=os.path.dirname(target) or ".")
    except OSError:
        return None
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(summary.to_json())
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return None
    return target


def read_summarised(report: str, backend: str, *, index: int, window_start_ns: Optional[int],
                    timeout_s: float, node_id: str = "") -> Tuple[ReportData, bool]:
    """The report's data from its summary when that matches, else read (and its summary
    written for next time); (data, whether the summary was used)."""
    summary = load_summary(report, backend, window_start_ns)
    if summary is not None:
        return summary.data(index), True
    data, made = make_summary(report, backend, index=index, window_start_ns=window_start_ns,
                              timeout_s=timeout_s, node_id=node_id)
    if made is not None:
        write_summary(made, report)
    return data, False
