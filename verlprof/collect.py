"""Collection: bring every report to its contract path under output_dir, then the manifest.

No shared filesystem is assumed. A report written on the controller's node is renamed in
place; one written on another node is read from its worker over Ray in chunks, written under
output_dir, checked for size, and only then deleted on the worker. Where output_dir is on a
shared filesystem the result is the same: it ends up there.
"""

from __future__ import annotations

import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Optional

from verlprof import paths
from verlprof.manifest import STATUS_INCOMPLETE, STATUS_MISSING, STATUS_OK, ReportEntry
from verlprof.plan import ProcessPlan

CHUNK_BYTES = 8 << 20
"""Bytes per Ray call when a report moves between nodes (keeps object-store pressure low)."""


def move_report(item: Dict[str, Any], output_dir: str, local_node_id: str,
                actor: Optional[Any]) -> ReportEntry:
    """Place one worker entry's file at its contract path; return its manifest entry."""
    host, pid = item.get("host", ""), int(item.get("pid") or 0)
    relpath = paths.resolve_relpath(item["path"], host, pid) if host and pid else item["path"]
    status, reason, transfer, size = item["status"], item.get("reason"), None, 0
    raw = item.get("raw_path")
    if status == STATUS_OK and raw:
        try:
            target = _report_target(output_dir, relpath, raw)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if not item.get("node_id") or item.get("node_id") == local_node_id:
                if os.path.isdir(raw):
                    shutil.copytree(raw, target, dirs_exist_ok=True)
                else:
                    shutil.move(raw, target)
                transfer = "rename"
            else:
                _fetch_over_ray(actor, raw, target)
                transfer = "ray"
            size = _size(target)
            if size == 0 or (item.get("bytes") and size != item["bytes"]):
                status, reason = STATUS_INCOMPLETE, (f"{size} of {item.get('bytes')} bytes "
                                                     "arrived")
            elif transfer == "ray":
                actor.verlprof_discard.remote(raw)
        except Exception as err:  # one report's failure must not lose the others
            status, reason = STATUS_MISSING, " ".join(f"could not collect {raw}: {err}".split())
    return ReportEntry(
        steps=tuple(item["steps"]), group=item["group"], rank=item["rank"],
        component=item["component"], backend=item["backend"], path=relpath, status=status,
        role=item.get("role"), phase=item.get("phase"), host=host, pid=pid,
        node_id=item.get("node_id", ""), bytes=size, reason=reason,
        window_start_ns=item.get("window_start_ns"), window_end_ns=item.get("window_end_ns"),
        transfer=transfer)


def _report_target(output_dir: str, relpath: str, raw: str) -> str:
    """Where a report goes: strictly below output_dir, at a normalised relative path, never
    onto an existing directory (a bad entry must not land somewhere unplanned)."""
    target = paths.inside(output_dir, relpath)  # ValueError if it escapes
    if (not relpath or os.path.isabs(relpath) or os.path.normpath(relpath) != relpath
            or target == os.path.realpath(output_dir)
            or (os.path.isdir(target) and not os.path.isdir(raw))):
        raise ValueError(f"{relpath!r} is not a report path inside {output_dir}")
    return target


def move_all(items: List[Dict[str, Any]], actors: Dict[tuple, Any], output_dir: str,
             local_node_id: str) -> List[ReportEntry]:
    """:func:`move_report` for every item, a few at a time (transfers overlap)."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(
            lambda it: move_report(it, output_dir, local_node_id,
                                   actors.get((it["group"], it["rank"]))), items))


def unreachable_entries(process: ProcessPlan, identity: Dict[str, Any], reason: str
                        ) -> List[Dict[str, Any]]:
    """Entries for a process that cannot be asked (dead or not answering): all missing."""
    from verlprof.backends.base import entry

    where = {"host": identity.get("host", ""), "pid": identity.get("pid", 0),
             "node_id": identity.get("node_id", "")}
    return [dict(entry(w, raw_path=None, status=STATUS_MISSING, reason=reason), **where)
            for w in process.windows]


def partial_reports(process: ProcessPlan, identity: Dict[str, Any]) -> List[str]:
    """Raw files of a process that cannot be asked any more (dead, or not answering), where
    this node can see them: nsys writes what it captured when its application dies mid-window,
    and a hung process may have finished some reports. They stay in place, for post-mortems."""
    pid = identity.get("pid")
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
