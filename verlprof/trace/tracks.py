"""The tracks of one trace: a process track per profiled process, its threads, GPU streams and
gaps under it, and the filters every event passes on its way to the writer.

Sources (:mod:`verlprof.trace.nsys_events`, :mod:`verlprof.trace.torch_events`) hand events
on the process's own clock; :class:`ProcessTracks` puts them on the controller's
(:class:`~verlprof.trace.clock.Alignment`), drops what the filters leave out, and creates a
child track the first time an event needs it, so that a thread or stream without events costs
nothing.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from itertools import count
from typing import Any, Dict, Iterator, Mapping, Optional, Sequence, Tuple

from verlprof.trace.clock import Alignment
from verlprof.trace.writer import Arg, TraceWriter


@dataclass(frozen=True)
class Filters:
    """What the trace keeps (``verlprof trace --steps/--groups/--ranks/--min-duration-us/
    --no-kernels``)."""

    steps: Optional[Tuple[int, ...]] = None
    """Reports of these steps only (None: all)."""
    groups: Optional[Tuple[str, ...]] = None
    """Processes of these groups only (the controller always stays)."""
    ranks: Optional[Tuple[int, ...]] = None
    """Processes of these ranks only, in every group."""
    min_duration_ns: int = 0
    """Ranges shorter than this are left out (step spans and gaps always stay)."""
    kernels: bool = True
    """GPU kernels, memcpys and their launches."""

    def keeps(self, group: str, rank: int) -> bool:
        if group == "controller":
            return True
        return (self.groups is None or group in self.groups) and \
            (self.ranks is None or rank in self.ranks)

    def keeps_steps(self, steps: Sequence[int]) -> bool:
        return self.steps is None or any(s in self.steps for s in steps)


class TrackIds:
    """Unique track uuids and process numbers for one trace (a part of it: its own arrow
    ids, from ``first_flow``)."""

    def __init__(self, first_flow: int = 1) -> None:
        self._uuids: Iterator[int] = count(1)
        self.pids: Iterator[int] = count(1)
        self._flows: Iterator[int] = count(first_flow)

    def uuid(self) -> int:
        return next(self._uuids)

    def pid(self) -> int:
        return next(self.pids)

    def flow_base(self) -> int:
        """A range of 2**40 flow ids of one's own (a report's correlation ids go below it)."""
        return next(self._flows) << 40


def child_uuid(process: int, kind: str, key: str) -> int:
    """The uuid of a process's child track, the same in every part that names it: the
    process's uuid, then a thread's id (ids are below 2**22 on Linux), or a hash of the key for
    the other tracks (a GPU stream, the gaps). It stays above the counted uuids and short: a
    range names its track twice, so each byte of it counts (5 bytes at 1,024 processes)."""
    if kind == "thread" and key.isdigit() and int(key) < 1 << 23:
        space, low = 0, int(key)
    else:
        digest = hashlib.blake2b(f"{kind}/{key}".encode(), digest_size=4).digest()
        space, low = 1, int.from_bytes(digest, "little") & ((1 << 23) - 1)
    return (process << 24) | (space << 23) | low


class ProcessTracks:
    """One process's track and the child tracks under it."""

    def __init__(self, writer: TraceWriter, ids: TrackIds, uuid: int, alignment: Alignment,
                 filters: Filters, clip: Optional[Tuple[int, int]] = None):
        self.writer, self.ids, self.uuid = writer, ids, uuid
        self.alignment, self.filters = alignment, filters
        self.clip = clip
        """Only events overlapping this span (controller's clock) are kept (``--steps``)."""
        self._children: Dict[Tuple[str, str], int] = {}

    def child(self, kind: str, key: str, name: str, rank: int = 0) -> int:
        """The child track ``(kind, key)``, created (named ``name``) on first use."""
        found = self._children.get((kind, key))
        if found is None:
            found = self._children[(kind, key)] = child_uuid(self.uuid, kind, key)
            self.writer.child_track(found, self.uuid, name, rank=rank)
        return found

    def thread(self, tid: int, name: str = "") -> int:
        return self.child("thread", str(tid), name or f"thread {tid}", rank=10)

    def stream(self, device: object, stream: object) -> int:
        return self.child("stream", f"{device}/{stream}", f"GPU {device} stream {stream}",
                          rank=20)

    def mark(self) -> Tuple[Any, Dict[Tuple[str, str], int]]:
        """What :meth:`rewind` goes back to: the file's end and the child tracks made."""
        return self.writer.mark(), dict(self._children)

    def rewind(self, mark: Tuple[Any, Dict[Tuple[str, str], int]]) -> None:
        """Forget what was written after :meth:`mark`, child tracks included."""
        self.writer.rewind(mark[0])
        self._children = dict(mark[1])

    def range(self, track: int, name: str, start_ns: int, end_ns: int, category: str = "",
              args: Optional[Mapping[str, Arg]] = None, flow_out: Optional[int] = None,
              flow_in: Optional[int] = None, keep_short: bool = False) -> bool:
        """A range on the process's clock; False when the filters left it out."""
        if end_ns - start_ns < self.filters.min_duration_ns and not keep_short:
            return False
        start, end = self.alignment.place(start_ns), self.alignment.place(end_ns)
        if self.clip is not None and (end < self.clip[0] or start > self.clip[1]):
            return False
        self.writer.slice(track, name, start, end, category, args, flow_out, flow_in)
        return True

    def instant(self, track: int, name: str, at_ns: int, category: str = "",
                args: Optional[Mapping[str, Arg]] = None) -> None:
        at = self.alignment.place(at_ns)
        if self.clip is None or self.clip[0] <= at <= self.clip[1]:
            self.writer.instant(track, name, at, category, args)
