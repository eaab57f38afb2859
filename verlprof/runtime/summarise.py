"""Reports read where they are: each report's summary made by a Ray task on the node that holds
it, so that only the summary travels (``trainer.profiler.summarise``).

The per-report part of ``verlprof report`` (export, phase ranges, GPU sums: what
:func:`verlprof.backends.summary.make_summary` keeps) runs as a task pinned to the report's node
(``NodeAffinitySchedulingStrategy``, not soft), reserving no CPU (the job's actors hold them
until it ends) and at most :data:`PER_NODE` at once per node, so that a node's CPUs stay the
job's. The task writes the summary beside the report and
sends back only a :class:`SummaryResult`. The node that holds a report is the one its process
ran on (``ReportEntry.node_id``) when that node sees it at its place in ``output_dir`` (a
shared file system, or a report written there directly); where it does not (the report was
carried to the controller's node), the controller's node makes it. Every node works at once.

``at_end``: :meth:`NodeSummaries.finish`, in finalize, once the manifest is written (it is
written again with each entry's ``summary``). ``per_window``: also :meth:`NodeSummaries.window`
as a window's reports reach ``output_dir`` while the job runs, in the background; ``finish``
then finds those summaries current and only lists them. A summary that is not made (a node
lost, the time up, a report unreadable) is no loss: ``verlprof report`` reads that report.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Dict, List, Literal, Optional, Sequence, Tuple

from verlprof import paths
from verlprof.backends import get_backend
from verlprof.backends.summary import load_summary, make_summary, summary_path, write_summary
from verlprof.manifest import STATUS_INCOMPLETE, STATUS_OK, Manifest, ReportEntry
from verlprof.runtime.run_context import RunContext
from verlprof.worker.identity import node_id as this_node_id
from verlprof.worker.ray_guard import RayGone, ray_connected

logger = logging.getLogger("verlprof")

PER_NODE = 2
"""Summary tasks running at once on one node (each runs one ``nsys export``: about a core)."""
WAIT_SLICE_S = 1.0
"""Longest single wait on the tasks: it holds off a driver's ``ray.shutdown()`` (ray_guard)."""
Outcome = Literal["made", "current", "not_here", "unreadable"]
"""``made`` now, ``current`` (a summary that matches was there), ``not_here`` (this node does
not see the report), ``unreadable`` (the reason says why)."""


@dataclass(frozen=True)
class SummaryJob:
    """One report to summarise (sent to a task)."""

    index: int
    """Its entry's index in ``manifest.reports``."""
    output_dir: str
    path: str
    """The report, relative to ``output_dir``."""
    backend: str
    window_start_ns: Optional[int]
    bytes: int
    """Its size as collected (0: unknown): a file of another size is not this report."""
    timeout_s: float


@dataclass(frozen=True)
class SummaryResult:
    """What a task sends back: a few hundred bytes, whatever the report's size."""

    index: int
    outcome: Outcome
    node_id: str
    """The node the task ran on."""
    summary: Optional[str] = None
    """The summary, relative to ``output_dir`` (``made`` and ``current``)."""
    reason: Optional[str] = None


def summarise_here(job: SummaryJob) -> SummaryResult:
    """Summarise one report on this node (the task's body). Never raises."""
    node = this_node_id()
    try:
        full = paths.inside(job.output_dir, job.path)
        if not os.path.isfile(full) or (job.bytes and os.path.getsize(full) != job.bytes):
            return SummaryResult(index=job.index, outcome="not_here", node_id=node)
        relpath = summary_path(job.path)
        if load_summary(full, job.backend, job.window_start_ns) is not None:
            return SummaryResult(index=job.index, outcome="current", node_id=node,
                                 summary=relpath)
        data, made = make_summary(full, job.backend, index=job.index,
                                  window_start_ns=job.window_start_ns, timeout_s=job.timeout_s,
                                  node_id=node)
        if made is None:
            return SummaryResult(index=job.index, outcome="unreadable", node_id=node,
                                 reason=data.error)
        if write_summary(made, full) is None:
            return SummaryResult(index=job.index, outcome="unreadable", node_id=node,
                                 reason=f"cannot write {relpath}")
        return SummaryResult(index=job.index, outcome="made", node_id=node, summary=relpath)
    except Exception as err:  # noqa: BLE001 - one report's failure is that report's alone
        return SummaryResult(index=job.index, outcome="unreadable", node_id=node,
                             reason=f"{type(err).__name__}: {err}")


def summary_jobs(manifest: Manifest, output_dir: str, timeout_s: float,
                 indices: Optional[Sequence[int]] = None) -> List[SummaryJob]:
    """The manifest's readable reports (``ok`` or ``incomplete``, a backend with a reader)."""
    chosen = range(len(manifest.reports)) if indices is None else indices
    out = []
    for i in chosen:
        entry = manifest.reports[i]
        if entry.status in (STATUS_OK, STATUS_INCOMPLETE) and get_backend(entry.backend).has_reader:
            out.append(SummaryJob(index=i, output_dir=output_dir, path=entry.path,
                                  backend=entry.backend, window_start_ns=entry.window_start_ns,
                                  bytes=entry.bytes, timeout_s=timeout_s))
    return out


def summarise_on_nodes(manifest: Manifest, output_dir: str, *, timeout_s: float,
                       local_node: Optional[str] = None, per_node: int = PER_NODE,
                       indices: Optional[Sequence[int]] = None
                       ) -> Tuple[Manifest, List[SummaryResult], List[str]]:
    """Summarise the manifest's reports (``indices``: only those entries) on the nodes that hold
    them, all nodes at once, ``per_node`` tasks at a time on each, for up to ``timeout_s``.
    Returns the manifest with each summarised entry's ``summary`` set, every task's result, and
    the problems, one line each. Needs Ray (this process connected)."""
    import ray

    local = local_node or this_node_id()
    with ray_connected():
        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
    queues: Dict[str, List[SummaryJob]] = {}
    jobs = summary_jobs(manifest, output_dir, timeout_s, indices)
    for job in jobs:
        node = manifest.reports[job.index].node_id
        queues.setdefault(node if node in alive else local, []).append(job)
    results = _run(queues, local, per_node, timeout_s)
    entries = list(manifest.reports)
    problems = []
    for result in results.values():
        if result.summary is not None:
            entries[result.index] = dataclasses.replace(entries[result.index],
                                                        summary=result.summary)
        elif result.outcome == "unreadable":
            problems.append(f"summary of {entries[result.index].path}: {result.reason}")
        else:
            problems.append(f"summary of {entries[result.index].path}: neither its node nor "
                            f"this one sees it at {entries[result.index].bytes} bytes")
    left = len(jobs) - len(results)
    if left:
        problems.append(f"{left} report(s) not summarised within {timeout_s:g}s on their "
                        "nodes: verlprof report reads them")
    return dataclasses.replace(manifest, reports=tuple(entries)), \
        [results[i] for i in sorted(results)], problems


def _in_background(manifest: Manifest, output_dir: str, timeout_s: float) -> None:
    """A window's summaries while the job runs; the driver may shut Ray down under them (its
    files are on disk: finalize or ``verlprof report`` summarises what is left)."""
    try:
        summarise_on_nodes(manifest, output_dir, timeout_s=timeout_s)
    except RayGone:
        pass
    except Exception as err:  # noqa: BLE001 - a summary is an extra: the job goes on
        logger.warning("verlprof: reports not summarised while the job runs: %s", err)


def _run(queues: Dict[str, List[SummaryJob]], local: str, per_node: int,
         timeout_s: float) -> Dict[int, SummaryResult]:
    """Every queue on its node, ``per_node`` in flight each; a report its node does not see
    goes to ``local``'s queue. Unfinished at the deadline: cancelled, left out."""
    import ray

    deadline = time.monotonic() + timeout_s
    flying: Dict[object, Tuple[str, SummaryJob]] = {}
    done: Dict[int, SummaryResult] = {}
    retried = set()

    def fill() -> None:
        for node, queue in queues.items():
            while queue and sum(1 for n, _ in flying.values() if n == node) < per_node:
                job = queue.pop(0)
                flying[_task(node).remote(job)] = (node, job)

    with ray_connected():
        fill()
    while flying and time.monotonic() < deadline:
        with ray_connected():  # in slices: a driver's ray.shutdown() waits for one at most
            ready, _ = ray.wait(list(flying), num_returns=1,
                                timeout=min(WAIT_SLICE_S, max(0.0, deadline - time.monotonic())))
            for ref in ready:
                node, job = flying.pop(ref)
                try:
                    result: SummaryResult = ray.get(ref)
                except Exception as err:  # noqa: BLE001 - the node died under its task
                    result = SummaryResult(index=job.index, outcome="unreadable", node_id=node,
                                           reason=f"its node's task failed: "
                                                  f"{type(err).__name__}")
                if result.outcome == "not_here" and node != local and job.index not in retried:
                    retried.add(job.index)
                    queues.setdefault(local, []).append(job)
                else:
                    done[job.index] = result
            fill()
    with ray_connected():
        for ref in flying:
            ray.cancel(ref, force=True)
    return done


def _task(node: str):
    """:func:`summarise_here` as a task pinned to ``node``, run by this interpreter (a task
    inherits its creator's runtime_env; the controller may run under nsys). It reserves no
    CPU, as verlprof's other node tasks: at finalize the job's actors still hold their nodes'
    CPUs, so a one-CPU task waited until the finalize timeout and was cancelled (the
    two-node test: 7.5 minutes). ``per_node`` tasks in flight bound its use of a node."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return ray.remote(num_cpus=0, max_retries=0)(summarise_here).options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
        runtime_env={"py_executable": sys.executable})


class NodeSummaries:
    """The controller's side: :meth:`window` as windows' reports arrive (``per_window``),
    :meth:`finish` in finalize (``at_end`` and ``per_window``)."""

    def __init__(self, run: RunContext, *, echo: bool):
        self.context = run
        self.echo = echo
        self.mode = run.plan.policy.summarise
        self._background: List[threading.Thread] = []
        run.placed_listeners.append(self.window)

    def window(self, entries: Sequence[ReportEntry]) -> None:
        """``per_window``: summarise these just-placed reports in the background."""
        if self.mode != "per_window" or not entries or not this_node_id():
            return
        plan = self.context.plan
        manifest = self.context.manifest(list(entries))
        thread = threading.Thread(
            target=_in_background, name="verlprof-summaries", daemon=True,
            args=(manifest, plan.output_dir, plan.policy.finalize_timeout_s))
        thread.start()
        self._background.append(thread)

    def finish(self, manifest: Manifest, cut: bool) -> Manifest:
        """The written manifest, its reports summarised on their nodes and written again with
        each ``summary``; unchanged when off, cut short, or outside Ray. Never raises."""
        if self.mode == "off" or cut or not this_node_id():
            return manifest
        began = time.monotonic()
        timeout = self.context.plan.policy.finalize_timeout_s
        for thread in self._background:
            thread.join(max(0.0, timeout - (time.monotonic() - began)))
        try:
            summed, results, problems = summarise_on_nodes(
                manifest, self.context.plan.output_dir,
                timeout_s=max(1.0, timeout - (time.monotonic() - began)))
        except Exception as err:  # noqa: BLE001 - the reports are placed; report reads them
            logger.warning("verlprof: reports not summarised on their nodes: %s", err)
            return manifest
        for line in problems:
            logger.warning("verlprof: %s", line)
        nodes = {r.node_id for r in results if r.summary is not None}
        line = (f"verlprof: {sum(r.summary is not None for r in results)} report summaries on "
                f"{len(nodes)} node(s) in {time.monotonic() - began:.1f} s")
        logger.info(line)
        if self.echo:
            print(line, flush=True)
        if summed == manifest:
            return manifest
        try:
            return self.context.write(summed)
        except Exception as err:  # noqa: BLE001 - the first manifest stands
            logger.warning("verlprof: manifest not rewritten with the summaries: %s", err)
            return manifest
