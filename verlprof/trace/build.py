"""One trace of a whole run: the manifest's processes as tracks, every report's events on the
controller's clock, and every hole marked with its reason.

:func:`write_trace` reads ``manifest.json`` and writes ``summary/trace.pftrace`` (Perfetto's
protobuf format, :mod:`verlprof.trace.writer`) one report at a time, so memory stays that of
the largest report whatever the run's size. Process tracks are generic over the manifest's
``(group, rank)``: a new kind of group (rollout replicas) appears without code here.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from typing import BinaryIO, Dict, List, Optional, Sequence, Tuple

from verlprof import paths
from verlprof.manifest import (
    STATUS_MISSING,
    STATUS_OK,
    STATUS_SKIPPED,
    Manifest,
    ReportEntry,
    read_manifest,
)
from verlprof.safe_text import visible
from verlprof.trace.clock import Alignment, Key, alignments, clock_summary
from verlprof.trace.links import Link, write_links
from verlprof.trace.part_files import Part, append_part, read_parts
from verlprof.trace.tracks import Filters, ProcessTracks, TrackIds
from verlprof.trace.writer import TraceWriter, Written

TRACE_NAME = paths.TRACE_NAME
Span = Tuple[int, int]


@dataclass(frozen=True)
class TraceResult:
    """What :func:`write_trace` wrote."""

    path: str
    written: Written
    gaps: int
    """Reports marked as holes (missing, incomplete, unreadable, not readable here)."""
    clock_line: str
    """The alignment's error bound in words."""
    seconds: float

    def line(self) -> str:
        """Three lines: where it went and its size, the clocks' error bound, how to open it."""
        w = self.written
        return (f"trace: {visible(self.path)} ({_size(w.bytes)}: {w.processes} processes, "
                f"{w.slices:,} ranges, {self.gaps} gap(s))\n  {self.clock_line}\n"
                "  open it at https://ui.perfetto.dev (Open trace file)")


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 1024:.1f} KiB"


def write_trace(output_dir: str, *, manifest: Optional[Manifest] = None,
                out_path: Optional[str] = None, filters: Optional[Filters] = None,
                timeout_s: float = 300.0, jobs: Optional[int] = None,
                links: Sequence[Link] = ()) -> TraceResult:
    """Write the trace of ``output_dir``'s run, reading ``jobs`` reports at once (default one
    per core), with ``links`` drawn as arrows (:mod:`verlprof.trace.links`); raises
    ValueError for a directory without a readable manifest, OSError when the trace cannot be
    written."""
    began = time.monotonic()
    manifest = read_manifest(output_dir) if manifest is None else manifest
    target = out_path or os.path.join(output_dir, paths.SUMMARY_DIR, TRACE_NAME)
    folder = os.path.dirname(os.path.abspath(target))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".trace.", dir=folder)
    try:
        with os.fdopen(fd, "wb", buffering=1 << 20) as handle:
            writer = TraceWriter(handle)
            run = _Run(output_dir, manifest, writer, filters or Filters(), timeout_s)
            gaps = run.write(handle, tmp, jobs, links)
        os.chmod(tmp, 0o666 & ~_umask())  # as open() would have made it, not mkstemp's 0600
        os.replace(tmp, target)
    except BaseException:
        for leftover in [tmp] + [f"{tmp}.{i}" for i in range(len(manifest.reports))]:
            if os.path.exists(leftover):
                os.unlink(leftover)
        raise
    return TraceResult(target, writer.written, gaps, clock_summary(manifest).line(),
                       time.monotonic() - began)


def _umask() -> int:
    """This process's umask, read without setting it (os.umask would change it for a moment
    under the threads of ``verlprof report``)."""
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


class _Run:
    """One trace being written."""

    def __init__(self, output_dir: str, manifest: Manifest, writer: TraceWriter,
                 filters: Filters, timeout_s: float):
        self.output_dir, self.manifest, self.writer = output_dir, manifest, writer
        self.filters, self.timeout_s = filters, timeout_s
        self.ids = TrackIds()
        self.clocks = alignments(manifest)
        self.entries = [e for e in manifest.reports
                        if filters.keeps(e.group, e.rank) and filters.keeps_steps(e.steps)]
        self.windows = self._window_spans()
        self.tracks: Dict[Key, ProcessTracks] = {}
        self.gap_count = 0

    def _window_spans(self) -> Dict[Tuple[int, ...], Span]:
        """Each planned window's extent on the controller's clock, from the reports' own
        window times (the earliest start and latest end of those that have them)."""
        spans: Dict[Tuple[int, ...], Span] = {}
        for entry in self.entries:
            if entry.window_start_ns is None or entry.window_end_ns is None:
                continue
            clock = self.clocks.get((entry.group, entry.rank), Alignment())
            lo, hi = clock.place(entry.window_start_ns), clock.place(entry.window_end_ns)
            old = spans.get(entry.steps)
            spans[entry.steps] = (lo, hi) if old is None else (min(old[0], lo), max(old[1], hi))
        return spans

    def write(self, out: BinaryIO, prefix: str, jobs: Optional[int],
              links: Sequence[Link] = ()) -> int:
        """The header, the process tracks, the links and the gaps here; the reports' events
        in parts written side by side (:mod:`verlprof.trace.part_files`), joined in manifest
        order."""
        self._header()
        write_links(links, dict(self.tracks))
        parts: List[Tuple[ReportEntry, Part]] = []
        for index, entry in enumerate(self.entries):
            part = self._entry(entry, f"{prefix}.{index}", index)
            if part is not None:
                parts.append((entry, part))
        for (entry, part), (written, error) in zip(parts, read_parts([p for _, p in parts],
                                                                   jobs)):
            append_part(out, part)
            self.writer.written.add(written)
            if error is not None:
                self._gap(entry, self.tracks[(entry.group, entry.rank)], "unreadable", error)
        return self.gap_count

    def _header(self) -> None:
        summary = clock_summary(self.manifest)
        top = self.ids.uuid()
        self.writer.child_track(top, None, "verlprof steps", rank=0,
                                description=summary.line())
        first = min((s for s, _ in self.windows.values()), default=0)
        self.writer.instant(top, "verlprof trace", first, category="verlprof", args={
            "run_id": self.manifest.run_id or "", "tool": self.manifest.tool,
            "largest_clock_error_ns": -1 if summary.largest_error_ns is None
            else summary.largest_error_ns,
            "clocks": summary.line(), "verlprof_version": self.manifest.verlprof_version})
        for steps, (lo, hi) in sorted(self.windows.items(), key=lambda kv: kv[1]):
            label = _steps(steps)
            self.writer.slice(top, label, lo, hi, category="step")
            self.writer.instant(top, f"{label} begins", lo, category="step")
            self.writer.instant(top, f"{label} ends", hi, category="step")
        self._process_tracks()

    def _process_tracks(self) -> None:
        m = self.manifest
        processes = ([m.controller] if m.controller is not None else []) + \
            sorted(m.processes, key=lambda p: (p.group, p.rank))
        known = {(p.group, p.rank): p for p in processes}
        roles: Dict[Key, Dict[str, None]] = {}  # each process's roles, in order, once each
        for e in self.entries:
            roles.setdefault((e.group, e.rank), {}).update(
                dict.fromkeys(e.roles or ((e.role,) if e.role else ())))
        keys = [k for k in known if k in roles or k == ("controller", 0)] + \
            sorted(k for k in roles if k not in known)
        for order, key in enumerate(keys):
            process = known.get(key)
            host = process.host if process else ""
            pid = process.pid if process else 0
            clock = self.clocks.get(key, Alignment())
            name = "controller" if key[0] == "controller" else f"{key[0]} rank {key[1]}"
            where = f"{host} pid {pid}" if host or pid else "process never registered"
            error = "clock not measured" if clock.error_ns is None else \
                f"clock offset {clock.offset_ns / 1e6:+.3f} ms ±{clock.error_ns / 1e6:.3f} ms"
            labels = [f"roles: {', '.join(roles.get(key, []))}"] if roles.get(key) else []
            labels += [f"host {host}", f"pid {pid}", error]
            uuid = self.ids.uuid()
            self.writer.process_track(uuid, self.ids.pid(), f"{name} ({where})", labels,
                                      description=error, rank=order + 1)
            self.tracks[key] = ProcessTracks(self.writer, self.ids, uuid, clock, self.filters,
                                             clip=self._clip())

    def _clip(self) -> Optional[Span]:
        if self.filters.steps is None or not self.windows:
            return None
        return (min(s for s, _ in self.windows.values()),
                max(e for _, e in self.windows.values()))

    def _entry(self, entry: ReportEntry, out: str, index: int) -> Optional[Part]:
        """The part that reads ``entry``'s report (None: nothing to read), its gap if any."""
        tracks = self.tracks[(entry.group, entry.rank)]
        if entry.status != STATUS_OK:
            self._gap(entry, tracks, entry.status, entry.reason or "no reason recorded")
        if entry.status in (STATUS_MISSING, STATUS_SKIPPED):  # no file
            return None
        try:
            full = paths.inside(self.output_dir, entry.path)
        except ValueError as err:
            self._gap(entry, tracks, "unreadable", str(err))
            return None
        if entry.backend not in ("nsys", "torch"):
            self._gap(entry, tracks, "not in this trace",
                      f"{entry.backend} output is not read into the trace: open "
                      f"{entry.path} at https://ui.perfetto.dev")
            return None
        return Part(index=index, path=full, backend=entry.backend,
                    window_start_ns=entry.window_start_ns, process_uuid=tracks.uuid,
                    alignment=tracks.alignment, filters=self.filters, clip=tracks.clip,
                    out=out, timeout_s=self.timeout_s)

    def _gap(self, entry: ReportEntry, tracks: ProcessTracks, kind: str, reason: str) -> None:
        """A marked hole: the report's window (or its steps' span) on a ``gaps`` track."""
        self.gap_count += 1
        track = tracks.child("gaps", "", "gaps (missing, incomplete, unreadable)", rank=0)
        name = f"{kind}: {entry.component} {_steps(entry.steps)}"
        args = {"reason": reason, "report": entry.path, "status": kind}
        span: Optional[Span] = None
        if entry.window_start_ns is not None and entry.window_end_ns is not None:
            span = (tracks.alignment.place(entry.window_start_ns),
                    tracks.alignment.place(entry.window_end_ns))
        span = span or self.windows.get(entry.steps)
        if span is not None:
            self.writer.slice(track, name, span[0], span[1], category="gap", args=args)
        else:
            at = min((s for s, _ in self.windows.values()), default=0)
            self.writer.instant(track, name, at, category="gap", args=args)


def _steps(steps: Tuple[int, ...]) -> str:
    if len(steps) == 1:
        return f"step {steps[0]}"
    return f"steps {steps[0]}-{steps[-1]}"
