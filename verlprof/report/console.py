"""The summary in the terminal (rich): per-step tables, stragglers, problems, written files.

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

from verlprof.report.findings import Summary
from verlprof.report.matrix import StepTable, ms, step_tables
from verlprof.report.next_steps import next_steps
from verlprof.safe_text import visible


def _line(console: Console, text: str, style: Optional[str] = None,
          lead: Optional[Text] = None) -> None:
    """One line of data: visible, never markup or highlighting; after ``lead`` (ours)."""
    line = Text(visible(text), style=style or "")
    console.print(Text.assemble(lead, line) if lead is not None else line, soft_wrap=True)


def print_summary(summary: Summary, console: Console) -> None:
    s = summary
    if not s.records:
        console.print(Text("no phase ranges found in any report", style="yellow"))
    tables = step_tables(s.rows, s.spreads, s.stragglers, s.steps)
    if tables and _width(tables[0]) > console.width:
        tables = step_tables(s.rows, s.spreads, s.stragglers, s.steps, per_rank=False)
    for st in tables:
        table = Table(title=st.title + "  (ms)", title_justify="left", header_style="bold")
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
    if s.stragglers:
        console.print(Text.assemble(("stragglers", "bold red"),
                                    f" (> {s.threshold:g}× the other ranks' median and ≥ "
                                    f"{s.min_excess_ms:g} ms slower):"))
        for x in s.stragglers:
            _line(console, f"  step {x.step} {x.group} {x.name}: rank {x.rank}"
                  f"{' on ' + x.host if x.host else ''} {ms(x.duration_ns)} ms vs "
                  f"{ms(x.others_median_ns)} ms ({x.ratio:.2f}×)")
    elif s.records:
        _line(console, f"no stragglers (threshold {s.threshold:g}×, min excess "
              f"{s.min_excess_ms:g} ms)")
    if s.missing:
        console.print(Text(f"{len(s.missing)} report(s) missing, incomplete or unreadable:",
                           style="bold yellow"))
        for p in s.missing:
            steps = ",".join(map(str, p.steps))
            _line(console, f"  {p.kind}: step {steps} {p.group} rank {p.rank} {p.component} "
                  f"({p.path}): {p.reason}")
    for warning in s.warnings:
        _line(console, warning, lead=Text("warning: ", style="yellow"))
    for note in s.notes:
        _line(console, f"note: {note}")
    for name, path in s.paths.items():
        _line(console, f"{name}: {path}")
    for hint in next_steps(s):  # its paths are already shell words (safe_text.shell_quote)
        _line(console, hint)


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
