"""What the readers got out of each report, kept in ``<output_dir>/summary/`` for the next
``verlprof report`` of the same run.

Reading an nsys report means opening its sqlite export and scanning its NVTX table (tens of ms
for a 1 MB report, seconds for large ones) to keep a handful of ranges. What comes out is a
pure function of the report file and of the reader's code, so it is stored, and used again
while both are unchanged:

* a report is known by its path (relative to the output directory), size and modification
  time (ns); a report that is rewritten, even to the same size, is read again;
* the reader's code by the size and modification time of every module of its backend's folder
  and of :mod:`verlprof.backends.reading`, and verlprof's version: an upgrade or an edit of a
  reader reads everything again.

Only good reads are stored (an unreadable report is tried again next time). The file lives in
the summary directory, so deleting ``summary/`` forgets it with the rest; it is written to a
temporary name and renamed, so two reports of the same run at once never see half a file. A
cache that cannot be read or written is ignored: it only ever saves time.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

from verlprof.backends.reading import RawRange, ReportData, StepMark
from verlprof.version import __version__

CACHE_NAME = ".verlprof_read_cache.json"
"""File name inside ``<output_dir>/summary/``."""
FORMAT = 1
"""Layout of the file; another value is ignored (read again)."""

_BACKENDS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                             "backends")


def reader_stamp(backend: str) -> List[Any]:
    """verlprof's version and (name, size, mtime ns) of each module the ``backend``'s reader
    may run: its folder and :mod:`verlprof.backends.reading`. Stats only, no imports."""
    stamp: List[Any] = [__version__, backend]
    folder = os.path.join(_BACKENDS_DIR, os.path.basename(backend))
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".py"))
    except OSError:
        names = []
    for path in [os.path.join(folder, n) for n in names] + [
            os.path.join(_BACKENDS_DIR, "reading.py")]:
        try:
            st = os.stat(path)
        except OSError:
            continue
        stamp.append([os.path.basename(path), st.st_size, st.st_mtime_ns])
    return stamp


def report_key(path: str, backend: str, stamps: Dict[str, List[Any]],
               window_start_ns: Optional[int] = None) -> Optional[List[Any]]:
    """What identifies one read of ``path`` (None when it cannot be stat'ed); the reader's
    other input, where its window opened (a torch trace without absolute times is placed
    there), is part of it."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if backend not in stamps:
        stamps[backend] = reader_stamp(backend)
    return [backend, st.st_size, st.st_mtime_ns, stamps[backend], window_start_ns]


class ReadCache:
    """The cache file of one output directory: :meth:`get` before reading, :meth:`put` after,
    :meth:`save` once at the end."""

    def __init__(self, summary_dir: str, root: str):
        self.path = os.path.join(summary_dir, CACHE_NAME)
        self.root = os.path.realpath(root)
        self._stamps: Dict[str, List[Any]] = {}
        self._old: Dict[str, Any] = {}
        self._new: Dict[str, Any] = {}
        self._keys: Dict[Tuple[str, str, Optional[int]], Optional[List[Any]]] = {}
        with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
            with open(self.path, encoding="utf-8") as handle:
                found = json.load(handle)
            if found.get("format") == FORMAT and isinstance(found.get("reports"), dict):
                self._old = found["reports"]

    def _name(self, path: str) -> str:
        return os.path.relpath(os.path.realpath(path), self.root)

    def _key(self, path: str, backend: str, window_start_ns: Optional[int]
             ) -> Optional[List[Any]]:
        known = (self._name(path), backend, window_start_ns)
        if known not in self._keys:
            self._keys[known] = report_key(path, backend, self._stamps, window_start_ns)
        return self._keys[known]

    def get(self, path: str, backend: str, index: int,
            window_start_ns: Optional[int] = None) -> Optional[ReportData]:
        """What was read from ``path`` before, for entry ``index``; None when not known."""
        key = self._key(path, backend, window_start_ns)
        got = self._old.get(self._name(path))
        if key is None or not isinstance(got, dict) or got.get("key") != key:
            return None
        try:
            data = _decode(got, index)
        except (KeyError, TypeError, ValueError):
            return None
        self._new[self._name(path)] = got
        return data

    def put(self, path: str, backend: str, data: ReportData,
            window_start_ns: Optional[int] = None) -> None:
        """Remember a good read of ``path``."""
        key = self._key(path, backend, window_start_ns)
        if key is not None and not data.error:
            self._new[self._name(path)] = dict(_encode(data), key=key)

    def save(self) -> None:
        """Write what this run read or used (reports no longer listed are dropped); never
        raises."""
        if self._new == self._old:
            return
        folder = os.path.dirname(self.path)
        with contextlib.suppress(OSError):
            os.makedirs(folder, exist_ok=True)
            tmp = os.path.join(folder, f".read_cache.{os.getpid()}.{threading.get_ident()}.tmp")
            try:
                with open(tmp, "w", encoding="utf-8") as handle:
                    json.dump({"format": FORMAT, "reports": self._new}, handle,
                              separators=(",", ":"))
                os.replace(tmp, self.path)
            finally:
                with contextlib.suppress(OSError):
                    os.remove(tmp)


def _encode(data: ReportData) -> Dict[str, Any]:
    return {"ranges": [[r.name, r.start_ns, r.end_ns, r.kernel_ns, r.kernel_count,
                        r.memcpy_ns] for r in data.ranges],
            "marks": [[m.step, m.start_ns, m.end_ns] for m in data.marks],
            "window": list(data.window) if data.window is not None else None,
            "seconds": data.seconds}


def _decode(got: Dict[str, Any], index: int) -> ReportData:
    window: Optional[Tuple[int, int]] = None
    if got["window"] is not None:
        window = (int(got["window"][0]), int(got["window"][1]))
    ranges: Sequence[RawRange] = tuple(
        RawRange(str(n), int(s), int(e), kernel_ns=k, kernel_count=c, memcpy_ns=m)
        for n, s, e, k, c, m in got["ranges"])
    marks = tuple(StepMark(int(a), int(b), int(c)) for a, b, c in got["marks"])
    return ReportData(index=index, ranges=tuple(ranges), marks=marks, window=window,
                      seconds=0.0)
