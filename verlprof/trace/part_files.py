"""Reading the reports of one trace side by side: each report is written by a process of its
own into a part file, and the parts are joined in manifest order.

A Perfetto trace is a run of packets, so trace files joined end to end are one trace: each
part has its own packet sequence (``trusted_packet_sequence_id``), its own range of arrow ids,
and child tracks whose uuids depend only on their process and name (:meth:`ProcessTracks.child`),
so that the "thread 12" of one process is one track whichever part names it first. Memory is
that of the reports being read at once (one per core), never the run's.
"""

from __future__ import annotations

import os
import shutil
import threading
from dataclasses import dataclass
from typing import BinaryIO, List, Optional, Sequence, Tuple

from verlprof.trace.clock import Alignment
from verlprof.trace.nsys_events import nsys_events
from verlprof.trace.torch_events import torch_events
from verlprof.trace.tracks import Filters, ProcessTracks, TrackIds
from verlprof.trace.writer import TraceWriter, Written

FLOW_BASES_PER_PART = 8
"""Arrow id ranges one report may take (an nsys report takes one per GPU table)."""


@dataclass(frozen=True)
class Part:
    """One report to read into a part file."""

    index: int
    path: str
    backend: str
    window_start_ns: Optional[int]
    process_uuid: int
    alignment: Alignment
    filters: Filters
    clip: Optional[Tuple[int, int]]
    out: str
    timeout_s: float


def read_part(part: Part) -> Tuple[Written, Optional[str]]:
    """Write ``part``'s events into ``part.out``; (what was written, why it could not be read:
    one line, None when it was)."""
    with open(part.out, "wb", buffering=1 << 20) as handle:
        writer = TraceWriter(handle, sequence_id=part.index + 2)
        ids = TrackIds(first_flow=1 + part.index * FLOW_BASES_PER_PART)
        tracks = ProcessTracks(writer, ids, part.process_uuid, part.alignment, part.filters,
                               clip=part.clip)
        try:
            if part.backend == "nsys":
                nsys_events(part.path, tracks, part.timeout_s)
            else:
                torch_events(part.path, tracks, part.window_start_ns)
        except Exception as err:  # noqa: BLE001 - one report's failure is a gap, not the end
            lines = str(err).strip().splitlines()
            return writer.written, f"{type(err).__name__}: {lines[0] if lines else ''}"
    return writer.written, None


def read_parts(parts: Sequence[Part], jobs: Optional[int] = None
               ) -> List[Tuple[Written, Optional[str]]]:
    """Every part, in a pool of ``jobs`` processes (default one per core) when there are
    several; in this process otherwise, or when no pool can start."""
    jobs = min(jobs or os.cpu_count() or 1, len(parts))
    if jobs <= 1:
        return [read_part(p) for p in parts]
    # imported here: multiprocessing costs ~15 ms that a trace of one report never needs
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool
    from multiprocessing import get_context

    # fork is fast but can deadlock a process with threads (rich's, an export's): spawn then
    context = get_context("fork" if threading.active_count() == 1 else "spawn")
    try:
        with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
            return list(pool.map(read_part, parts))
    except (BrokenProcessPool, RuntimeError, OSError):  # read here what a pool could not
        return [read_part(p) for p in parts]


def append_part(out: BinaryIO, part: Part) -> None:
    """Copy ``part``'s file to the end of ``out`` and remove it."""
    with open(part.out, "rb") as handle:
        shutil.copyfileobj(handle, out, 1 << 20)
    os.unlink(part.out)
