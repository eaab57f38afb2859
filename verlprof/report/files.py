"""``summary/summary.csv`` (long form, one row per step/group/rank/role/phase) and
``summary/summary.md`` (the table across steps, per-step tables, stragglers, missing and
unreadable reports).

Names, hosts, paths and reasons are data (:mod:`verlprof.safe_text`): every CSV cell goes
through :func:`~verlprof.safe_text.csv_cell` (no cell a spreadsheet evaluates; the raw value
is one leading ``'`` away), every Markdown cell and line through
:func:`~verlprof.safe_text.md_text` (no table split, code span, link or HTML from a name).
"""

from __future__ import annotations

import csv
import os
from collections import Counter
from typing import List, Optional, Sequence

from verlprof.report.across_steps import across_table, profiled_steps
from verlprof.report.anatomy_view import md_tables
from verlprof.report.findings import Summary
from verlprof.report.matrix import StepTable, ms, per_rank_fits, step_tables
from verlprof.safe_text import csv_cell, md_text

CSV_NAME = "summary.csv"
MD_NAME = "summary.md"
CSV_COLUMNS = (
    "step", "group", "rank", "role", "phase", "calls", "duration_ms", "duration_ns", "start_s",
    "kernel_ms", "kernel_count", "memcpy_ms", "straggler", "host", "report",
)
"""Columns of summary.csv. ``start_s``: first call's start in seconds from the first event of
the run (the timeline's zero); GPU columns are empty when the report had no GPU data;
``straggler`` is 1 on a flagged row."""


def _opt_ms(ns: Optional[int]) -> str:
    return "" if ns is None else f"{ns / 1e6:.3f}"


def write_csv(summary: Summary, path: str) -> str:
    flagged = {(s.step, s.group, s.role, s.phase, s.rank) for s in summary.stragglers}
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(CSV_COLUMNS)
        for row in summary.rows:
            writer.writerow(csv_cell(cell) for cell in [
                row.step, row.group, row.rank, row.role, row.phase, row.calls,
                f"{row.duration_ns / 1e6:.3f}", row.duration_ns,
                f"{(row.start_ns - summary.t0_ns) / 1e9:.6f}",
                _opt_ms(row.kernel_ns), "" if row.kernel_count is None else row.kernel_count,
                _opt_ms(row.memcpy_ns),
                int((row.step, row.group, row.role, row.phase, row.rank) in flagged),
                row.host, row.report_path])
    return path


class _Md(str):
    """A cell that is Markdown already (ours, its data escaped): not escaped again."""


def _md_cell(value: object) -> str:
    return value if isinstance(value, _Md) else md_text(value)


def _md_table(header: Sequence[str], rows: Sequence[Sequence[object]],
              numeric: Sequence[int] = ()) -> List[str]:
    align = ["---:" if i in numeric else "---" for i in range(len(header))]
    out = ["| " + " | ".join(_md_cell(h) for h in header) + " |",
           "| " + " | ".join(align) + " |"]
    out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return out


def _md_step(table: StepTable) -> List[str]:
    rows = [[_Md(f"**{md_text(c.text)}**") if c.flagged else c.text for c in line]
            for line in table.rows]
    numeric = range(table.numeric_from, len(table.header))
    return [f"### {table.title}", ""] + _md_table(table.header, rows, numeric) + [""]


def _md_anatomy(s: Summary) -> List[str]:
    assert s.anatomy is not None
    lines = ["## Where the step went", "",
             "The rows of a step add up to its wall time, on the controller's clock. Per "
             "controller phase: dispatch (its start to its slowest rank's start), compute "
             "(that rank's call, skew = it minus the other ranks' median) and collect (that "
             "rank's end to the phase's end); ctl only: its ranks were not profiled. Replica "
             "lines run beside the steps, not in the sum.", ""]
    for title, header, rows, extra in md_tables(s.anatomy):
        lines += [f"### {md_text(title)}", ""] + _md_table(header, rows, (2, 3)) + [""]
        lines += [f"- {md_text(x)}" for x in extra] + ([""] if extra else [])
    return lines


def render_md(summary: Summary) -> str:
    s = summary
    counts = Counter(entry.status for entry in s.manifest.reports)
    lines = ["# verlprof summary", "",
             f"- output dir: {md_text(s.output_dir)}",
             f"- tool: {md_text(s.manifest.tool)}; reports: {len(s.manifest.reports)} "
             f"({md_text(', '.join(f'{n} {k}' for k, n in sorted(counts.items())))})",
             f"- phase records: {len(s.records)}; times in ms unless noted", ""]
    if s.steps:
        lines += ["## Steps", ""]
        lines += _md_table(["step", "start s", "duration s", "from"],
                           [[sp.step, f"{(sp.start_ns - s.t0_ns) / 1e9:.3f}",
                             f"{sp.duration_ns / 1e9:.3f}", sp.source] for sp in s.steps], (1, 2))
        lines.append("")
    if len(profiled_steps(s.rows)) > 1:
        lines += ["## Phases across steps (ms)", "",
                  "Each row pools the phase's time on every step and rank: first and last "
                  "are the median across ranks in its first and last step; slowest is "
                  "step and rank (s12 r3); **bold!** = straggler.", ""]
        lines += _md_step(across_table(s.rows, s.stragglers))
    per_rank = per_rank_fits(s.rows)
    lines += ["## Phases per step and rank (ms)", "",
              ("Cells are the phase's time on that rank; `×n` = n calls summed; "
               if per_rank else "Each row is the phase's distribution across its ranks; ") +
              "**bold!** = straggler.", ""]
    for table in step_tables(s.rows, s.spreads, s.stragglers, s.steps, per_rank=per_rank):
        lines += _md_step(table)
    if s.anatomy is not None and s.anatomy.steps:
        lines += _md_anatomy(s)
    lines += ["## Stragglers", "",
              f"Rule: slowest rank > {s.threshold:g} × median of the other ranks and at least "
              f"{s.min_excess_ms:g} ms slower.", ""]
    if s.stragglers:
        lines += _md_table(
            ["step", "group", "phase", "rank", "host", "ms", "others median ms", "ratio"],
            [[x.step, x.group, x.name, x.rank, x.host, ms(x.duration_ns), ms(x.others_median_ns),
              f"{x.ratio:.2f}"] for x in s.stragglers], (3, 5, 6, 7))
    else:
        lines.append("None.")
    lines += ["", "## Missing, incomplete, unreadable and skipped reports", ""]
    if s.missing:
        lines += _md_table(
            ["status", "steps", "group", "rank", "component", "path", "reason"],
            [[p.kind, ",".join(map(str, p.steps)), p.group, p.rank, p.component, p.path,
              p.reason] for p in s.missing])
    else:
        lines.append("None: every expected report was read.")
    if s.warnings:
        lines += ["", "## Warnings", ""] + [f"- {md_text(w)}" for w in s.warnings]
    if s.notes:
        lines += ["", "## Notes", ""] + [f"- {md_text(n)}" for n in s.notes]
    pictures = [name for name in ("timeline.png", "timeline.html", "timeline_steps.png")
                if name in s.paths]
    if pictures:
        lines += ["", "## Timeline", ""]
        if "timeline.png" in s.paths:
            lines.append("![timeline](timeline.png)")
        if "timeline_steps.png" in s.paths:
            lines += ["", "Each phase across steps:", "", "![phases by step](timeline_steps.png)",
                      ""]
        if "timeline.html" in s.paths:
            lines.append("Interactive: [timeline.html](timeline.html)")
    return "\n".join(lines) + "\n"


def write_md(summary: Summary, path: str) -> str:
    text = render_md(summary)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)
    return path
