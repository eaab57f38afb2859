"""Placement while the job runs: a closed window's reports leave their node at once.

The controller tells this module when a step window opens and closes (a queue put each: the
step pays nothing more). One daemon thread of the controller's process, at the lowest CPU
priority, does the rest off the step's critical path:

* it asks each rank of a closed window which of its reports are complete on disk now
  (``verlprof_ready``: torch's at close; nsys 2022.4 writes a ``repeat:N`` session's reports
  only when its N-th window closes, so an nsys rank answers once its last window closed);
* it places each at its contract path under output_dir: a hard link where the report is on
  this node (no bytes copied; the ``.raw`` name goes at finalize), else the bytes over Ray,
  read by a task pinned to the report's node (the rank's actor thread never carries them);
* it rewrites ``manifest.json`` (``running: true``, atomically) with those reports ``ok`` and
  every other planned one pending, and the journal ``.raw/placement.json`` that
  ``verlprof collect`` reads when the controller dies before finalize
  (``verlprof.runtime.leftovers``).

Why a thread in the controller rather than one in each worker or a Ray task: the controller
is the one writer of the manifest, it already knows which windows closed, and a worker's own
thread would compete with training for that process's GIL; the node-pinned read task (the
same one finalize uses) moves the bytes on a node other than the controller's.

At :meth:`Placement.merge` (finalize) every report placed early keeps its entry exactly as
finalize would have written it (same status, bytes, transfer, window times), at the same
place in the manifest, and its raw file is removed; the rest move as before.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import queue
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from verlprof import paths
from verlprof.manifest import ReportEntry
from verlprof.plan_model import ProcessPlan
from verlprof.records import (
    STATUS_MISSING,
    StepWindow,
    Target,
    WorkerReport,
)
from verlprof.runtime.collect import move_all
from verlprof.runtime.journal import (
    ControllerJournal,
    ProcessJournal,
    RunJournal,
    SentWindow,
    remove_journal,
    write_journal,
)
from verlprof.runtime.placing import (
    ask_in_process,
    lost_nodes,
    lowest_priority,
    place_early,
)
from verlprof.runtime.rank_rpc import RankCalls
from verlprof.runtime.run_context import RunContext
from verlprof.runtime.teardown import discard, on_node
from verlprof.worker.identity import node_id
from verlprof.worker.ray_guard import RayGone, ray_connected

logger = logging.getLogger("verlprof")

PENDING = ("pending: the window closed; its report is still on its node (placed while the "
           "job runs, at finalize, or by verlprof collect)")
"""Reason of a closed window's report not placed yet (a manifest written while running)."""
OPEN_NOW = "open: being captured"
NOT_YET = "not captured yet: the job is running"
POLL_S = 1.0
"""First pause between asking the ranks that still hold reports of closed windows (doubles
up to :data:`MAX_POLL_S` while nothing new is ready)."""
MAX_POLL_S = 30.0
ASK_WAIT_S = 2.0
"""How long one look waits for the ranks' answers; a busy rank's answer is taken later."""
WRITE_GAP_S = 0.5
"""Least time between two writes of the running manifest (events coalesce meanwhile)."""
WRITE_SHARE = 0.05
"""Most of the thread's time spent writing the manifest and the journal."""


Key = Tuple[Target, str]
"""(group, rank) and the planned report path (the template, before host and pid)."""


class Placement:
    """The controller's background placer (see the module docstring)."""

    def __init__(self, run: RunContext, *, targets: Callable[[], List[Target]],
                 gathered: Callable[[], List[ReportEntry]], poll_s: float = POLL_S,
                 max_poll_s: float = MAX_POLL_S):
        """Idle from the start when the plan says ``place: at_end``: no thread, no event
        kept, and :meth:`merge` moves every report as finalize did before this module."""
        self.context = run
        self._targets = targets
        """The controller's processes now: registered, then added on demand."""
        self._gathered = gathered
        """The on-demand reports gathered so far (their entries stay in the manifest)."""
        self.poll_s, self.max_poll_s = poll_s, max_poll_s
        self.placed: Dict[Key, Tuple[ReportEntry, str]] = {}
        """Reports placed early: their entry and the raw path they came from."""
        self.problems: List[str] = []
        self._sent: Dict[Target, List[SentWindow]] = {}
        self._controller_sent: List[SentWindow] = []
        """The controller's own windows, when it runs under nsys (it opens one with each)."""
        self._waiting: Set[Target] = set()
        self._events: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: Optional[threading.Thread] = None
        self._write_lock = threading.Lock()
        self._finished = run.plan.policy.place == "at_end"
        self._local = node_id()
        self._pending: Dict[Tuple[Target, str, str], ReportEntry] = {}
        self._plans_of: Optional[Any] = None
        self._asked: Dict[Any, Target] = {}
        """Ray refs of ``verlprof_ready`` calls not answered yet (their rank is busy)."""
        self._by_target: Dict[Target, ProcessPlan] = {}

    # -- the controller's side: one queue put per event ---------------------------------------
    def opened(self, window: StepWindow, targets: List[Target]) -> None:
        self._put(("open", window, list(targets), set()))

    def closed(self, started: Dict[Target, StepWindow], unclosed: Set[Target]) -> None:
        if started:
            self._put(("close", None, dict(started), set(unclosed)))

    def finish(self, timeout_s: float = 60.0) -> None:
        """Stop the thread after what it is doing (bounded); nothing is placed after this."""
        self._finished = True
        thread = self._thread
        if thread is not None:
            self._events.put(None)
            thread.join(timeout_s)

    def merge(self, items: List[WorkerReport], actors: Dict[Target, Any],
              local_node: str, wait_s: float = 60.0) -> List[ReportEntry]:
        """finalize's entries for ``items``, in their order, once the thread has stopped: a
        report placed early keeps its entry and its raw file goes; the others move as before
        (:func:`~verlprof.runtime.collect.move_all`). A missing report of a process whose Ray
        node is gone says ``node <id> lost``. The journal goes: finalize writes the manifest.
        ``wait_s``: how long the thread may take to stop (0 when a signal cut finalize short:
        it may be waiting on a rank that never answers)."""
        self.finish(wait_s)
        out: List[Optional[ReportEntry]] = [None] * len(items)
        rest: List[int] = []
        for index, item in enumerate(items):
            early = self.placed.get(((item.report.group, item.report.rank), item.report.path))
            if early is None:
                rest.append(index)
                continue
            out[index] = early[0]
            self._drop_raw(early[0], item.raw_path or early[1])
        moved = move_all([items[i] for i in rest], actors, self.context.plan.output_dir,
                         local_node)
        lost = lost_nodes({e.node_id for e in moved if e.status == STATUS_MISSING and e.node_id})
        for index, entry in zip(rest, moved):
            if entry.node_id in lost and entry.status == STATUS_MISSING:
                entry = dataclasses.replace(entry, reason=f"node {entry.node_id} lost "
                                                          f"({entry.reason})")
            out[index] = entry
        remove_journal(self.context.plan.output_dir)
        return [e for e in out if e is not None]

    # -- the thread ------------------------------------------------------------------------
    def _put(self, event: Tuple[str, Optional[StepWindow], Any, Set[Target]]) -> None:
        if self._finished:
            return
        self._events.put(event)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="verlprof-placement",
                                            daemon=True)
            self._thread.start()

    def _run(self) -> None:
        """Events first; a look at the waiting ranks when due (at once after a window
        closed, then backing off); a write when due: at least :data:`WRITE_GAP_S` after the
        last one and :data:`WRITE_SHARE` of the time at most (a manifest of 25,000 entries
        takes seconds: at 8,192 ranks it is written every minute or so, not per window)."""
        lowest_priority()
        delay, next_look, next_write, dirty = self.poll_s, 0.0, 0.0, False
        while True:
            now = time.monotonic()
            due = [t for t, on in ((next_look, bool(self._waiting)), (next_write, dirty)) if on]
            try:
                event = self._events.get(timeout=max(0.0, min(due) - now) if due else None)
            except queue.Empty:
                event = ()
            if event is None or self._finished:
                return
            try:
                if event:
                    self._record(event)
                    delay, next_look, dirty = self.poll_s, 0.0, True
                    continue  # take every queued event before looking
                now = time.monotonic()
                if dirty and now >= next_write:  # first: a window's close is on disk at once
                    self._write()
                    took = time.monotonic() - now
                    next_write, dirty = now + max(WRITE_GAP_S, took / WRITE_SHARE), False
                if self._waiting and time.monotonic() >= next_look:
                    placed = self._look()
                    dirty = dirty or placed > 0
                    delay = self.poll_s if placed else min(delay * 2, self.max_poll_s)
                    next_look = time.monotonic() + delay
            except RayGone:  # the driver shut Ray down without finalize: nothing to ask
                return
            except Exception as err:  # the job goes on; finalize places what is left
                self._problem(f"placing reports while the job runs: {err}")

    def _record(self, event: Tuple[str, Optional[StepWindow], Any, Set[Target]]) -> None:
        kind, window, targets, unclosed = event
        if kind == "open":
            assert window is not None
            for target in targets:
                self._sent.setdefault(target, []).append(SentWindow(steps=window, closed=False))
            if self.context.under_profiler:
                self._controller_sent.append(SentWindow(steps=window, closed=False))
            return
        self._controller_sent = [SentWindow(steps=s.steps, closed=True)
                                 if s.steps in targets.values() else s
                                 for s in self._controller_sent]
        for target, steps in targets.items():
            sent = self._sent.setdefault(target, [])
            closed = target not in unclosed
            for i in range(len(sent) - 1, -1, -1):
                if sent[i].steps == steps:
                    sent[i] = SentWindow(steps=steps, closed=closed)
                    break
            else:
                sent.append(SentWindow(steps=steps, closed=closed))
            if closed:
                self._waiting.add(target)

    def _look(self) -> int:
        """Ask the waiting ranks for their complete reports and place them; how many. All of
        it with Ray held connected: placing fetches from other nodes and names this one."""
        if isinstance(self.context.rpc, RankCalls):
            with ray_connected():
                return self._look_now()
        return self._look_now()

    def _look_now(self) -> int:
        failed = self.context.rpc.failed
        self._waiting -= set(failed)
        replies = self._ask(sorted(self._waiting))
        count, placed = 0, []
        for target, reports in replies.items():
            for item in reports:
                key = (target, item.report.path)
                try:
                    entry = place_early(item, self.context.plan.output_dir, self._local)
                except Exception as err:  # finalize tries again with the raw file
                    self._problem(f"{target[0]} rank {target[1]}: {item.report.path} not "
                                  f"placed while running: {err}")
                    continue
                if entry is not None:
                    self.placed[key] = (entry, item.raw_path or "")
                    placed.append(entry)
                    count += 1
            if self._all_placed(target):
                self._waiting.discard(target)
        if placed:  # per_window summaries start on the reports' nodes
            self.context.reports_placed(placed)
        return count

    def _all_placed(self, target: Target) -> bool:
        """Whole-step windows: one report per closed window, all placed (a discrete process
        opens a window per phase call: asked until finalize)."""
        process = self._plans().get(target)
        if process is None or process.mode != "whole":
            return False
        closed = {s.steps for s in self._sent.get(target, []) if s.closed}
        return all((target, w.report.path) in self.placed for w in process.windows
                   if w.steps in closed)

    def _plans(self) -> Dict[Target, ProcessPlan]:
        """The plan's processes by target (``plan.process`` scans them: at 8,192 ranks, once
        per rank, seconds), again whenever the controller follows a new plan."""
        plan = self.context.plan
        if self._plans_of is not plan:
            self._by_target = {(p.group, p.rank): p for p in plan.processes}
            self._plans_of = plan
        return self._by_target

    def _ask(self, targets: List[Target]) -> Dict[Target, List[WorkerReport]]:
        """``verlprof_ready`` on each target. Over Ray not through the controller's calls: a
        rank busy in a long phase must not be marked busy for the controller's own RPCs.
        Over Ray only inside :meth:`_look`'s hold on it (a driver's shutdown waits)."""
        rpc = self.context.rpc
        if not targets:
            return {}
        if not isinstance(rpc, RankCalls):
            return ask_in_process(rpc, targets)
        import ray

        asked = set(self._asked.values())  # a rank busy in a long phase answers later
        for target in targets:
            if target not in asked and target in rpc.actors:
                with contextlib.suppress(Exception):
                    self._asked[rpc.actors[target].verlprof_ready.remote()] = target
        done, _ = ray.wait(list(self._asked), num_returns=len(self._asked), timeout=ASK_WAIT_S)
        out: Dict[Target, List[WorkerReport]] = {}
        for ref in done:
            target = self._asked.pop(ref)
            with contextlib.suppress(Exception):  # a dead rank: the controller sees it itself
                out[target] = ray.get(ref)
        return out

    def _write(self) -> None:
        """The running manifest and the journal, atomically each."""
        run = self.context
        plan = run.plan
        with self._write_lock:
            if self._finished:
                return
            plans = self._plans()
            entries = self.running_entries(plans) + list(self._gathered())
            journal = RunJournal(run_id=run.run.run_id, tool=plan.tool,
                                 output_dir=plan.output_dir, processes=tuple(
                                     ProcessJournal(group=t[0], rank=t[1],
                                                    identity=run.identity[t],
                                                    sent=tuple(self._sent.get(t, ())),
                                                    open_ended=p.open_ended)
                                     for t in self._targets()
                                     if (p := plans.get(t)) is not None
                                     and t in run.identity),
                                 controller=ControllerJournal(
                                     planned=plan.controller.windows,
                                     sent=tuple(self._controller_sent))
                                 if run.under_profiler else None)
            if not run.run.writes_manifest:
                return
            write_journal(journal, plan.output_dir)
            run.write(run.manifest(entries, running=True))

    def running_entries(self, plans: Dict[Target, ProcessPlan]) -> List[ReportEntry]:
        """Every planned report of the registered processes: placed ones ``ok``, the rest
        ``missing`` for now, saying why: pending (closed window), open, or not captured yet
        (``verlprof report`` reads only what is placed)."""
        out: List[ReportEntry] = []
        for target in self._targets():
            process = plans.get(target)
            who = self.context.identity.get(target)
            if process is None or who is None:
                continue
            sent = {s.steps: s.closed for s in self._sent.get(target, [])}
            for window in process.windows:
                early = self.placed.get((target, window.report.path))
                if early is not None:
                    out.append(early[0])
                    continue
                reason = NOT_YET if window.steps not in sent else \
                    PENDING if sent[window.steps] else OPEN_NOW
                key = (target, window.report.path, reason)
                entry = self._pending.get(key)
                if entry is None:  # built once per state: thousands of ranks, every write
                    path = paths.resolve_relpath(window.report.path, who.host, who.pid) \
                        if who.host and who.pid else window.report.path
                    entry = self._pending[key] = ReportEntry.of(
                        dataclasses.replace(window.report, path=path), status=STATUS_MISSING,
                        reason=reason, host=who.host, pid=who.pid, node_id=who.node_id)
                out.append(entry)
        return out

    def _drop_raw(self, entry: ReportEntry, raw: str) -> None:
        """The raw file of a report placed early, now that finalize has its entry."""
        if not raw:
            return
        if entry.transfer != "ray":  # on this node's disk: its own, or one every node mounts
            target = os.path.join(self.context.plan.output_dir, entry.path)
            with contextlib.suppress(OSError):
                if os.path.abspath(raw) != os.path.abspath(target):
                    os.remove(raw)
            return
        with contextlib.suppress(Exception):  # a lost node keeps it; nothing else to do
            on_node(discard, entry.node_id, os.path.dirname(raw), [os.path.basename(raw)],
                    timeout_s=30.0)

    def _problem(self, line: str) -> None:
        if line not in self.problems:
            self.problems.append(line)
            logger.warning("verlprof: %s", line)
