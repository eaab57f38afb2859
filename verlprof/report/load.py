"""Read every report of an output directory, in parallel, into step-assigned phase records.

Reading is the expensive part (``nsys export`` runs once per report; its sqlite is cached next
to the report, and so is what came out of it: a summary beside the report, made here or on the
report's Ray node, :mod:`verlprof.backends.summary`), so reports are read ``jobs`` at a time,
default one per core, never more than the memory budget allows (:mod:`verlprof.report.budget`;
see :func:`read_reports`). A report that cannot be read becomes a :class:`Problem` of kind
``unreadable``; it never stops the others.

Step assignment. A report covering one step gives that step to all its ranges. A report
covering several steps (a continuous window) assigns each range, in order of preference, to:
the report's own step marks (``step/<n>``, ``ProfilerStep#<n>``) when they name every step of
the window; the controller's ``step/<n>`` ranges (absolute time); the k-th call of the same
phase to the k-th step when the call count equals the step count; else the window's first step
(with a note).
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import Executor, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from verlprof import paths
from verlprof.backends import get_backend
from verlprof.backends.summary import load_summary, read_summarised
from verlprof.manifest import (
    STATUS_INCOMPLETE,
    STATUS_MISSING,
    STATUS_OK,
    STATUS_SKIPPED,
    Manifest,
    ReportEntry,
)
from verlprof.records import CAPTURE_RANGE
from verlprof.report.budget import budget_bytes, jobs_for, need
from verlprof.report.model import (
    CONTROLLER_GROUP,
    CONTROLLER_ROLE,
    PROBLEM_INCOMPLETE,
    PROBLEM_MISSING,
    PROBLEM_SKIPPED,
    PROBLEM_UNREADABLE,
    LoadResult,
    PhaseRecord,
    Problem,
    RawRange,
    ReportData,
    StepMark,
    StepSpan,
    Window,
)
from verlprof.report.names import entries_with_stand_ins, records_with_stand_ins
from verlprof.report.progress import Progress
from verlprof.report.table import group_by

STEP_PREFIX = "step/"
"""Controller range naming a training step: ``step/<n>``."""
DEFAULT_EXPORT_TIMEOUT_S = 300.0
IMPORT_THREAD = "verlprof-report-imports"
"""Name of the thread on which :func:`verlprof.report.summary.summarize` imports the printing
and drawing modules while the reports are read."""
POOL_MIN_BYTES = 16 << 20
"""Torch traces below which they are parsed on threads (a process pool's start-up dominates)."""

@dataclass(frozen=True)
class ReadTask:
    """One report to read (sent to a pool worker)."""

    index: int
    """Index of the report's entry in ``manifest.reports``."""
    path: str
    """Absolute path of the report."""
    backend: str
    """Backend that wrote it (its reader reads it)."""
    window_start_ns: Optional[int]
    """When its window opened (a trace without absolute times is placed there)."""
    timeout_s: float
    """Longest an export may take."""


def read_one(task: ReadTask) -> ReportData:
    """Read one report (runs in a pool worker), from its summary when one matches it (and
    its summary written when none did: :mod:`verlprof.backends.summary`). Never raises."""
    try:
        return read_summarised(task.path, task.backend, index=task.index,
                               window_start_ns=task.window_start_ns,
                               timeout_s=task.timeout_s)[0]
    except Exception as err:  # noqa: BLE001 - a reader bug must not stop the other reports
        return ReportData(index=task.index, error=f"{type(err).__name__}: {err}")


def read_reports(tasks: Sequence[ReadTask], jobs: Optional[int] = None,
                 progress: Optional[Progress] = None,
                 memory_budget: Optional[int] = None) -> List[ReportData]:
    """Read all tasks; results in task order.

    How many at once: ``jobs`` (default one per core), never more than fit
    ``memory_budget`` (:mod:`verlprof.report.budget`; default ``$VERLPROF_MEMORY_BUDGET`` or
    4 GiB) nor more than there are tasks. nsys reports are read on threads, cached or not: their
    work is in ``nsys export`` children and in SQLite, which runs without the GIL, so threads
    use every core without a pool's start-up. Torch traces are parsed in Python: a process pool
    when there are at least :data:`POOL_MIN_BYTES` of them. A report whose summary matches it
    is not read at all. A trace that alone exceeds the
    budget is refused (one line), the others still read. ``progress`` advances once per report.
    """
    if not tasks:
        return []
    progress = progress or Progress.disabled()
    results: Dict[int, ReportData] = {}
    for i, task in enumerate(tasks):  # summaries first: what they answer needs no reader
        summary = load_summary(task.path, task.backend, task.window_start_ns)
        if summary is not None:
            results[i] = summary.data(task.index)
            progress.advance(os.path.basename(task.path))
    limit = budget_bytes(memory_budget)
    needs = {i: need(task.path, task.backend, limit) for i, task in enumerate(tasks)
             if i not in results}
    refused = {i: ReportData(index=tasks[i].index, error=n.refusal)
               for i, n in needs.items() if n.refusal}
    todo = [i for i in needs if i not in refused]
    largest = max((needs[i].bytes for i in todo), default=1)
    jobs = jobs_for(largest, limit, len(todo), requested=jobs)
    readable = [tasks[i] for i in todo]
    results.update(refused)
    for i in refused:
        progress.advance(os.path.basename(tasks[i].path))
    if jobs > 1 and _bytes([t for t in readable if t.backend != "nsys"]) >= POOL_MIN_BYTES:
        results.update(_read_in_pool(readable, todo, jobs, progress))
    elif jobs > 1:
        with ThreadPoolExecutor(max_workers=jobs) as threads:
            results.update(_read_with(threads, readable, todo, progress))
    else:
        for i in todo:
            results[i] = read_one(tasks[i])
            progress.advance(os.path.basename(tasks[i].path))
    return [results[i] for i in range(len(tasks))]


def _read_in_pool(tasks: Sequence[ReadTask], keys: Sequence[int], jobs: int,
                  progress: Progress) -> Dict[int, ReportData]:
    """Read in a process pool. A pool that breaks (a worker killed, e.g. out of memory)
    keeps what it finished; each unfinished report is tried again in a pool of its own, and
    one that kills that too becomes an unreadable report, so the others are still summarised.
    A pool that cannot start at all (spawn without a __main__ guard) reads in this process."""
    # imported here: multiprocessing is ~15 ms that reading nsys reports (threads) never needs
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    done: Dict[int, ReportData] = {}
    try:
        with ProcessPoolExecutor(max_workers=jobs, mp_context=_pool_context()) as pool:
            done.update(_read_with(pool, tasks, keys, progress, keep=done))
        return done
    except (BrokenProcessPool, RuntimeError, OSError):
        if not done:  # nothing came back: the workers never ran
            for key, task in zip(keys, tasks):
                done[key] = read_one(task)
                progress.advance(os.path.basename(task.path))
            return done
    for key, task in zip(keys, tasks):
        if key in done:
            continue
        try:
            with ProcessPoolExecutor(max_workers=1, mp_context=_pool_context()) as alone:
                done[key] = alone.submit(read_one, task).result()
        except (BrokenProcessPool, RuntimeError, OSError):
            done[key] = ReportData(index=task.index, error="its reader process died (killed, "
                                   "out of memory?); try a smaller --memory-budget per reader "
                                   "with --jobs 1")
        progress.advance(os.path.basename(task.path))
    return done


def _read_with(executor: Executor, tasks: Sequence[ReadTask], keys: Sequence[int],
               progress: Progress, keep: Optional[Dict[int, ReportData]] = None
               ) -> Dict[int, ReportData]:
    """Results by key as they finish (into ``keep`` too, so a pool that breaks midway
    leaves the finished ones behind)."""
    futures = {executor.submit(read_one, task): (key, task) for key, task in zip(keys, tasks)}
    results: Dict[int, ReportData] = keep if keep is not None else {}
    for future in as_completed(futures):
        key, task = futures[future]
        results[key] = future.result()
        progress.advance(os.path.basename(task.path))
    return results


def _bytes(tasks: Sequence[ReadTask]) -> int:
    """Total size of the tasks' input files (those that exist)."""
    total = 0
    for task in tasks:
        try:
            total += os.path.getsize(task.path)
        except OSError:
            continue
    return total


def _pool_context():
    """``fork`` when this process has a single thread (fast, nothing re-imported; the CLI),
    else ``spawn`` (forking a process with threads, e.g. after Ray started, can deadlock)."""
    from multiprocessing import get_context

    for thread in threading.enumerate():  # summarize's imports end in a few tens of ms:
        if thread.name == IMPORT_THREAD:  # wait for them rather than lose fork
            thread.join()
    return get_context("fork" if threading.active_count() == 1 else "spawn")


def load(output_dir: str, manifest: Manifest, *, jobs: Optional[int] = None,
         export_timeout: float = DEFAULT_EXPORT_TIMEOUT_S,
         show_progress: bool = False, memory_budget: Optional[int] = None) -> LoadResult:
    """Read every readable report of ``manifest`` and normalise it; ``show_progress``: a
    :class:`~verlprof.report.progress.Progress` on stderr, one step per report read;
    ``memory_budget``: bytes the readers may use together (default: see
    :func:`verlprof.report.budget.budget_bytes`)."""
    problems: List[Problem] = []
    tasks: List[ReadTask] = []
    entries, warnings = entries_with_stand_ins(manifest.reports)
    for index, entry in enumerate(entries):
        if entry.status == STATUS_MISSING:
            problems.append(_problem(PROBLEM_MISSING, entry, entry.reason or "no report"))
            continue
        if entry.status == STATUS_SKIPPED:  # not opened on purpose: there is no file
            problems.append(_problem(PROBLEM_SKIPPED, entry, entry.reason or "not opened"))
            continue
        if entry.status == STATUS_INCOMPLETE:
            problems.append(_problem(PROBLEM_INCOMPLETE, entry,
                                     entry.reason or "report cut short"))
        elif entry.status != STATUS_OK:
            problems.append(_problem(PROBLEM_UNREADABLE, entry,
                                     f"unknown manifest status {entry.status!r}"))
            continue
        if not get_backend(entry.backend).has_reader:
            problems.append(_problem(PROBLEM_SKIPPED, entry,
                                     f"no reader for {entry.backend} reports; open it in its "
                                     "own viewer"))
            continue
        try:
            full = paths.inside(output_dir, entry.path)
        except ValueError as err:
            problems.append(_problem(PROBLEM_UNREADABLE, entry, str(err)))
            continue
        if not os.path.isfile(full):
            problems.append(_problem(PROBLEM_MISSING, entry,
                                     "manifest says ok but the file is not there"))
            continue
        tasks.append(ReadTask(index=index, path=full, backend=entry.backend,
                              window_start_ns=entry.window_start_ns, timeout_s=export_timeout))
    began = time.monotonic()
    label = "reading reports"
    with (Progress(label, len(tasks)) if show_progress else Progress.disabled()) as progress:
        datas = read_reports(tasks, jobs, progress, memory_budget)
    seconds = time.monotonic() - began
    root = os.path.realpath(output_dir) + os.sep
    for data in datas:
        if data.error:  # paths relative to output_dir: the row already says which report
            entry = entries[data.index]
            problems.append(_problem(PROBLEM_UNREADABLE, entry, data.error.replace(root, "")
                                     + _size_changed(output_dir, entry)))
    good = [d for d in datas if not d.error]
    records, steps, windows, notes = normalise(entries, good)
    records, name_warnings = records_with_stand_ins(records)
    return LoadResult(records=tuple(records), steps=tuple(steps), windows=tuple(windows),
                      problems=tuple(problems), notes=tuple(notes), read_seconds=seconds,
                      warnings=tuple(warnings + name_warnings))


def normalise(entries: Sequence[ReportEntry], datas: Sequence[ReportData]
              ) -> Tuple[List[PhaseRecord], List[StepSpan], List[Window], List[str]]:
    """Turn raw report data into records with steps, step spans and capture windows."""
    notes: List[str] = []
    controller_marks: Dict[int, StepMark] = {}
    for data in datas:
        if entries[data.index].group == CONTROLLER_GROUP:
            for mark in data.marks:
                controller_marks.setdefault(mark.step, mark)
    records: List[PhaseRecord] = []
    windows: List[Window] = []
    for data in datas:
        entry = entries[data.index]
        if data.window is not None:
            windows.append(Window(entry.group, entry.rank, data.window[0], data.window[1]))
        phases = [r for r in data.ranges if _phase_name(r.name) is not None]
        steps = _assign_steps(entry, phases, data.marks, controller_marks, notes)
        for raw, step in zip(phases, steps):
            role, phase = _phase_name(raw.name)  # type: ignore[misc]
            if entry.group == CONTROLLER_GROUP and role != CONTROLLER_ROLE:
                continue
            records.append(PhaseRecord(
                step=step, group=entry.group, rank=entry.rank, role=role, phase=phase,
                start_ns=raw.start_ns, end_ns=raw.end_ns, kernel_ns=raw.kernel_ns,
                kernel_count=raw.kernel_count, memcpy_ns=raw.memcpy_ns,
                report_path=entry.path, host=entry.host, pid=entry.pid))
    records.sort(key=lambda r: (r.start_ns, r.group, r.rank))
    return records, _step_spans(controller_marks, records), windows, notes


def _phase_name(name: str) -> Optional[Tuple[str, str]]:
    """``<role>/<phase>`` split at the first ``/``. An empty role or phase (``critic/``) is
    still a phase range: it is counted under a stand-in name, with a warning
    (:mod:`verlprof.report.names`), rather than dropped without a word."""
    if name == CAPTURE_RANGE or name.startswith(STEP_PREFIX) or "/" not in name:
        return None
    role, _, phase = name.partition("/")
    return role, phase


def _assign_steps(entry: ReportEntry, ranges: Sequence[RawRange], marks: Sequence[StepMark],
                  controller: Dict[int, StepMark], notes: List[str]) -> List[int]:
    window_steps = list(entry.steps) or [0]
    if len(window_steps) == 1:
        return [window_steps[0]] * len(ranges)
    own = [m for m in marks if m.step in window_steps]
    sources: List[List[StepMark]] = []
    if own and {m.step for m in own} >= set(window_steps):
        sources.append(own)
    in_window = [m for s, m in controller.items() if s in window_steps]
    if in_window:
        sources.append(in_window)
    by_order = _by_occurrence(ranges, window_steps)
    out: List[int] = []
    guessed = 0
    for i, raw in enumerate(ranges):
        middle = (raw.start_ns + raw.end_ns) // 2
        step = next((m.step for source in sources for m in source
                     if m.start_ns <= middle <= m.end_ns), None)
        if step is None:
            step = by_order[i]
        if step is None:
            step = window_steps[0]
            guessed += 1
        out.append(step)
    if guessed:
        notes.append(f"{entry.path}: {guessed} range(s) could not be placed in one of steps "
                     f"{paths.step_text(window_steps)}; counted under step {window_steps[0]}")
    return out


def _by_occurrence(ranges: Sequence[RawRange], steps: Sequence[int]) -> List[Optional[int]]:
    """k-th call of a name → k-th step, for names called exactly once per step."""
    order = group_by(sorted(range(len(ranges)), key=lambda j: ranges[j].start_ns),
                     lambda j: ranges[j].name)
    out: List[Optional[int]] = [None] * len(ranges)
    for indices in order.values():
        if len(indices) == len(steps):
            for k, idx in enumerate(indices):
                out[idx] = steps[k]
    return out


def _step_spans(controller: Dict[int, StepMark], records: Sequence[PhaseRecord]
                ) -> List[StepSpan]:
    spans: Dict[int, StepSpan] = {
        s: StepSpan(s, m.start_ns, m.end_ns, "controller") for s, m in controller.items()}
    extent: Dict[int, Tuple[int, int]] = {}
    for rec in records:
        lo, hi = extent.get(rec.step, (rec.start_ns, rec.end_ns))
        extent[rec.step] = (min(lo, rec.start_ns), max(hi, rec.end_ns))
    for step, (lo, hi) in extent.items():
        spans.setdefault(step, StepSpan(step, lo, hi, "records"))
    return sorted(spans.values(), key=lambda s: (s.start_ns, s.step))


def _size_changed(output_dir: str, entry: ReportEntry) -> str:
    """Why an unreadable report may be so: its size is not the one placed (cut, replaced)."""
    try:
        size = os.path.getsize(paths.inside(output_dir, entry.path))
    except (OSError, ValueError):
        return ""
    if not entry.bytes or size == entry.bytes:
        return ""
    return f" (the file holds {size:,} bytes where the manifest says {entry.bytes:,}: cut " \
           "short or replaced since it was placed)"


def _problem(kind: str, entry: ReportEntry, reason: str) -> Problem:
    return Problem(kind=kind, steps=tuple(entry.steps), group=entry.group, rank=entry.rank,
                   component=entry.component, path=entry.path, reason=reason,
                   backend=entry.backend, role=entry.role, phase=entry.phase)
