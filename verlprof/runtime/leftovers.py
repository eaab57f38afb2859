"""A run that ended without finalize (its controller killed, its node lost): say so, and place
what it left.

``verlprof status <dir>`` tells a finalized run from one still running and from one whose
controller is gone: the manifest says ``running: true`` and the run lock's holder
(``verlprof.runtime.run_lock``) no longer runs. ``verlprof collect <dir>`` then places the
leftovers with the journal the controller kept (``verlprof.runtime.journal``): each report a
dead process's tool finished, ``ok`` for a window that closed and ``incomplete`` for the one
cut short, the way finalize places a dead rank's reports (``collect.unreachable_reports``);
every other report stays ``missing`` with the reason. It reads the files where this machine
sees them (the controller's node, or a shared file system): a report in ``.raw`` on another
node without a shared file system is named with its node. It then ends what the dead run's
profilers left running on this machine: it waits (bounded) for each nsys CLI the journal names
on this host to exit, and ends the run's own orphaned ``nsys --start-agent`` processes (marked
with its output directory, :func:`verlprof.runtime.teardown.settle_profilers`), which nobody
else would: finalize, which ends them after a clean run, never ran. With ``--address`` (the
job's Ray cluster) it does all of that on every other node too (:mod:`.elsewhere`).
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import socket
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from verlprof import paths
from verlprof.backends.nsys.controller_capture import left_by_dead_controller
from verlprof.backends.nsys.procs import owned_orphan_agents
from verlprof.errors import ProfilingRuntimeError
from verlprof.manifest import Manifest, ReportEntry, read_manifest, write_manifest
from verlprof.plan_model import ProcessPlan, Window
from verlprof.records import STATUS_MISSING, STATUS_OK, StepWindow, WorkerReport
from verlprof.runtime.collect import move_all, unreachable_reports
from verlprof.runtime.elsewhere import Cluster, LeftThere, ask_nodes, connect
from verlprof.runtime.journal import ProcessJournal, RunJournal, read_journal, remove_journal
from verlprof.runtime.run_lock import read_lock, release, stale_reason
from verlprof.runtime.teardown import Settled, settle_profilers
from verlprof.safe_text import visible
from verlprof.storage import release_reserve

ENDED = "the run ended without finalize"
"""How the manifest's warnings and ``verlprof status`` begin for such a run."""
ELSEWHERE = "a node other than this one (no shared file system)"


def run_state(output_dir: str) -> Tuple[str, Manifest]:
    """One line saying where the run of ``output_dir`` stands, and its manifest (ValueError:
    no manifest)."""
    manifest = read_manifest(output_dir)
    return state_of(output_dir, manifest), manifest


def state_of(output_dir: str, manifest: Manifest) -> str:
    """:func:`run_state`'s line for ``output_dir``'s manifest, already read."""
    if not manifest.running:
        ended = next((w for w in manifest.warnings if w.startswith(ENDED)), None)
        return ended or "finished: finalized, every report placed"
    why = controller_gone(output_dir, manifest)
    if why is None:
        holder = read_lock(output_dir)
        who = f" (run owner pid {holder.pid} on {holder.host})" if holder else ""
        return f"running{who}"
    journal = read_journal(output_dir)
    agents = len(owned_orphan_agents(_owner(journal, manifest)))
    also = f" and end its {agents} nsys agent(s) still running here" if agents else ""
    host = socket.gethostname()
    hosts = sorted({p.identity.host for p in journal.processes} - {host}) if journal else []
    address = " --address <the job's Ray address>" if hosts else ""
    return (f"{ENDED}: {why}; run `verlprof collect {output_dir}{address}` to place what it "
            f"left{also}")


def controller_gone(output_dir: str, manifest: Manifest) -> Optional[str]:
    """Why the run of a running manifest is certainly gone; None while it may run. Its owner
    is the holder of the run lock, the process that claimed the output directory: the driver
    of ``verlprof demo`` and of the verl launcher (which runs the controller in a TaskRunner),
    else the controller itself."""
    holder = read_lock(output_dir)
    if holder is None or holder.run_id != manifest.run_id:
        return "its run lock is gone"
    why = stale_reason(holder)
    return None if why is None else f"run owner {why}"


@dataclass(frozen=True)
class Collected:
    """What ``verlprof collect`` did to one output directory."""

    manifest: Manifest
    """The manifest as rewritten (as it was, for a finalized run)."""
    problems: Tuple[str, ...] = ()
    """One line per report not ``ok``."""
    settled: Settled = Settled()
    """The run's nsys agents ended on this machine, and profilers that would not exit."""


def collect_leftovers(output_dir: str, timeout_s: float = 30.0,
                      address: Optional[str] = None) -> Collected:
    """Place what a run that ended without finalize left, then end what its profilers left
    running here (ProfilingRuntimeError while the run still goes). With ``address`` (the
    job's Ray cluster, still up), what its processes left on other nodes too."""
    manifest = read_manifest(output_dir)
    if not manifest.running:
        return Collected(manifest=manifest)
    why = controller_gone(output_dir, manifest)
    if why is None:
        raise ProfilingRuntimeError(f"{output_dir}: the run is still going; its controller "
                                    "places its reports (verlprof status says who)")
    cluster = connect(address) if address else None
    journal = read_journal(output_dir)
    owner = _owner(journal, manifest)
    entries = list(manifest.reports)
    index = {_key(e): i for i, e in enumerate(entries)}
    reason = f"{ENDED} ({why})"
    dead = [(jp, process, [(s.steps, s.closed) for s in jp.sent])
            for jp in (journal.processes if journal else ())
            if (process := _process(output_dir, jp, [e for e in entries if not e.requested_by
                                                      and (e.group, e.rank) == (jp.group,
                                                                                jp.rank)]))]
    answers = ask_nodes({(jp.group, jp.rank): (process, jp.identity, history)
                         for jp, process, history in dead if cluster.holds(jp.identity)},
                        reason, timeout_s, owner) if cluster else {}
    settled = sum((there.settled for there in answers.values()), Settled())
    for jp, process, history in dead:
        for entry in _place_process(output_dir, jp, process, history, reason, timeout_s,
                                    entries, index, cluster, answers.get((jp.group, jp.rank))):
            where = index.get(_key(entry))
            if where is None:
                index[_key(entry)] = len(entries)
                entries.append(entry)
            else:
                entries[where] = entry
    for entry in _controller_entries(output_dir, manifest, journal, reason, timeout_s):
        at = index.get(_key(entry))
        if at is None:
            entries.append(entry)
        elif entries[at].status != STATUS_OK:
            entries[at] = entry
    placed = sum(e.status != STATUS_MISSING for e in entries) - \
        sum(e.status != STATUS_MISSING for e in manifest.reports)
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    note = (f"{reason}; verlprof collect placed {placed} more report(s) at {now}" if journal
            else f"{reason}; no {paths.RAW_DIR}/placement.json: nothing more could be placed")
    manifest = dataclasses.replace(manifest, reports=tuple(entries), running=False,
                                   warnings=tuple(dict.fromkeys(manifest.warnings + (note,))))
    write_manifest(manifest, output_dir)
    remove_journal(output_dir)
    _release_dead_claim(output_dir, manifest.run_id)
    return Collected(manifest=manifest,
                     problems=tuple(f"{e.path}: {e.status}: {e.reason}" for e in entries
                                    if e.status != STATUS_OK),
                     settled=_settle_here(journal, owner, timeout_s, cluster) + settled)


def _settle_here(journal: Optional[RunJournal], owner: str, timeout_s: float,
                 cluster: Optional[Cluster]) -> Settled:
    """The dead run's profilers on this machine given ``timeout_s`` to exit; then its
    orphaned agents here ended (their mark is the output directory the run was planned with).
    A process on another node the cluster still has was settled there."""
    host = socket.gethostname()
    pids = [p.identity.profiler_pid for p in journal.processes
            if p.identity.host == host and p.identity.profiler_pid
            and not (cluster and cluster.holds(p.identity))] if journal else []
    return settle_profilers(pids, timeout_s, owner)


def _release_dead_claim(output_dir: str, run_id: Optional[str]) -> None:
    """What finalize would have removed: the dead run's lock and the room it held for its
    manifest (``.verlprof-reserve``); another run's lock and room are left alone."""
    if (run_id and release(output_dir, run_id)) or read_lock(output_dir) is None:
        release_reserve(output_dir)


def _controller_entries(output_dir: str, manifest: Manifest, journal: Optional[RunJournal],
                        reason: str, timeout_s: float) -> List[ReportEntry]:
    """The reports of the controller's own nsys capture: nsys wrote them when the controller
    process ended, and no running manifest lists them (finalize would have)."""
    own = journal.controller if journal else None
    who = manifest.controller
    if own is None or who is None:
        return []
    return left_by_dead_controller(output_dir, who.host, who.pid, who.node_id, own.planned,
                                   [(s.steps, s.closed) for s in own.sent], reason, timeout_s)


def _owner(journal: Optional[RunJournal], manifest: Manifest) -> str:
    """The mark the run's nsys processes carry: the output directory it was planned with."""
    return journal.output_dir if journal else manifest.output_dir


def _place_process(output_dir: str, journal: ProcessJournal, process: ProcessPlan,
                   history: List[Tuple[StepWindow, bool]], reason: str, timeout_s: float,
                   entries: List[ReportEntry], index: Dict[tuple, int],
                   cluster: Optional[Cluster], answer: Optional[LeftThere]) -> List[ReportEntry]:
    """The entries of one process's reports not placed yet (ok ones untouched; their raw
    hard link, left for finalize, goes): from its node's ``answer`` (another node of
    ``cluster``, read over Ray a few at a time), else from what this machine sees."""
    where = journal.identity
    if answer is not None:
        items, visible, here = list(answer.reports), True, cluster.local_node if cluster else ""
    else:
        visible = os.path.isdir(process.raw_dir)  # this node's, or one file system on all
        items = unreachable_reports(process, where, reason, history, process.backend,
                                    where.node_id if visible else ELSEWHERE, timeout_s)
        here = where.node_id
    sent = {s.steps for s in journal.sent}
    todo = []
    for item in items:
        at = index.get(_key(item))
        if at is not None and entries[at].status == STATUS_OK:
            _drop_link(item.raw_path, os.path.join(output_dir, entries[at].path))
            continue
        if item.status == STATUS_MISSING:
            item = dataclasses.replace(item, reason=_why_missing(item, sent, visible, reason,
                                                                 cluster))
        todo.append(item)
    return move_all(todo, {}, output_dir, here)


def _process(output_dir: str, journal: ProcessJournal,
             planned: List[ReportEntry]) -> Optional[ProcessPlan]:
    """The process's plan as far as placing its files needs it: its windows (from its
    manifest entries, in order), tool, raw directory and whether nsys numbers its reports."""
    if not planned:
        return None
    return ProcessPlan(
        group=journal.group, rank=journal.rank, roles=(), selected_roles=(),
        mode="discrete" if any(e.phase for e in planned) else "whole",
        backend=planned[0].backend,
        windows=tuple(Window(steps=e.steps, report=e.identity, role=e.role, phase=e.phase)
                      for e in planned),
        open_ended=journal.open_ended,
        raw_dir=paths.raw_dir(output_dir, journal.group, journal.rank))


def _why_missing(item: WorkerReport, sent: set, visible: bool, reason: str,
                 cluster: Optional[Cluster]) -> str:
    steps = item.report.steps
    if steps not in sent:
        return f"window never opened: {reason} before step {steps[0]}"
    if not visible:
        node = item.where.node_id or "?"
        if cluster is None:
            return (f"{reason}; its report stays on node {node} (host {item.where.host}) in "
                    f"{paths.RAW_DIR}: run verlprof collect --address <the job's Ray "
                    "address>, or where that directory is visible")
        state = "did not answer" if node in cluster.alive else "is no longer in the cluster"
        return (f"{reason}; node {node} (host {item.where.host}) {state}: its report stays "
                f"in {paths.RAW_DIR} on its disk, if that is kept")
    return item.reason or reason


def _drop_link(raw: Optional[str], placed: str) -> None:
    """A raw file that is the placed report itself (the hard link made while running)."""
    try:
        if raw and os.path.samefile(raw, placed):
            os.remove(raw)
    except OSError:
        pass


def _key(entry) -> tuple:
    report = getattr(entry, "report", entry)
    return (report.group, report.rank, tuple(report.steps), report.role, report.phase)


def run_collect(output_dir: str, timeout_s: float, address: Optional[str] = None) -> int:
    """``verlprof collect``: 0 when every report is ok, 1 when some are not (each named).
    ``address``: the job's Ray cluster, for what its processes left on other nodes."""
    try:
        collected = collect_leftovers(output_dir, timeout_s, address)
    except ValueError as err:
        raise ProfilingRuntimeError(str(err)) from None
    manifest = collected.manifest
    ended = next((w for w in manifest.warnings if w.startswith(ENDED)), None)
    print(f"verlprof: {visible(ended or 'finalized: nothing to place')}")
    ok = len(manifest.by_status(STATUS_OK))
    print(f"verlprof: {ok} of {len(manifest.reports)} report(s) ok in "
          f"{visible(os.path.join(output_dir, paths.MANIFEST_NAME))}")
    for line in collected.problems:
        print(f"  {visible(line)}")
    for line in (collected.settled.agents_line(), *collected.settled.problems):
        if line:
            print(f"verlprof: {line}")
    return 0 if not collected.problems else 1
