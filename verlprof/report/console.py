"""The summary in the terminal (rich): the table across steps or the per-step tables,
stragglers, problems, written files.

Names, paths, hosts and reasons are data (:mod:`verlprof.safe_text`): they reach rich only as
``Text`` of their :func:`~verlprof.safe_text.visible` form, never as markup, so a range named
``attn[mask]`` or ``[/]`` prints as written and an escape sequence in a name is shown, not
sent to the terminal.
"""

from __future__ import annotations

from typing import List, Optional

from rich.console import Console
from rich.table import Table
from rich.text import Text

from verlprof.report.across_steps import (
    MAX_STRAGGLER_LINES,
    across_table,
    profiled_steps,
    step_list,
    stragglers_by_rank,
)
from verlprof.report.anatomy_view import console_lines
from verlprof.report.findings import Summary
from verlprof.report.matrix import StepTable, ms, per_rank_fits, step_tables
from verlprof.report.next_steps import next_steps
from verlprof.safe_text import visible


def _line(console: Console, text: str, style: Optional[str] = None,
          lead: Optional[Text] = None) -> None:
    """One line of data: visible, never markup or highlighting; after ``lead`` (ours)."""
    line = Text(visible(text), style=style or "")
    console.print(Text.assemble(lead, line) if lead is not None else line, soft_wrap=True)


PER_STEP_AUTO_MAX = 3
"""Up to this many profiled steps the per-step tables are printed (as they always were);
beyond, one table across steps, and the per-step tables with ``--per-step``."""
MAX_PROBLEM_LINES = 10
"""Missing or unreadable reports listed one by one; the rest are counted (summary.md lists
every one): at 1,000 ranks a lost node is hundreds of reports."""


def print_summary(summary: Summary, console: Console, per_step: Optional[bool] = None) -> None:
    """Print the summary. ``per_step``: the per-step tables (None: only when the run has at
    most :data:`PER_STEP_AUTO_MAX` profiled steps; then there is no across-steps table)."""
    print_findings(summary, console, per_step)
    print_files(summary, console)


def print_findings(summary: Summary, console: Console, per_step: Optional[bool] = None,
                   running_note: Optional[str] = None) -> None:
    """Everything :func:`print_summary` prints but the written files and the next steps:
    printed while the files are written. ``running_note``: where the run of a manifest still
    marked running stands (``verlprof status``'s line; the caller may know it)."""
    s = summary
    if s.manifest.running:  # rewritten as the job runs; its end, or verlprof collect, ends it
        _line(console, running_note or "the job is still running: this manifest lists the "
                                       "reports placed so far")
    if not s.records:
        console.print(Text("no phase ranges found in any report", style="yellow"))
    steps = profiled_steps(s.rows)
    show_steps = len(steps) <= PER_STEP_AUTO_MAX if per_step is None else per_step
    if len(steps) > PER_STEP_AUTO_MAX or (per_step is False and len(steps) > 1):
        _print_table(console, across_table(s.rows, s.stragglers), "  (ms)")
        if not show_steps:
            _line(console, "per step and rank: verlprof report --per-step, or summary.md")
    if show_steps:
        tables = step_tables(s.rows, s.spreads, s.stragglers, s.steps,
                             per_rank=per_rank_fits(s.rows))
        if tables and _width(tables[0]) > console.width:
            tables = step_tables(s.rows, s.spreads, s.stragglers, s.steps, per_rank=False)
        for st in tables:
            _print_table(console, st, "  (ms)")
    if s.anatomy is not None and s.anatomy.steps:
        _print_anatomy(console, s, show_steps)
    rule = (f" (> {s.threshold:g}× the other ranks' median and ≥ {s.min_excess_ms:g} ms "
            "slower)")
    if s.stragglers and show_steps and len(s.stragglers) <= MAX_STRAGGLER_LINES:
        console.print(Text.assemble(("stragglers", "bold red"), rule + ":"))
        for x in s.stragglers:
            _line(console, f"  step {x.step} {x.group} {x.name}: rank {x.rank}"
                  f"{' on ' + x.host if x.host else ''} {ms(x.duration_ns)} ms vs "
                  f"{ms(x.others_median_ns)} ms ({x.ratio:.2f}×)")
    elif s.stragglers:
        by_rank = stragglers_by_rank(s.stragglers)
        console.print(Text.assemble(("stragglers", "bold red"), rule + f": {len(s.stragglers)}"
                                    f" in {len({x.step for x in s.stragglers})} step(s), "
                                    f"{len(by_rank)} rank × phase:"))
        for g in by_rank[:MAX_STRAGGLER_LINES]:
            _line(console, f"  {g.group} {g.name}: rank {g.rank}"
                  f"{' on ' + g.host if g.host else ''} in {len(g.steps)} step(s) "
                  f"({step_list(g.steps)}), up to {g.worst_ratio:.2f}×")
        if len(by_rank) > MAX_STRAGGLER_LINES:
            _line(console, f"  … and {len(by_rank) - MAX_STRAGGLER_LINES} more "
                  "(summary.md lists every one)")
    elif s.records:
        _line(console, f"no stragglers (threshold {s.threshold:g}×, min excess "
              f"{s.min_excess_ms:g} ms)")
    if s.missing:
        console.print(Text(f"{len(s.missing)} report(s) missing, incomplete, unreadable or "
                           "skipped:", style="bold yellow"))
        for p in s.missing[:MAX_PROBLEM_LINES]:
            _line(console, f"  {p.kind}: step {','.join(map(str, p.steps))} {p.group} rank "
                  f"{p.rank} {p.component} ({p.path}): {p.reason}")
        if len(s.missing) > MAX_PROBLEM_LINES:
            _line(console, f"  … and {len(s.missing) - MAX_PROBLEM_LINES} more (summary.md "
                  "lists every one)")
    for warning in s.warnings:
        _line(console, warning, lead=Text("warning: ", style="yellow"))
    for note in s.notes:
        _line(console, f"note: {note}")


def _print_anatomy(console: Console, s: Summary, per_step: bool) -> None:
    """Where each step went (≤ 80 columns; its names are visible already, never markup)."""
    assert s.anatomy is not None
    for text in console_lines(s.anatomy, per_step):
        console.print(Text(text, style="bold" if not text.startswith(" ") else ""),
                      soft_wrap=True)


def print_files(summary: Summary, console: Console) -> None:
    """The written files (``summary.paths``) and what to open next."""
    s = summary
    for name, path in s.paths.items():
        _line(console, f"{name}: {path}")
    for hint in next_steps(s):  # its paths are already shell words (safe_text.shell_quote)
        _line(console, hint)


def _print_table(console: Console, st: StepTable, unit: str) -> None:
    if _width(st) > console.width and st.numeric_from > 0:
        _print_keyed(console, st, unit)
        return
    table = Table(title=st.title + unit, title_justify="left", header_style="bold")
    widths = _widths(st)
    spare = console.width - (sum(widths[st.numeric_from:]) + 3 * len(widths) + 1)
    text_max = _share(widths[:st.numeric_from], spare)
    for i, head in enumerate(st.header):
        numeric = i >= st.numeric_from
        table.add_column(head, justify="right" if numeric else "left", no_wrap=True,
                         min_width=widths[i] if numeric else None,
                         max_width=None if numeric else text_max[i])
    for line in st.rows:
        table.add_row(*[Text(visible(c.text), style="bold red" if c.flagged else "")
                        for c in line])
    console.print(table)


def _print_keyed(console: Console, st: StepTable, unit: str) -> None:
    """A table wider than the terminal: each row's group and phase become a number, and a
    legend above the table names them whole. Cutting names instead would make
    ``compute_log_prob`` and ``compute_values`` the same ``comp…``; dropping columns would lose
    the stragglers. The numbers keep borders light (no vertical lines) to fit 80 columns."""
    from rich import box

    _line(console, st.title + unit)
    names, group = [], ""
    for line in st.rows:
        text = [c.text for c in line[:st.numeric_from]]
        group = text[0] or group  # a group is named on its first row only
        names.append(" ".join([group, *text[1:]]))
    key_width = len(str(len(names)))
    for n, name in enumerate(names, 1):
        _line(console, f"  {n:>{key_width}}  {name}")
    # one space between columns (the box's), none around them: ~70 columns for the widest
    table = Table(box=box.SIMPLE_HEAD, header_style="bold", padding=(0, 0), pad_edge=False,
                  show_edge=False)
    table.add_column("#", justify="right", no_wrap=True, min_width=key_width)
    widths = _widths(st)
    for i, head in enumerate(st.header[st.numeric_from:], st.numeric_from):
        table.add_column(head, justify="right", no_wrap=True, min_width=widths[i])
    for n, line in enumerate(st.rows, 1):
        table.add_row(Text(str(n)), *[Text(visible(c.text), style="bold red" if c.flagged
                                           else "") for c in line[st.numeric_from:]])
    console.print(table)


def _widths(st: StepTable) -> List[int]:
    """Characters each column needs: the visible form of its cells, as printed."""
    return [max([len(h)] + [len(visible(line[i].text)) for line in st.rows])
            for i, h in enumerate(st.header)]


def _width(st: StepTable) -> int:
    """Characters the table needs with no column shrunk (borders and padding included)."""
    widths = _widths(st)
    return sum(widths) + 3 * len(widths) + 1


def _share(wanted: List[int], spare: int) -> List[int]:
    """Widths for the text columns: as wanted when they fit in ``spare``, else shrunk in
    proportion (never below 6)."""
    if sum(wanted) <= spare:
        return wanted
    total = max(1, sum(wanted))
    return [max(6, w * spare // total) for w in wanted]
