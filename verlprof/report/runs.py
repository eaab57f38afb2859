"""The runs a directory holds, for ``verlprof report``: one summary per run, never two mixed.

A run is a directory with its own ``manifest.json``. ``verlprof report DIR`` looks at DIR and
at its immediate subdirectories (``trainer.profiler.existing_run=move_aside`` moves an earlier
run into ``<output_dir>/<its run id>/``, ``new_subdir`` writes a new one into
``<output_dir>/<run id>/``). When DIR has a run of its own (the newest under ``move_aside``,
the first under ``new_subdir``), that run is summarised and the others are named in one
line. Otherwise each is summarised on its own, into its own ``summary/``, one after the
other. ``--run ID`` picks one.
Report files that no manifest lists (a run that crashed, or the leftovers of one whose manifest
was replaced) are named in one line; they are never read into a run's figures.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from typing import Callable, FrozenSet, List, Optional, Set

from verlprof import paths
from verlprof.manifest import read_manifest
from verlprof.safe_text import shell_quote, visible

EXIT_USAGE = 2
_NOT_RUNS = {paths.SUMMARY_DIR, paths.RAW_DIR, paths.CONTROLLER_DIR}


@dataclass(frozen=True)
class RunDir:
    """One run found under the directory given to ``verlprof report``."""

    directory: str
    """The run's output directory (it holds its manifest.json)."""
    run_id: Optional[str] = None
    """Its run id (None for a manifest from before run ids)."""
    created: str = ""
    """When its manifest was written."""
    reports: FrozenSet[str] = frozenset()
    """Absolute paths of the reports its manifest lists."""

    @property
    def label(self) -> str:
        """The run id, else the directory's name: what ``--run`` accepts."""
        return self.run_id or os.path.basename(os.path.normpath(self.directory))


def _read(directory: str) -> Optional[RunDir]:
    if not os.path.isfile(os.path.join(directory, paths.MANIFEST_NAME)):
        return None
    try:
        manifest = read_manifest(directory)
    except ValueError:
        return RunDir(directory=directory)  # unreadable: summarize says why
    listed = {os.path.normpath(os.path.join(directory, e.path)) for e in manifest.reports}
    return RunDir(directory=directory, run_id=manifest.run_id, created=manifest.created,
                  reports=frozenset(listed))


def find_runs(directory: str) -> List[RunDir]:
    """``directory``'s own run (first) and those of its immediate subdirectories, oldest
    first."""
    found = []
    own = _read(directory)
    if own is not None:
        found.append(own)
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return found
    subs = []
    for name in names:
        path = os.path.join(directory, name)
        if name in _NOT_RUNS or name.startswith("step") or not os.path.isdir(path):
            continue
        run = _read(path)
        if run is not None:
            subs.append(run)
    return found + sorted(subs, key=lambda r: (r.created, r.directory))


def unlisted_reports(directory: str, runs: List[RunDir]) -> List[str]:
    """Report files under ``directory`` (relative) that no run's manifest lists; staging and
    summaries aside."""
    listed: Set[str] = set().union(*(r.reports for r in runs))
    suffixes = tuple(paths.EXTENSIONS.values())
    out = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if d not in (paths.RAW_DIR, paths.SUMMARY_DIR))
        for name in sorted(files) + [d for d in dirs if d.endswith(suffixes)]:
            path = os.path.normpath(os.path.join(root, name))
            if name.endswith(suffixes) and path not in listed:
                out.append(os.path.relpath(path, directory))
        dirs[:] = [d for d in dirs if not d.endswith(suffixes)]  # a report, not a folder
    return out


def report_runs(args: argparse.Namespace,
                report_one: Callable[[argparse.Namespace], int]) -> Optional[int]:
    """Run ``report_one`` once per run of ``args.output_dir`` (or for ``args.run``); None when
    the directory is one run (or none), which the caller summarises as before."""
    if getattr(args, "one_run", False):
        return None  # called back for one run of several
    directory = args.output_dir
    runs = find_runs(directory) if os.path.isdir(directory) else []
    _warn_unlisted(directory, runs)
    wanted = getattr(args, "run", None)
    if wanted:
        chosen = [r for r in runs if wanted in (r.run_id, r.label)]
        if not chosen:
            print(f"verlprof: report: no run {visible(wanted)} in {visible(directory)}; "
                  f"runs there: {_labels(runs) or 'none'}", file=sys.stderr)
            return EXIT_USAGE
        runs = chosen[:1]
    elif not runs or runs[0].directory == directory:
        # the directory's own run (move_aside's newest, new_subdir's first) is summarised
        # alone, the others named (their ids in the line, for --run)
        if len(runs) > 1:
            print(f"verlprof: {visible(directory)} also keeps {len(runs) - 1} other run(s) "
                  f"({_labels(runs[1:])}): verlprof report {shell_quote(directory)} --run ID "
                  "summarises one", file=sys.stderr, flush=True)
        return None
    if len(runs) > 1:
        print(f"verlprof: {visible(directory)} holds {len(runs)} runs ({_labels(runs)}): each "
              "is summarised on its own, into its own summary/ (--run ID for one)", flush=True)
    worst = 0
    for n, run in enumerate(runs, 1):
        print(f"verlprof: run {visible(run.label)} ({n} of {len(runs)}): "
              f"{visible(run.directory)}", flush=True)
        one = argparse.Namespace(**{**vars(args), "run": None, "one_run": True,
                                    "output_dir": run.directory})
        worst = max(worst, report_one(one))
    return worst


def _labels(runs: List[RunDir]) -> str:
    return ", ".join(visible(r.label) for r in runs)


def _warn_unlisted(directory: str, runs: List[RunDir]) -> None:
    if not runs:
        return
    unlisted = unlisted_reports(directory, runs)
    if unlisted:
        print(f"verlprof: report: {len(unlisted)} report file(s) under {visible(directory)} "
              f"are in no manifest and are left out (first: {visible(unlisted[0])})",
              file=sys.stderr)
