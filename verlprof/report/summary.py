"""``summarize(output_dir)``: read, analyse, print and write every summary file."""

from __future__ import annotations

import importlib
import os
import threading
from typing import TYPE_CHECKING, Dict, Optional

from verlprof import paths
from verlprof.manifest import Manifest, read_manifest
from verlprof.report.anatomy import anatomize
from verlprof.report.findings import Summary
from verlprof.report.load import DEFAULT_EXPORT_TIMEOUT_S, IMPORT_THREAD, load
from verlprof.report.model import LoadResult
from verlprof.report.stragglers import (
    DEFAULT_MIN_EXCESS_MS,
    DEFAULT_THRESHOLD,
    find_stragglers,
)
from verlprof.report.table import build_rows, build_spreads

if TYPE_CHECKING:
    from rich.console import Console

_PRINTING = ("verlprof.report.console",)
"""Modules that print (rich: about 40 ms to import)."""
_DRAWING = ("PIL.Image", "PIL.ImageDraw", "PIL.ImageFont", "PIL.PngImagePlugin",
            "verlprof.report.timeline_png", "verlprof.report.timeline_steps")
"""Modules that draw the pictures (Pillow: about 30 ms to import)."""

PNG_NAME = "timeline.png"
HTML_NAME = "timeline.html"
STEPS_PNG_NAME = "timeline_steps.png"
"""Each phase across steps, side by side (:mod:`verlprof.report.timeline_steps`)."""

__all__ = ["HTML_NAME", "PNG_NAME", "STEPS_PNG_NAME", "Summary", "analyse", "default_console",
           "summarize", "write_outputs"]


def summarize(output_dir: str, *, threshold: float = DEFAULT_THRESHOLD,
              min_excess_ms: float = DEFAULT_MIN_EXCESS_MS, jobs: Optional[int] = None,
              picture: bool = True, console: Optional[Console] = None, write: bool = True,
              export_timeout: float = DEFAULT_EXPORT_TIMEOUT_S,
              progress: Optional[bool] = None, per_step: Optional[bool] = None,
              manifest: Optional[Manifest] = None,
              running_note: Optional[str] = None) -> Summary:
    """Summarise ``output_dir`` (a directory with a ``manifest.json``).

    Reads every report (``jobs`` processes, default one per core), builds the per-step table,
    spread and stragglers (slowest rank > ``threshold`` × the other ranks' median and at least
    ``min_excess_ms`` slower), lists missing/incomplete/unreadable reports, prints it all to
    ``console`` (a rich Console; default stdout; pass ``Console(quiet=True)`` for silence), and
    writes ``summary/summary.csv``, ``summary.md`` and, when ``picture``, ``timeline.png``,
    ``timeline.html`` and ``timeline_steps.png``. Raises ValueError (one line) when
    ``output_dir`` has no valid manifest or a setting is out of range; a bad report never
    raises. ``progress``: show the reading progress on stderr (default: when ``console`` is
    not given, as in the CLI). ``per_step``:
    print the per-step tables (default: only for up to 3 profiled steps; beyond, one table
    across steps; summary.md always has both). ``manifest``: ``output_dir``'s, already read.
    ``running_note``: printed for a manifest still marked running (where its run stands).
    """
    if threshold <= 0:
        raise ValueError(f"--threshold must be positive, got {threshold:g}")
    if min_excess_ms < 0:
        raise ValueError(f"minimum excess must be >= 0 ms, got {min_excess_ms:g}")
    if jobs is not None and jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {jobs}")
    unusable = paths.not_a_directory(output_dir)
    if unusable:
        raise ValueError(f"{output_dir}: {unusable}")
    if manifest is None:
        manifest = read_manifest(output_dir)
    _import_meanwhile(_PRINTING + (_DRAWING if write and picture else ()))
    loaded = load(output_dir, manifest, jobs=jobs, export_timeout=export_timeout,
                  show_progress=console is None if progress is None else progress)
    summary = analyse(output_dir, manifest, loaded, threshold, min_excess_ms)
    writing = _Writer(summary, picture) if write else None
    from verlprof.report.console import print_files, print_findings

    print_to = console if console is not None else default_console()
    print_findings(summary, print_to, per_step, running_note)
    if writing is not None:
        writing.wait()  # the files are listed last: they must be there
    print_files(summary, print_to)
    return summary


class _Writer:
    """:func:`write_outputs` on a thread, while the tables are printed: Pillow
    encodes the pictures and the files are written without the GIL, rich prints with it.
    :meth:`wait` raises what the writing raised (e.g. OSError: cannot write the summary)."""

    def __init__(self, summary: Summary, picture: bool):
        self._error: Optional[BaseException] = None

        def run() -> None:
            try:
                write_outputs(summary, picture)
            except BaseException as err:  # noqa: BLE001 - raised again by wait()
                self._error = err

        self._thread = threading.Thread(target=run, name="verlprof-report-files")
        self._thread.start()

    def wait(self) -> None:
        self._thread.join()
        if self._error is not None:
            raise self._error


def _import_meanwhile(modules) -> None:
    """Import ``modules`` on a background thread while the reports are read. Reading mostly
    waits (on ``nsys export`` children, on SQLite, which runs without the GIL), so rich and
    Pillow load in that time instead of after it (``import`` is safe across threads: a module
    another thread is importing is waited for, never run twice). A module that fails to import
    is left for the import where it is used, which raises as before."""

    if not modules:
        return

    def run() -> None:
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001, S110 - raised again by the import that needs it
                return

    threading.Thread(target=run, name=IMPORT_THREAD, daemon=True).start()


def analyse(output_dir: str, manifest: Manifest, loaded: LoadResult,
            threshold: float = DEFAULT_THRESHOLD,
            min_excess_ms: float = DEFAULT_MIN_EXCESS_MS) -> Summary:
    """The analyses on already-loaded records (no I/O): table, spread, stragglers."""
    rows = build_rows(loaded.records)
    starts = [r.start_ns for r in loaded.records] + [s.start_ns for s in loaded.steps] + \
        [w.start_ns for w in loaded.windows]
    return Summary(
        output_dir=os.path.abspath(output_dir), manifest=manifest, records=loaded.records,
        rows=tuple(rows), spreads=tuple(build_spreads(rows)),
        stragglers=tuple(find_stragglers(rows, threshold, min_excess_ms)),
        missing=loaded.problems, steps=loaded.steps, windows=loaded.windows,
        notes=loaded.notes, threshold=threshold, min_excess_ms=min_excess_ms,
        t0_ns=min(starts) if starts else 0, read_seconds=loaded.read_seconds,
        warnings=loaded.warnings, anatomy=anatomize(loaded.records, loaded.steps, manifest))


def default_console() -> Console:
    """Stdout; when it is not a terminal (piped, logged), wide enough that tables never wrap."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=200)


def write_outputs(summary: Summary, picture: bool = True) -> Dict[str, str]:
    """Write the summary files into ``<output_dir>/summary/``; fills ``summary.paths``."""
    # imported here: summarize(write=False) does not pay for these imports
    from verlprof.report.files import CSV_NAME, MD_NAME, write_csv, write_md
    from verlprof.report.timeline import build_timeline
    from verlprof.report.timeline_html import write_html

    out_dir = os.path.join(summary.output_dir, paths.SUMMARY_DIR)
    os.makedirs(out_dir, exist_ok=True)
    written = summary.paths
    written[CSV_NAME] = write_csv(summary, os.path.join(out_dir, CSV_NAME))
    if picture:
        # loaded here: Pillow's import is a noticeable part of `verlprof report`'s fixed cost,
        # and callers that pass picture=False never pay it
        from verlprof.report.timeline_png import write_png
        from verlprof.report.timeline_steps import write_steps_png

        data = build_timeline(summary.records, summary.steps, summary.windows,
                              summary.stragglers, summary.t0_ns)
        title = f"verlprof timeline: {os.path.basename(summary.output_dir.rstrip(os.sep))}"
        written[PNG_NAME] = write_png(data, os.path.join(out_dir, PNG_NAME), title)
        written[HTML_NAME] = write_html(data, os.path.join(out_dir, HTML_NAME), title)
        written[STEPS_PNG_NAME] = write_steps_png(
            summary.spreads, summary.stragglers, data.colours,
            os.path.join(out_dir, STEPS_PNG_NAME), title.replace("timeline", "phases by step", 1))
    written[MD_NAME] = os.path.join(out_dir, MD_NAME)  # listed before writing: md links it
    write_md(summary, written[MD_NAME])
    return written
