"""Collection: bring every report to its contract path under output_dir, then the manifest.

No shared filesystem is assumed. A report written on the controller's node is renamed in
place; one written on another node is read from its worker over Ray in chunks, written under
output_dir, checked for size, and only then deleted on the worker. Where output_dir is on a
file system every node mounts, the controller sees the very file the worker stamped
(:func:`verlprof.storage.seen_here`) and renames it where it is: no byte travels.

A tool that writes when the process exits (rocprof-sys) has nothing to collect at finalize: its
entries are written pending, and :func:`collect_at_exit`, run once the workers have exited
(``ProfileController.wait_for_profilers``), moves each process's files into its one contract
directory and marks every window entry of that process ``ok``.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from verlprof import paths
from verlprof.backends import get_backend
from verlprof.backends.base import PENDING_AT_EXIT, worker_report
from verlprof.manifest import Manifest, ProcessInfo, ReportEntry, ServedGroup
from verlprof.plan_model import ProcessPlan, ProfilePlan
from verlprof.records import (
    STATUS_INCOMPLETE,
    STATUS_MISSING,
    STATUS_OK,
    ProcessIdentity,
    StepWindow,
    Target,
    Tool,
    Transfer,
    WorkerReport,
)
from verlprof.runtime.teardown import discard, exit_outputs_on_nodes, on_node, read_chunk
from verlprof.safe_text import one_line
from verlprof.storage import seen_here
from verlprof.version import __version__

CHUNK_BYTES = 8 << 20
"""Bytes per Ray call when a report moves between nodes (keeps object-store pressure low)."""


def move_report(item: WorkerReport, output_dir: str, local_node_id: str,
                actor: Optional[Any], how: Optional[Transfer] = None) -> ReportEntry:
    """Place one worker report's file at its contract path; return its manifest entry.
    ``how``: :func:`how_it_travels`, when the caller has decided it already. ``actor``: the
    process's, which reads its files for another node; None for a process that is gone,
    whose node then reads them (a task pinned there)."""
    where = item.where
    path = item.report.path
    relpath = paths.resolve_relpath(path, where.host, where.pid) if where.host and where.pid \
        else path
    status, reason, size = item.status, item.reason, 0
    transfer: Optional[Transfer] = None
    raw = item.raw_path if has_file(item) else None
    if raw:  # incomplete too: what a process left at its death
        try:
            target = report_target(output_dir, relpath, os.path.isdir(raw))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            transfer = how or how_it_travels(item, local_node_id)
            if transfer == "rename" and os.path.isdir(raw):
                shutil.copytree(raw, target, dirs_exist_ok=True)
            elif transfer != "ray":
                shutil.move(raw, target)
            elif actor is not None:
                _fetch_over_ray(_actor_reader(actor, raw), target)
            else:  # its process is gone: a task pinned to its node reads it
                fetch_from_node(where.node_id, os.path.dirname(raw), os.path.basename(raw),
                                target)
            size = _size(target)
            if size == 0 or (item.bytes and size != item.bytes):
                status, reason = STATUS_INCOMPLETE, f"{size} of {item.bytes} bytes arrived"
            elif transfer == "ray" and actor is not None:
                actor.verlprof_discard.remote(raw)
            elif transfer == "ray":
                on_node(discard, where.node_id, os.path.dirname(raw), [os.path.basename(raw)])
        except Exception as err:  # one report's failure must not lose the others
            status, reason = STATUS_MISSING, one_line(f"could not collect {raw}: {err}")
    return ReportEntry.of(dataclasses.replace(item.report, path=relpath), status=status,
                          host=where.host, pid=where.pid, node_id=where.node_id, bytes=size,
                          reason=reason, window_start_ns=item.window_start_ns,
                          window_end_ns=item.window_end_ns, transfer=transfer)


def has_file(item: WorkerReport) -> bool:
    """Whether ``item`` names a file to place (a missing report names none)."""
    return item.status != STATUS_MISSING and bool(item.raw_path)


def how_it_travels(item: WorkerReport, local_node_id: str) -> Transfer:
    """How ``item``'s raw file reaches output_dir from here: ``rename`` when this node wrote it,
    ``shared`` when this node sees the very file another node stamped (one file system on
    both), else ``ray`` (read from that node)."""
    node = item.where.node_id
    if not node or node == local_node_id:
        return "rename"
    return "shared" if item.raw_path and seen_here(item.raw_path, item.stamp) else "ray"


def report_target(output_dir: str, relpath: str, is_dir: bool) -> str:
    """Where a report goes: strictly below output_dir, at a normalised relative path, never a
    file onto an existing directory or a directory onto a file (a bad entry must not land
    somewhere unplanned)."""
    target = paths.inside(output_dir, relpath)  # ValueError if it escapes
    if (not relpath or os.path.isabs(relpath) or os.path.normpath(relpath) != relpath
            or target == os.path.realpath(output_dir)
            or (os.path.exists(target) and os.path.isdir(target) != is_dir)):
        raise ValueError(f"{relpath!r} is not a report path inside {output_dir}")
    return target


def move_all(items: List[WorkerReport], actors: Dict[Target, Any], output_dir: str,
             local_node_id: str) -> List[ReportEntry]:
    """:func:`move_report` for every item, in order. Those read from another node over Ray go a
    few at a time (their transfers overlap); the rest (a rename, a report that never came) in
    this thread: a pool task each cost more than the move itself (2 of the 4 s that finalize
    took for the 24,576 entries of 8,192 ranks)."""
    hows = [how_it_travels(item, local_node_id) if has_file(item) else None for item in items]

    def move(i: int) -> ReportEntry:
        item = items[i]
        return move_report(item, output_dir, local_node_id,
                           actors.get((item.report.group, item.report.rank)), hows[i])

    remote = [i for i, how in enumerate(hows) if how == "ray"]
    with ThreadPoolExecutor(max_workers=4) as pool:
        fetched = dict(zip(remote, pool.map(move, remote)))
    return [fetched[i] if i in fetched else move(i) for i in range(len(items))]


def unreachable_reports(process: ProcessPlan, where: ProcessIdentity, reason: str,
                        history: Sequence[Tuple[StepWindow, bool]] = (), tool: Tool = "nsys",
                        local_node_id: str = "", timeout_s: float = 0.0) -> List[WorkerReport]:
    """Records for a process that cannot be asked (dead or not answering).

    ``history``, for a process that died: the step windows it was sent, in order, each with
    whether it closed. Where this node sees its raw directory, what the tool finished before
    the death is placed: ``ok`` for a window that closed, ``incomplete`` for the one the death
    cut short (what was captured until then). Every other report is ``missing`` with
    ``reason``, which counts the files left in ``.raw`` for a post-mortem.
    """
    found: Dict[str, str] = {}
    backend = get_backend(tool)
    # a window refused or cut before the last one would shift nsys' numbering: then none
    if history and where.pid and where.node_id in ("", local_node_id) \
            and all(closed for _, closed in history[:-1]):
        found = backend.left_by_dead(process, where, [s for s, _ in history], timeout_s)
    placed = set(found.values())
    partial = [f for f in partial_reports(process, where) if f not in placed]
    why_missing = reason
    if partial:
        folder = paths.raw_dir("", process.group, process.rank)  # relative to output_dir
        why_missing += f"; {len(partial)} uncollected file(s) left in {folder}"
    cut = {steps for steps, closed in history if not closed}
    out = []
    for window in process.windows:
        raw = found.get(window.report.path)
        if raw is None:
            out.append(worker_report(window, raw_path=None, status=STATUS_MISSING,
                                     reason=why_missing, where=where))
        elif window.steps not in cut or backend.writes_at_close:
            out.append(worker_report(window, raw_path=raw, status=STATUS_OK, where=where))
        else:
            out.append(worker_report(window, raw_path=raw, status=STATUS_INCOMPLETE, where=where,
                                     reason=f"{reason} in this window; the report holds what "
                                            f"was captured until then"))
    return out


def partial_reports(process: ProcessPlan, where: ProcessIdentity) -> List[str]:
    """Raw files of a process that cannot be asked any more (dead, or not answering), where
    this node can see them: nsys writes what it captured when its application dies mid-window,
    and a hung process may have finished some reports. They stay in place, for post-mortems."""
    pid = where.pid
    if not pid or not process.raw_dir or not os.path.isdir(process.raw_dir):
        return []
    prefix = paths.raw_name(process.group, process.rank, pid)
    try:
        names = sorted(os.listdir(process.raw_dir))
    except OSError:
        return []
    return [os.path.join(process.raw_dir, n) for n in names
            if n == prefix or n.startswith(prefix + ".") or n.startswith(prefix + "_")]


def _actor_reader(actor: Any, raw: str) -> Callable[[int], bytes]:
    import ray

    return lambda offset: ray.get(actor.verlprof_read_chunk.remote(raw, offset, CHUNK_BYTES))


def _node_reader(node: str, directory: str, relpath: str) -> Callable[[int], bytes]:
    def read(offset: int) -> bytes:
        chunk = on_node(read_chunk, node, directory, relpath, offset, CHUNK_BYTES)
        if not isinstance(chunk, bytes):
            raise TimeoutError(f"its node did not send {relpath} within 60s")
        return chunk
    return read


def fetch_from_node(node: str, directory: str, relpath: str, target: str) -> None:
    """Copy ``relpath`` below ``directory`` on Ray node ``node`` to ``target`` on this one."""
    _fetch_over_ray(_node_reader(node, directory, relpath), target)


def _fetch_over_ray(read: Callable[[int], bytes], target: str) -> None:
    """Copy a file from another node, chunk by chunk (``read(offset)``), then rename it."""
    partial = target + paths.PART_SUFFIX
    offset = 0
    with open(partial, "wb") as handle:
        while True:
            chunk = read(offset)
            handle.write(chunk)
            offset += len(chunk)
            if len(chunk) < CHUNK_BYTES:
                break
    os.replace(partial, target)


def collect_at_exit(manifest: Manifest, plan: ProfilePlan, timeout_s: float,
                    local_node: str) -> Tuple[Manifest, List[str]]:
    """After the workers exited: gather the output each pending process wrote at exit (found
    by its pid, never another process's) into the report path its windows share, and return
    the manifest with those entries ``ok`` (size, transfer), everything else kept, and the
    problems, one line each (also added to its warnings). Unchanged (the same object) when
    nothing is pending."""
    if not get_backend(plan.tool).output_at_exit:
        return manifest, []
    pending: Dict[Target, List[int]] = {}
    for index, entry in enumerate(manifest.reports):
        if entry.status == STATUS_INCOMPLETE and entry.reason == PENDING_AT_EXIT and entry.pid:
            pending.setdefault((entry.group, entry.rank), []).append(index)
    processes = {(p.group, p.rank): p for p in plan.processes}
    pending = {t: i for t, i in pending.items() if t in processes}
    if not pending:
        return manifest, []
    asks = {t: (manifest.reports[i[0]].node_id, processes[t], manifest.reports[i[0]].pid)
            for t, i in pending.items()}
    found = exit_outputs_on_nodes(plan.tool, asks, timeout_s, local_node)
    entries = list(manifest.reports)
    problems: List[str] = []
    for (group, rank), indices in pending.items():
        outcome = place_exit_output(entries[indices[0]], found.get((group, rank)),
                                    plan.output_dir, local_node)
        if outcome["status"] != STATUS_OK:
            problems.append(f"{group} rank {rank}: {outcome['reason']}")
        for index in indices:
            entries[index] = dataclasses.replace(entries[index], **outcome)
    warnings = tuple(dict.fromkeys(manifest.warnings + tuple(problems)))
    return dataclasses.replace(manifest, reports=tuple(entries), warnings=warnings), problems


def place_exit_output(entry: ReportEntry,
                      found: Optional[Tuple[str, List[Tuple[str, int]], str]],
                      output_dir: str, local_node: str) -> Dict[str, Any]:
    """Move one exited process's files (``found``: directory, [(relative file, bytes)],
    problem) into the directory ``entry.path``; the entry fields that change."""
    if found is None:
        return dict(status=STATUS_INCOMPLETE, reason=f"the node of pid {entry.pid} did not "
                    "answer; its output stays where the process wrote it")
    directory, files, problem = found
    if problem:
        return dict(status=STATUS_INCOMPLETE, reason=f"{problem}; its output is written "
                    "when it exits")
    if not files:
        return dict(status=STATUS_MISSING, reason=f"no output of pid {entry.pid} in "
                    f"{directory} after the process exited (it is written at a normal exit)")
    remote = bool(entry.node_id) and entry.node_id != local_node
    try:
        target = report_target(output_dir, entry.path, True)
        os.makedirs(target, exist_ok=True)
        size = 0
        for relpath, _ in files:
            dest = paths.inside(target, relpath)  # ValueError if it escapes
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            if remote:
                fetch_from_node(entry.node_id, directory, relpath, dest)
            else:
                shutil.move(paths.inside(directory, relpath), dest)
            size += os.path.getsize(dest)
    except Exception as err:  # one process's failure must not lose the others
        return dict(status=STATUS_MISSING,
                    reason=one_line(f"could not collect {directory}: {err}"))
    expected = sum(n for _, n in files)
    if size != expected:
        return dict(status=STATUS_INCOMPLETE, bytes=size,
                    reason=f"{size} of {expected} bytes arrived")
    if remote:
        on_node(discard, entry.node_id, directory, [r for r, _ in files])
    return dict(status=STATUS_OK, reason=None, bytes=size,
                transfer="ray" if remote else "rename")


def _size(path: str) -> int:
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
    return os.path.getsize(path) if os.path.exists(path) else 0


def run_manifest(plan: ProfilePlan, entries: List[ReportEntry],
                 identities: Dict[Target, ProcessIdentity], controller: Optional[ProcessInfo],
                 warnings: List[str], run_id: str,
                 clock: Callable[[Target], Dict[str, int]] = lambda target: {}) -> Manifest:
    """The manifest of a run: its plan's steps and groups, every report entry, the processes
    the controller reached (with their clock offset and its error bound, from ``clock``) and
    what it warned about (each line once)."""
    processes = tuple(ProcessInfo(group=g, rank=r, host=i.host, pid=i.pid, node_id=i.node_id,
                                  under_profiler=i.under_profiler, **clock((g, r)))
                      for (g, r), i in identities.items())
    return Manifest(
        tool=plan.tool, output_dir=plan.output_dir, step_windows=plan.step_windows,
        reports=tuple(entries), controller=controller, processes=processes,
        groups={g.name: g.world_size for g in plan.groups}, source=plan.source,
        warnings=tuple(dict.fromkeys(warnings)), verl_release=plan.verl_release,
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        verlprof_version=__version__, run_id=run_id,
        served={g.name: ServedGroup(engine=g.engine, gpus_per_replica=g.replica_span,
                                    servers_per_replica=g.servers_per_replica)
                for g in plan.groups if g.served})
