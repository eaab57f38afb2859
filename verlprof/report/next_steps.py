"""What to do after ``verlprof report``: which file to open first, and with what.

Printed at the end of the summary (``verlprof report`` and ``verlprof demo``). Each line names
a real file of this run and the program that opens it: ``nsys-ui`` for Nsight Systems reports,
Perfetto for torch traces and rocprof-sys output, a browser for the timeline. Paths are shell
words (:func:`verlprof.safe_text.shell_quote`): a hint can be pasted, and shows no hidden
character.
"""

from __future__ import annotations

import os
from typing import List, Optional

from verlprof.backends import get_backend
from verlprof.manifest import STATUS_OK, ReportEntry
from verlprof.report.findings import Summary
from verlprof.report.model import CONTROLLER_GROUP
from verlprof.safe_text import shell_quote

GUIDE = "docs/user_guide.md"


def next_steps(summary: Summary) -> List[str]:
    """Lines (without a trailing newline) telling the user what to open next."""
    out: List[str] = []
    unread = {os.path.normpath(p.path) for p in summary.missing}  # unreadable, no reader
    reports = [r for r in summary.manifest.reports
               if r.status == STATUS_OK and os.path.normpath(r.path) not in unread]
    html = summary.paths.get("timeline.html")
    if html:
        out.append(f"  timeline:       open {shell_quote(html)} in a browser "
                   "(a picture: timeline.png next to it)")
    first = _first_to_open(summary, reports)
    if first is not None:
        why = "the slowest rank" if summary.stragglers else "one report"
        full = os.path.join(summary.output_dir, first.path)
        for label, command in get_backend(first.backend).open_hints(full):
            out.append(f"  {(label or why + ':'):<15} {command}")
    if summary.missing:
        out.append(f"  {'problems:':<15} {len(summary.missing)} report(s) not summarised; "
                   f"the reasons are listed above and in manifest.json ({GUIDE}, "
                   "\"When a report is missing\")")
    return ["next steps:", *out] if out else []


def _first_to_open(summary: Summary, reports: List[ReportEntry]) -> Optional[ReportEntry]:
    """The straggler's report when there is one, else the first worker report of the run."""
    for straggler in summary.stragglers:
        for record in summary.records:
            if (record.step, record.group, record.rank) == (
                    straggler.step, straggler.group, straggler.rank):
                match = [r for r in reports if r.path == record.report_path]
                if match:
                    return match[0]
    workers = [r for r in reports if r.group != CONTROLLER_GROUP]
    pool = workers or reports
    return min(pool, key=lambda r: (r.steps, r.group, r.rank, r.path)) if pool else None

