"""The pieces of placement while the job runs (``verlprof.runtime.placement``) that touch
files, ranks and Ray rather than the placer's state: put one report at its contract path,
ask in-process ranks, write a manifest of thousands of entries quickly, find lost nodes."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import threading
from typing import Any, Dict, List, Optional, Set

from verlprof import paths
from verlprof.manifest import ReportEntry
from verlprof.records import STATUS_OK, Target, WorkerReport
from verlprof.runtime.collect import fetch_from_node, how_it_travels, report_target
from verlprof.runtime.local_rpc import OnOwnThread
from verlprof.worker.ray_guard import ray_connected


def place_early(item: WorkerReport, output_dir: str, local_node: str) -> Optional[ReportEntry]:
    """Put one complete report at its contract path, keeping its raw file (removed at finalize);
    its ``ok`` entry as finalize writes it, or None when it did not arrive whole (finalize moves
    it then)."""
    where, raw = item.where, item.raw_path
    if not raw or item.status != STATUS_OK:
        return None
    relpath = paths.resolve_relpath(item.report.path, where.host, where.pid) \
        if where.host and where.pid else item.report.path
    target = report_target(output_dir, relpath, False)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    transfer = how_it_travels(item, local_node)
    if transfer != "ray":
        if os.path.isdir(raw):
            return None
        _link(raw, target)
    else:
        fetch_from_node(where.node_id, os.path.dirname(raw), os.path.basename(raw), target)
    size = os.path.getsize(target)
    if size == 0 or (item.bytes and size != item.bytes):
        with contextlib.suppress(OSError):
            os.remove(target)
        return None
    return ReportEntry.of(dataclasses.replace(item.report, path=relpath), status=STATUS_OK,
                          host=where.host, pid=where.pid, node_id=where.node_id, bytes=size,
                          reason=None, window_start_ns=item.window_start_ns,
                          window_end_ns=item.window_end_ns,
                          transfer=transfer)


def _link(raw: str, target: str) -> None:
    """``target`` becomes the same file as ``raw`` (a copy where no hard link can be made)."""
    partial = target + paths.PART_SUFFIX
    with contextlib.suppress(FileNotFoundError):
        os.remove(partial)
    try:
        os.link(raw, partial)
    except OSError:  # another file system, or links not supported
        shutil.copyfile(raw, partial)
    os.replace(partial, target)




def ask_in_process(rpc: Any, targets: List[Target]) -> Dict[Target, List[WorkerReport]]:
    """``verlprof_ready`` on in-process ranks (``runtime/local_rpc.py``): straight to each
    rank, as the Ray path bypasses the layer's bookkeeping; a rank killed or busy is not
    asked (a Ray actor in that state would not answer either)."""
    out: Dict[Target, List[WorkerReport]] = {}
    dead = getattr(rpc, "is_dead", lambda target: False)  # InProcessRanks'; a fake: none
    for target in targets:
        actor = rpc.actors.get(target)
        if actor is None or dead(target) or target in getattr(rpc, "busy", {}):
            continue
        with contextlib.suppress(Exception):
            if isinstance(actor, OnOwnThread):
                out[target] = actor.send(actor.rank.verlprof_ready, ()).result(
                    rpc.rpc_timeout_s)
            else:
                out[target] = actor.verlprof_ready()
    return out


def lowest_priority() -> None:
    """This thread at nice 19 (Linux: a thread's own priority), so that the trainer's threads
    go first when the cores are busy."""
    with contextlib.suppress(Exception):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)


def lost_nodes(candidates: Set[str]) -> Set[str]:
    """Which of these Ray node ids Ray reports dead (none outside Ray)."""
    if not candidates:
        return set()
    try:
        import ray

        with ray_connected():
            alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
    except Exception:  # RayGone: outside Ray, or after ray.shutdown()
        return set()
    return {n for n in candidates if n not in alive}
