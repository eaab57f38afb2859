"""Every full run's table, kept on this machine, and what changed since the previous one.

Issue 38 asks that two ``make bench`` runs back to back give the same verdict on every row.
Checking that by eye over two 46-row tables is slow and easy to get wrong, and a row that
changed says little without how firmly each run held it. So each run writes its rows as a
:class:`RunRecord` (``benchmarks/.work/runs/<UTC time>.json``), and at the end prints a
:class:`Comparison` with the previous run of the same command on this machine: how many rows
kept their verdict, and each row that did not, with its ratio, verdict and ``holds`` in both
runs. ``python -m benchmarks --compare [BEFORE AFTER]`` prints the same for any two saved runs
(default: the latest two).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import time
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import dacite

from benchmarks.common import HOLDS_FIRM, ROOT, WORK_DIR, Result
from verlprof.manifest import write_json_atomically

RUNS_DIR = os.path.join(WORK_DIR, "runs")
"""Where each run's record goes by default (git-ignored, with the rest of ``benchmarks/.work``);
read when a function is called, so that a test may point it elsewhere."""
RUNS_ENV = "VERLPROF_BENCH_RUNS"
"""Set: the records go there instead (a test that runs the whole bench in a process of its
own keeps its planted hangs out of this machine's history)."""


def runs_dir() -> str:
    return os.environ.get(RUNS_ENV) or RUNS_DIR


@dataclass(frozen=True)
class RowRecord:
    """One row as the table printed it, with the samples behind its spread."""

    metric: str
    verdict: str
    ratio: Optional[float]
    goal: Optional[float]
    samples: Tuple[float, ...]
    holds: Optional[float]
    """The share of runs like this one expected to give the same verdict (None: no goal, or
    fewer than two samples)."""


@dataclass(frozen=True)
class RunRecord:
    """One run of ``python -m benchmarks``: when, on which code, and every row."""

    started: str
    """UTC, ``2026-12-02T04:10:12Z``; also the file's name."""
    commit: str
    """``git rev-parse --short HEAD``, ``+changes`` when tracked files differ from it."""
    command: Tuple[str, ...]
    """The arguments after ``python -m benchmarks``: runs are compared only with the same."""
    seconds: float
    load_start: str
    load_end: str
    rows: Tuple[RowRecord, ...]


@dataclass(frozen=True)
class Change:
    """A row whose verdict differs between two runs."""

    before: RowRecord
    after: RowRecord


@dataclass(frozen=True)
class Comparison:
    """Two runs' rows matched by metric."""

    compared: int
    """Rows in both runs."""
    changed: Tuple[Change, ...]
    firm_both: int
    """Rows held in at least ``HOLDS_FIRM`` of runs like each of the two."""
    firm_changed: int
    """Of those, how many changed verdict anyway (a firm verdict that moved)."""
    expected: float
    """How many of the rows in both the earlier run expected to change: its ``1 - holds``
    summed (what ``holds`` is worth, checked on every pair of runs)."""
    only_before: Tuple[str, ...]
    only_after: Tuple[str, ...]


def row_record(result: Result) -> RowRecord:
    return RowRecord(metric=result.metric, verdict=result.verdict, ratio=result.ratio,
                     goal=result.goal, samples=tuple(result.samples), holds=result.holds)


def commit() -> str:
    """The code a run measured: the short commit, marked when tracked files were changed."""
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=10, check=True)
        return done.stdout.strip()
    try:
        head = git("rev-parse", "--short", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+changes" if changed else "")


def run_record(results: Sequence[Result], command: Sequence[str], seconds: float,
               load_start: str, load_end: str, started: Optional[float] = None) -> RunRecord:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started))
    return RunRecord(started=stamp, commit=commit(), command=tuple(command),
                     seconds=round(seconds, 1), load_start=load_start, load_end=load_end,
                     rows=tuple(row_record(r) for r in results))


def save(run: RunRecord, directory: Optional[str] = None) -> str:
    """The run as ``<UTC start>.json``, one row per line, written atomically (a run stopped
    mid-write, or a full disk, leaves no half record)."""
    data = dataclasses.asdict(run)
    data["rows"] = list(data["rows"])  # a list of records: laid out one per line
    name = run.started.replace(":", "") + ".json"
    return write_json_atomically(directory or runs_dir(), name, data, for_people=True)


def load(path: str) -> RunRecord:
    """One saved run; ``ValueError`` with one line naming the file when it is not one."""
    try:
        with open(path) as handle:
            data = json.load(handle)
        return dacite.from_dict(RunRecord, data, config=dacite.Config(cast=[tuple]))
    except (OSError, ValueError, dacite.DaciteError) as err:
        raise ValueError(f"{path}: not a saved benchmark run ({type(err).__name__}: "
                         f"{str(err).splitlines()[0] if str(err) else ''})") from None


def saved(directory: Optional[str] = None) -> List[str]:
    """Saved runs, oldest first (their names are their UTC start times)."""
    directory = directory or runs_dir()
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".json"))
    except FileNotFoundError:
        return []
    return [os.path.join(directory, n) for n in names]


def previous(run: RunRecord, directory: Optional[str] = None) -> Optional[RunRecord]:
    """The latest saved run before ``run`` with the same command, if any; unreadable files
    are passed over (a record from an older bench, a file edited by hand)."""
    for path in reversed(saved(directory)):
        try:
            before = load(path)
        except ValueError:
            continue
        if before.started < run.started and before.command == run.command:
            return before
    return None


def compare(before: RunRecord, after: RunRecord) -> Comparison:
    old = {row.metric: row for row in before.rows}
    new = {row.metric: row for row in after.rows}
    both = [m for m in new if m in old]
    changed = tuple(Change(before=old[m], after=new[m]) for m in both
                    if old[m].verdict != new[m].verdict)
    firm = [m for m in both if _firm(old[m]) and _firm(new[m])]
    expected = sum(1 - h for h in (old[m].holds for m in both) if h is not None)
    return Comparison(compared=len(both), changed=changed, firm_both=len(firm),
                      firm_changed=sum(old[m].verdict != new[m].verdict for m in firm),
                      expected=expected,
                      only_before=tuple(m for m in old if m not in new),
                      only_after=tuple(m for m in new if m not in old))


def _firm(row: RowRecord) -> bool:
    return row.holds is not None and row.holds >= HOLDS_FIRM


def render(before: RunRecord, after: RunRecord, comparison: Comparison) -> List[str]:
    """What changed, as lines: the headline first, then one line per changed row."""
    c = comparison
    lines = [f"against {before.started} (commit {before.commit}, {before.seconds:.0f} s): "
             f"same verdict on {c.compared - len(c.changed)} of {c.compared} rows "
             f"({len(c.changed)} changed, {c.expected:.1f} expected by the earlier run's "
             f"holds); of the {c.firm_both} rows that held in {HOLDS_FIRM:.0%} or more of runs "
             f"like each, {c.firm_changed} changed"]
    if before.commit != after.commit:
        lines.append(f"  (the code differs: {before.commit} then {after.commit})")
    for change in c.changed:
        lines.append(f"  changed: {change.after.metric}: {_side(change.before)} -> "
                     f"{_side(change.after)}")
    lines += [f"  only in the earlier run: {m}" for m in c.only_before]
    lines += [f"  only in this run: {m}" for m in c.only_after]
    return lines


def _side(row: RowRecord) -> str:
    ratio = "-" if row.ratio is None else f"{row.ratio:.3f}x"
    holds = "" if row.holds is None else f", holds {row.holds:.0%}"
    return f"{ratio} {row.verdict}{holds}"


def compare_saved(paths: Sequence[str], directory: Optional[str] = None) -> List[str]:
    """``--compare``: two files named, or the latest two saved runs."""
    if len(paths) not in (0, 2):
        raise ValueError("--compare takes two saved runs (BEFORE AFTER) or none (the latest "
                         "two)")
    if not paths:
        paths = saved(directory)[-2:]
        if len(paths) < 2:
            raise ValueError(f"--compare: {len(paths)} saved run(s) in "
                             f"{directory or runs_dir()}; a full run saves one at its end")
    before, after = load(paths[0]), load(paths[1])
    return [f"{paths[0]} -> {paths[1]}"] + render(before, after, compare(before, after))
