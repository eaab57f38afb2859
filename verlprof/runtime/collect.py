"""Collection: bring every report to its contract path under output_dir, then the manifest.

No shared filesystem is assumed. A report written on the controller's node is renamed in
place; one written on another node is read from its worker over Ray in chunks, written under
output_dir, checked for size, and only then deleted on the worker. Where output_dir is on a
shared filesystem the result is the same: it ends up there.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Optional

from verlprof import paths
from verlprof.backends.base import worker_report
from verlprof.manifest import ReportEntry
from verlprof.plan.model import ProcessPlan
from verlprof.records import (
    STATUS_INCOMPLETE,
    STATUS_MISSING,
    STATUS_OK,
    ProcessIdentity,
    Target,
    Transfer,
    WorkerReport,
)

CHUNK_BYTES = 8 << 20
"""Bytes per Ray call when a report moves between nodes (keeps object-store pressure low)."""


def move_report(item: WorkerReport, output_dir: str, local_node_id: str,
                actor: Optional[Any]) -> ReportEntry:
    """Place one worker report's file at its contract path; return its manifest entry."""
    where = item.where
    path = item.report.path
    relpath = paths.resolve_relpath(path, where.host, where.pid) if where.host and where.pid \
        else path
    status, reason, size = item.status, item.reason, 0
    transfer: Optional[Transfer] = None
    raw = item.raw_path
    if status == STATUS_OK and raw:
        try:
            target = _report_target(output_dir, relpath, raw)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if not where.node_id or where.node_id == local_node_id:
                if os.path.isdir(raw):
                    shutil.copytree(raw, target, dirs_exist_ok=True)
                else:
                    shutil.move(raw, target)
                transfer = "rename"
            else:
                _fetch_over_ray(actor, raw, target)
                transfer = "ray"
            size = _size(target)
            if size == 0 or (item.bytes and size != item.bytes):
                status, reason = STATUS_INCOMPLETE, f"{size} of {item.bytes} bytes arrived"
            elif transfer == "ray" and actor is not None:
                actor.verlprof_discard.remote(raw)
        except Exception as err:  # one report's failure must not lose the others
            status, reason = STATUS_MISSING, " ".join(f"could not collect {raw}: {err}".split())
    return ReportEntry.of(dataclasses.replace(item.report, path=relpath), status=status,
                          host=where.host, pid=where.pid, node_id=where.node_id, bytes=size,
                          reason=reason, window_start_ns=item.window_start_ns,
                          window_end_ns=item.window_end_ns, transfer=transfer)


def _report_target(output_dir: str, relpath: str, raw: str) -> str:
    """Where a report goes: strictly below output_dir, at a normalised relative path, never
    onto an existing directory (a bad entry must not land somewhere unplanned)."""
    target = paths.inside(output_dir, relpath)  # ValueError if it escapes
    if (not relpath or os.path.isabs(relpath) or os.path.normpath(relpath) != relpath
            or target == os.path.realpath(output_dir)
            or (os.path.isdir(target) and not os.path.isdir(raw))):
        raise ValueError(f"{relpath!r} is not a report path inside {output_dir}")
    return target


def move_all(items: List[WorkerReport], actors: Dict[Target, Any], output_dir: str,
             local_node_id: str) -> List[ReportEntry]:
    """:func:`move_report` for every item, a few at a time (transfers overlap)."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(
            lambda it: move_report(it, output_dir, local_node_id,
                                   actors.get((it.report.group, it.report.rank))), items))


def unreachable_reports(process: ProcessPlan, where: ProcessIdentity, reason: str
                        ) -> List[WorkerReport]:
    """Records for a process that cannot be asked (dead or not answering): all missing."""
    return [worker_report(w, raw_path=None, status=STATUS_MISSING, reason=reason, where=where)
            for w in process.windows]


def partial_reports(process: ProcessPlan, where: ProcessIdentity) -> List[str]:
    """Raw files of a process that cannot be asked any more (dead, or not answering), where
    this node can see them: nsys writes what it captured when its application dies mid-window,
    and a hung process may have finished some reports. They stay in place, for post-mortems."""
    pid = where.pid
    if not pid or not process.raw_dir or not os.path.isdir(process.raw_dir):
        return []
    prefix = f"{paths.sanitize(process.group)}_rank{process.rank}_{int(pid)}"
    try:
        names = sorted(os.listdir(process.raw_dir))
    except OSError:
        return []
    return [os.path.join(process.raw_dir, n) for n in names
            if n == prefix or n.startswith(prefix + ".") or n.startswith(prefix + "_")]


def _fetch_over_ray(actor: Any, raw: str, target: str) -> None:
    import ray

    partial = target + ".part"
    offset = 0
    with open(partial, "wb") as handle:
        while True:
            chunk = ray.get(actor.verlprof_read_chunk.remote(raw, offset, CHUNK_BYTES))
            handle.write(chunk)
            offset += len(chunk)
            if len(chunk) < CHUNK_BYTES:
                break
    os.replace(partial, target)


def _size(path: str) -> int:
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
    return os.path.getsize(path) if os.path.exists(path) else 0
