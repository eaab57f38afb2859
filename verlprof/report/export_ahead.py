"""Start the first ``nsys export`` of a cold ``verlprof report`` before the rest of it loads.

On small reports the exports take tenths of a second, about as long as importing the readers,
rich and Pillow and building the thread pool. :func:`export_ahead` runs right after the
command line is parsed: it reads the manifest and starts, on threads of their own
(:func:`verlprof.backends.nsys.cli.export_ahead`), the exports the first readers would start,
as many as will read at once (``--jobs``, default one per core, within the memory budget).
Those readers then wait for them instead of starting their own. Reports whose export is up to
date are left alone, and so is anything out of the ordinary (a read-only directory, a path
outside the output directory, a manifest that cannot be read): the readers deal with those as
before.
"""

from __future__ import annotations

import os
from typing import Optional

from verlprof import paths
from verlprof.backends.summary import summary_path
from verlprof.manifest import STATUS_INCOMPLETE, STATUS_OK, Manifest, read_manifest
from verlprof.report.budget import budget_bytes, jobs_for, need
from verlprof.report.load import DEFAULT_EXPORT_TIMEOUT_S


def export_ahead(output_dir: str, jobs: Optional[int] = None,
                 timeout_s: float = DEFAULT_EXPORT_TIMEOUT_S) -> Optional[Manifest]:
    """Start the exports the first readers of ``output_dir`` would start; returns the manifest
    it read (for :func:`~verlprof.report.summary.summarize`), None when it could not. Never
    raises: whatever it cannot judge is left to the readers."""
    try:
        manifest = read_manifest(output_dir)
    except (ValueError, OSError):
        return None
    limit = budget_bytes(None)
    wanted = []
    for entry in manifest.reports:
        if entry.backend != "nsys" or entry.status not in (STATUS_OK, STATUS_INCOMPLETE):
            continue
        try:
            full = paths.inside(output_dir, entry.path)
        except ValueError:
            continue
        if os.path.isfile(full) and not _up_to_date(full, summary_path(full)):
            wanted.append(full)  # a summary newer than the report: the reader checks it first
    if not wanted:  # nothing to export: spare the nsys CLI module's import
        return manifest
    from verlprof.backends.nsys.cli import export_ahead as start_export
    from verlprof.backends.nsys.cli import sqlite_path_for

    at_once = jobs_for(need("", "nsys", limit).bytes, limit, len(wanted), requested=jobs)
    started = 0
    for full in wanted:
        if started == at_once:
            break
        out = sqlite_path_for(full)
        if not os.access(os.path.dirname(full), os.W_OK) or _up_to_date(full, str(out)):
            continue  # a read-only folder's export goes elsewhere: the reader knows where
        start_export(full, timeout_s)
        started += 1
    return manifest


def _up_to_date(report: str, export: str) -> bool:
    try:
        return os.stat(export).st_mtime_ns >= os.stat(report).st_mtime_ns
    except OSError:
        return False
