"""The streaming writer: Perfetto's protobuf trace format, one packet at a time.

A Perfetto trace is a ``Trace`` message whose only field is ``repeated TracePacket packet = 1``,
so a file that is a run of ``(tag 1, length, packet)`` records is a whole trace at every
packet boundary: the writer appends each packet as it comes and never holds more than one.
Only the few messages a timeline needs are encoded, by hand, with the field numbers of
``perfetto/protos/perfetto/trace/perfetto_trace.proto`` (TracePacket, TrackDescriptor,
ProcessDescriptor, TrackEvent, DebugAnnotation); the tests decode the file with the ``perfetto``
package's own classes. docs/user_guide.md#one-trace-of-the-whole-job says why protobuf and
not Chrome's JSON.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, BinaryIO, Dict, List, Mapping, Optional, Sequence, Tuple, Union

SLICE_BEGIN, SLICE_END, INSTANT = 1, 2, 3
"""``TrackEvent.Type``."""
SEQUENCE_ID = 1
"""One writer, one packet sequence (``trusted_packet_sequence_id``); the parts of a trace
read side by side each have their own (:mod:`verlprof.trace.part_files`)."""
_INCREMENTAL_STATE_CLEARED = 1
Arg = Union[str, int]


_SMALL = [bytes([v]) for v in range(128)]


def _varint(value: int) -> bytes:
    if 0 <= value < 128:
        return _SMALL[value]
    out = bytearray()
    value &= (1 << 64) - 1  # negative int32/int64 as protobuf writes them: two's complement
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_HIGH: Dict[int, bytes] = {}
NINE_BYTES, TEN_BYTES = 1 << 56, 1 << 63
"""Times in ns since the epoch from 2002 to 2262 are varints of 9 bytes."""


def _timestamp(value: int) -> bytes:
    """:func:`_varint` of a time in ns since the epoch (negative: 0), fast: the bits above the
    lowest 28 change every 0.27 s, so their bytes are kept and only four bytes are computed."""
    high = value >> 28
    if high <= 0:
        return _varint(max(0, value))
    tail = _HIGH.get(high)
    if tail is None:
        if len(_HIGH) > 4096:
            _HIGH.clear()
        tail = _HIGH[high] = _varint(high)
    return bytes((value & 0x7F | 0x80, value >> 7 & 0x7F | 0x80, value >> 14 & 0x7F | 0x80,
                  value >> 21 & 0x7F | 0x80)) + tail


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _int(field: int, value: int) -> bytes:
    return _key(field, 0) + _varint(value)


def _bytes(field: int, value: bytes) -> bytes:
    return _key(field, 2) + _varint(len(value)) + value


def _text(field: int, value: str) -> bytes:
    return _bytes(field, value.encode("utf-8", "replace"))


def _fixed64(field: int, value: int) -> bytes:
    return _key(field, 1) + struct.pack("<Q", value & ((1 << 64) - 1))


def _annotation(name: str, value: Arg) -> bytes:
    body = _text(10, name) + (_int(4, value) if isinstance(value, int) else _text(6, value))
    return _bytes(4, body)  # TrackEvent.debug_annotations


def _event(kind: int, track: int, name: str, category: str,
           args: Optional[Mapping[str, Arg]]) -> bytes:
    """A TrackEvent's type, track, name, category and arguments."""
    event = _int(9, kind) + _int(11, track) + _text(23, name)
    if category:
        event += _text(22, category)
    for key, value in (args or {}).items():
        event += _annotation(key, value)
    return event


@dataclass
class Written:
    """What a writer has put in its file so far."""

    bytes: int = 0
    slices: int = 0
    processes: int = 0

    def add(self, other: Written) -> None:
        """Count ``other``'s (a part joined to this file) too."""
        for name in ("bytes", "slices", "processes"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


class TraceWriter:
    """Appends Perfetto packets to ``out``: tracks first, then their events (any order: the
    reader sorts by time). Times are ns on the controller's wall clock.

    A range is two packets that differ from the last range of the same name on the same track
    only in their timestamps: their bytes are kept (:attr:`_begins`, :attr:`_ends`), so that a
    range costs two varints and a join, not a message built field by field."""

    _CACHE = 65_536
    """Kept encodings of (track, name, category) before the cache starts over."""

    def __init__(self, out: BinaryIO, sequence_id: int = SEQUENCE_ID):
        self._out: Any = out
        self.written = Written()
        self._sequence = _int(10, sequence_id)  # trusted_packet_sequence_id
        self._begins: Dict[Tuple[int, str, str], bytes] = {}
        self._ends: Dict[int, bytes] = {}
        self._plain: Dict[Tuple[int, str, str], Tuple[bytes, bytes, bytes, int]] = {}
        self._template_ids: Dict[Tuple[int, str, str], int] = {}
        self._templates: List[Tuple[bytes, bytes, bytes]] = []
        self._template_names: List[Tuple[int, str, str]] = []
        self._pool: Optional[_Pool] = None
        # sequence_flags: nothing interned is carried from an earlier packet
        self._packet(_int(13, _INCREMENTAL_STATE_CLEARED))

    def _packet(self, body: bytes, timestamp: Optional[int] = None) -> None:
        head = self._sequence if timestamp is None else \
            self._sequence + b"\x40" + _timestamp(timestamp)  # field 8, varint
        payload = head + body
        record = b"\x0a" + _varint(len(payload)) + payload  # Trace.packet
        self._out.write(record)
        self.written.bytes += len(record)

    def process_track(self, uuid: int, pid: int, name: str, labels: Sequence[str] = (),
                      description: str = "", rank: Optional[int] = None) -> None:
        """A process: ``pid`` must be unique in the trace (hosts reuse pids: pass a number of
        the trace's own and put the real one in ``name``). ``rank`` orders processes."""
        process = _int(1, pid) + _text(6, name) + b"".join(_text(8, lab) for lab in labels)
        body = _int(1, uuid) + _bytes(3, process)
        if description:
            body += _text(14, description)
        if rank is not None:
            body += _int(12, rank)  # sibling_order_rank
        self._packet(_bytes(60, body))
        self.written.processes += 1

    def child_track(self, uuid: int, parent: Optional[int], name: str, rank: int = 0,
                    description: str = "") -> None:
        """A named track under ``parent`` (a thread, a GPU stream, the gaps), or at the top
        when ``parent`` is None."""
        body = _int(1, uuid) + _text(2, name) + _int(12, rank)
        if parent is not None:
            body += _int(5, parent)
        if description:
            body += _text(14, description)
        self._packet(_bytes(60, body))

    def slice(self, track: int, name: str, start_ns: int, end_ns: int, category: str = "",
              args: Optional[Mapping[str, Arg]] = None, flow_out: Optional[int] = None,
              flow_in: Optional[int] = None) -> None:
        """A range ``[start_ns, end_ns]`` on ``track``; ``flow_out`` starts an arrow at it
        (a launch), ``flow_in`` ends one (the kernel it launched)."""
        plain = not args and flow_out is None and flow_in is None
        begin = self._begins.get((track, name, category)) if plain else None
        if begin is None:
            event = _event(SLICE_BEGIN, track, name, category, args)
            if flow_out is not None:
                event += _fixed64(47, flow_out)
            if flow_in is not None:
                event += _fixed64(48, flow_in)
            begin = _bytes(11, event)
            if plain:
                if len(self._begins) >= self._CACHE:
                    self._begins.clear()
                self._begins[(track, name, category)] = begin
        end = self._ends.get(track)
        if end is None:
            end = self._ends[track] = _bytes(11, _int(9, SLICE_END) + _int(11, track))
        timed = self._sequence + b"\x40"  # TracePacket.timestamp, a varint
        first = timed + _timestamp(start_ns) + begin
        second = timed + _timestamp(max(start_ns, end_ns)) + end
        record = b"\x0a" + _varint(len(first)) + first + b"\x0a" + _varint(len(second)) + second
        self._out.write(record)
        self.written.bytes += len(record)
        self.written.slices += 1

    def plain_slice(self, track: int, name: str, category: str, start_ns: int,
                    end_ns: int) -> None:
        """:meth:`slice` without arguments or arrows, for the millions of ranges of a large
        report: all of its two packets but their timestamps is kept per (track, name,
        category), so a range costs two timestamps and one join."""
        parts = self._plain.get((track, name, category))
        if parts is None:
            self.slice(track, name, start_ns, end_ns, category)
            begin, end = self._begins[(track, name, category)], self._ends[track]
            if len(self._plain) >= self._CACHE:
                self._plain.clear()
            timed = self._sequence + b"\x40"
            size_one = len(timed) + 9 + len(begin)  # a timestamp of 2**56 ns on: 9 bytes
            size_two = len(timed) + 9 + len(end)
            head = b"\x0a" + _varint(size_one) + timed
            middle = begin + b"\x0a" + _varint(size_two) + timed
            self._plain[(track, name, category)] = (head, middle, end,
                                                    len(head) + len(middle) + len(end) + 18)
            return
        if not NINE_BYTES <= start_ns <= end_ns < TEN_BYTES:
            self.slice(track, name, start_ns, end_ns, category)
            return
        head, middle, tail, size = parts
        self._out.write(head + _timestamp(start_ns) + middle + _timestamp(end_ns) + tail)
        self.written.bytes += size
        self.written.slices += 1

    def template(self, track: int, name: str, category: str) -> int:
        """A number for the plain ranges of (track, name, category), for :meth:`plain_slices`."""
        key = (track, name, category)
        found = self._template_ids.get(key)
        if found is None:
            self._plain.pop(key, None)
            saved, self.written = self.written, Written()
            scratch, self._out = self._out, _Discard()
            try:  # the parts of one range of it, as :meth:`plain_slice` keeps them
                self.plain_slice(track, name, category, NINE_BYTES, NINE_BYTES)
            finally:
                self._out, self.written = scratch, saved
            head, middle, tail, _ = self._plain[key]
            found = self._template_ids[key] = len(self._templates)
            self._templates.append((head, middle, tail))
            self._template_names.append(key)
            self._pool = None
        return found

    def forget_templates(self, above: int = 65_536) -> bool:
        """Drop every template once there are more than ``above`` (a report of many distinct
        names would grow them with its size); True when dropped: numbers given before are
        void."""
        if len(self._templates) <= above:
            return False
        self._template_ids.clear()
        self._templates.clear()
        self._template_names.clear()
        self._pool = None
        return True

    def template_key(self, number: int) -> Tuple[int, str, str]:
        """(track, name, category) of template ``number``."""
        return self._template_names[number]

    def plain_slices(self, templates: Any, starts: Any, ends: Any) -> None:
        """Many plain ranges at once (numpy arrays: template numbers from :meth:`template`,
        starts and ends in ns on the controller's clock from 2002 to 2262, ends >= starts):
        the same bytes as :meth:`plain_slice` of each, in order, built by numpy."""
        import numpy as np

        if self._pool is None:
            self._pool = _Pool(self._templates)
        pool = self._pool
        lengths = pool.length[templates]
        ends_at = np.cumsum(lengths)
        offsets = ends_at - lengths
        total = int(ends_at[-1]) if len(ends_at) else 0
        gather = np.repeat(pool.offset[templates] - offsets, lengths) + np.arange(total)
        out = pool.bytes[gather]
        nine = np.arange(9)
        out[(offsets + pool.first[templates])[:, None] + nine] = _varints9(starts)
        out[(offsets + pool.second[templates])[:, None] + nine] = _varints9(ends)
        self._out.write(out.tobytes())
        self.written.bytes += total
        self.written.slices += len(templates)

    def mark(self) -> Tuple[int, Written]:
        """Where the file is now, for :meth:`rewind` (the file must be seekable)."""
        return self._out.tell(), Written(**vars(self.written))

    def rewind(self, mark: Tuple[int, Written]) -> None:
        """Drop what was written after :meth:`mark` (kept encodings stay valid)."""
        at, written = mark
        self._out.seek(at)
        self._out.truncate()
        self.written = Written(**vars(written))

    def instant(self, track: int, name: str, at_ns: int, category: str = "",
                args: Optional[Mapping[str, Arg]] = None) -> None:
        """A point in time on ``track`` (a step boundary, a gap without a window)."""
        self._packet(_bytes(11, _event(INSTANT, track, name, category, args)), at_ns)


class _Discard:
    """A file that keeps nothing (a template's bytes are made by writing one range)."""

    def write(self, data: bytes) -> int:
        return len(data)


class _Pool:
    """Every template's two packets end to end, timestamps zero, with where each starts,
    how long it is and where its two timestamps go (:meth:`TraceWriter.plain_slices`)."""

    def __init__(self, templates: Sequence[Tuple[bytes, bytes, bytes]]):
        import numpy as np

        zero = bytes(9)
        records = [head + zero + middle + zero + tail for head, middle, tail in templates]
        self.bytes = np.frombuffer(b"".join(records), dtype=np.uint8)
        self.length = np.array([len(r) for r in records], dtype=np.int64)
        self.offset = np.cumsum(self.length) - self.length
        self.first = np.array([len(h) for h, _, _ in templates], dtype=np.int64)
        self.second = np.array([len(h) + 9 + len(m) for h, m, _ in templates], dtype=np.int64)


def _varints9(values: Any) -> Any:
    """The 9-byte varints of ns times from 2002 to 2262 (2**56 <= t < 2**63), one row each."""
    import numpy as np

    v = values.astype(np.uint64)
    columns = [((v >> np.uint64(7 * i)) & np.uint64(0x7F)) | np.uint64(0x80) for i in range(8)]
    columns.append(v >> np.uint64(56))
    return np.stack(columns, axis=1).astype(np.uint8)
