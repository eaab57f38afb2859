"""A written trace as the ``perfetto`` package's own protobuf classes decode it (a reader no
one here wrote): processes, the tracks under each, slices per track (BEGIN/END paired per
track in time order, as Perfetto's importer pairs them), instants and flows."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent


@dataclass
class Slice:
    name: str
    start: int
    end: int
    category: str
    args: Dict[str, object]
    flow_out: Tuple[int, ...]
    flow_in: Tuple[int, ...]


@dataclass
class Decoded:
    processes: Dict[int, str] = field(default_factory=dict)
    """process track uuid -> process name."""
    labels: Dict[int, List[str]] = field(default_factory=dict)
    tracks: Dict[int, Tuple[Optional[int], str]] = field(default_factory=dict)
    """child track uuid -> (parent uuid, name)."""
    slices: Dict[int, List[Slice]] = field(default_factory=lambda: defaultdict(list))
    instants: Dict[int, List[Tuple[str, int, Dict[str, object]]]] = \
        field(default_factory=lambda: defaultdict(list))

    def process_of(self, track: int) -> Optional[int]:
        while track not in self.processes:
            parent = self.tracks.get(track, (None, ""))[0]
            if parent is None:
                return None
            track = parent
        return track

    def process_named(self, prefix: str) -> int:
        found = [u for u, n in self.processes.items() if n.startswith(prefix)]
        assert len(found) == 1, (prefix, self.processes)
        return found[0]

    def slices_of_process(self, process: int) -> List[Slice]:
        return sorted((s for t, ss in self.slices.items() if self.process_of(t) == process
                       for s in ss), key=lambda s: (s.start, -s.end))

    def track_named(self, process: Optional[int], name: str) -> int:
        found = [u for u, (p, n) in self.tracks.items() if p == process and n == name]
        assert len(found) == 1, (process, name, self.tracks)
        return found[0]


def _args(event) -> Dict[str, object]:
    out: Dict[str, object] = {}
    for a in event.debug_annotations:
        out[a.name] = a.string_value if a.HasField("string_value") else a.int_value
    return out


def decode(path: str) -> Decoded:
    trace = Trace()
    with open(path, "rb") as handle:
        trace.ParseFromString(handle.read())
    out = Decoded()
    events = []
    for n, packet in enumerate(trace.packet):
        if packet.HasField("track_descriptor"):
            d = packet.track_descriptor
            if d.HasField("process"):
                out.processes[d.uuid] = d.process.process_name
                out.labels[d.uuid] = list(d.process.process_labels)
            else:
                out.tracks[d.uuid] = (d.parent_uuid if d.HasField("parent_uuid") else None,
                                      d.name)
        elif packet.HasField("track_event"):
            events.append((packet.timestamp, n, packet.track_event))
    open_: Dict[int, List[Tuple[int, object]]] = defaultdict(list)
    for ts, _, event in sorted(events, key=lambda e: (e[0], e[1])):
        if event.type == TrackEvent.TYPE_SLICE_BEGIN:
            open_[event.track_uuid].append((ts, event))
        elif event.type == TrackEvent.TYPE_SLICE_END:
            start, begin = open_[event.track_uuid].pop()
            out.slices[event.track_uuid].append(Slice(
                begin.name, start, ts, begin.categories[0] if begin.categories else "",
                _args(begin), tuple(begin.flow_ids), tuple(begin.terminating_flow_ids)))
        elif event.type == TrackEvent.TYPE_INSTANT:
            out.instants[event.track_uuid].append((event.name, ts, _args(event)))
    assert not any(open_.values()), "a slice began and never ended"
    return out
