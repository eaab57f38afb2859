"""The summary in the terminal (rich): per-step tables, stragglers, problems, written files."""

from __future__ import annotations

from typing import List

from rich.console import Console
from rich.table import Table

from verlprof.report.findings import Summary
from verlprof.report.matrix import StepTable, ms, step_tables
from verlprof.report.next_steps import next_steps


def print_summary(summary: Summary, console: Console) -> None:
    s = summary
    if not s.records:
        console.print("[yellow]no phase ranges found in any report[/yellow]")
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
            table.add_row(*[f"[bold red]{c.text}[/bold red]" if c.flagged else c.text
                            for c in line])
        console.print(table)
    if s.stragglers:
        console.print(f"[bold red]stragglers[/bold red] (> {s.threshold:g}× the other ranks' "
                      f"median and ≥ {s.min_excess_ms:g} ms slower):")
        for x in s.stragglers:
            console.print(f"  step {x.step} {x.group} {x.name}: rank {x.rank}"
                          f"{' on ' + x.host if x.host else ''} {ms(x.duration_ns)} ms vs "
                          f"{ms(x.others_median_ns)} ms ({x.ratio:.2f}×)", highlight=False,
                          markup=False)
    elif s.records:
        console.print(f"no stragglers (threshold {s.threshold:g}×, min excess "
                      f"{s.min_excess_ms:g} ms)", highlight=False)
    if s.missing:
        console.print(f"[bold yellow]{len(s.missing)} report(s) missing, incomplete or "
                      "unreadable:[/bold yellow]")
        for p in s.missing:
            steps = ",".join(map(str, p.steps))
            console.print(f"  {p.kind}: step {steps} {p.group} rank {p.rank} {p.component} "
                          f"({p.path}): {p.reason}", highlight=False, markup=False)
    for note in s.notes:
        console.print(f"note: {note}", highlight=False, markup=False)
    for name, path in s.paths.items():
        console.print(f"{name}: {path}", highlight=False, markup=False)
    for hint in next_steps(s):
        console.print(hint, highlight=False, markup=False, soft_wrap=True)


def _widths(st: StepTable) -> List[int]:
    return [max([len(h)] + [len(line[i].text) for line in st.rows])
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
