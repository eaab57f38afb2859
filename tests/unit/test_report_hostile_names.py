"""Every output of ``verlprof report`` over hostile names (issue 19, "names are data").

One hypothesis property per renderer: a name drawn from :mod:`tests.hostile` (markup, HTML,
formulas, Markdown, terminal codes, control and bidi characters, lone surrogates, bytes that
were not UTF-8, empty, very long) is put in every place a report or a manifest puts text (a
role, a phase, a group, a host, a report path, a reason); the renderer does not raise, and the
name's text appears literally, in the escaped form of that medium, in what it writes.
"""

from __future__ import annotations

import csv
import io
import json
import re
from typing import List

import pytest
from hypothesis import HealthCheck, given, settings
from markdown_it import MarkdownIt
from rich.console import Console

from tests.hostile import CRAFTED, names
from tests.unit.test_safe_text import evaluates, hidden
from verlprof.manifest import Manifest, ReportEntry
from verlprof.report.console import print_summary
from verlprof.report.files import render_md, write_csv
from verlprof.report.model import LoadResult, PhaseRecord, Problem, StepSpan
from verlprof.report.names import records_with_stand_ins
from verlprof.report.next_steps import next_steps
from verlprof.report.summary import analyse
from verlprof.report.timeline import build_timeline
from verlprof.report.timeline_html import render_html
from verlprof.report.timeline_png import label, lane_lines, write_png
from verlprof.report.timeline_steps import lane_name, write_steps_png
from verlprof.safe_text import (
    csv_raw,
    md_text,
    shell_quote,
    stand_in,
    visible,
    without_surrogates,
)

MS = 1_000_000
T0 = 1_790_000_000 * 10**9
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def shown_name(name: str) -> str:
    """What a name looks like in every output: its stand-in, or the name itself (raw; each
    renderer still escapes it for its medium)."""
    return stand_in(name) or name


def summary_with(name: str, out: str = "/tmp/out"):
    """A summary whose role, phase, group, host, report path and problem reason hold ``name``
    (records as ``verlprof report`` loads them: unshowable names already stand-ins)."""
    records = []
    for rank, slow in ((0, 100), (1, 100), (2, 900)):
        records += [
            PhaseRecord(1, "critic", rank, "critic", name, T0, T0 + slow * MS, host=name,
                        report_path=f"step0001/critic/rank{rank}/{name}"),
            PhaseRecord(1, name, rank, name, "update", T0 + 5 * MS, T0 + 50 * MS, host="h"),
        ]
    records, warnings = records_with_stand_ins(records)
    problem = Problem("unreadable", (1,), name, 3, name, f"{name}.pt.trace.json.gz",
                      f"cannot read {name}")
    loaded = LoadResult(records=tuple(records), steps=(StepSpan(1, T0, T0 + 900 * MS,
                                                                "controller"),),
                        windows=(), problems=(problem,), notes=(f"note about {name}",),
                        warnings=tuple(warnings))
    entry = ReportEntry(steps=(1,), group="critic", rank=2, component="critic", backend="torch",
                        path=f"step0001/critic/rank2/{name}.pt.trace.json.gz", status="ok",
                        host=name)
    manifest = Manifest(tool="torch", output_dir=out, step_windows=((1,),), reports=(entry,))
    summary = analyse(out, manifest, loaded, threshold=2.0, min_excess_ms=1)
    summary.paths["timeline.html"] = f"{out}/summary/timeline.html"
    return summary


@given(names)
@SETTINGS
def test_console_prints_the_visible_name_and_no_markup_or_terminal_code(name):
    console = Console(file=io.StringIO(), width=4000, color_system=None)
    print_summary(summary_with(name), console)
    text = console.file.getvalue()
    shown = visible(shown_name(name))
    assert f"critic/{shown}" in text or shown in text  # the phase row (flagged: straggler)
    assert f"cannot read {visible(name)}" in text and f"note: note about {visible(name)}" in text
    assert not hidden(text.replace("\n", ""))  # no escape sequence, no bidi control


def test_console_shows_brackets_as_written():
    """The issue's two cases: ``[/]`` crashed rich, ``attn[mask]`` printed as ``attn``."""
    for name in ("[/]", "attn[mask]", "[bold red]x[/bold red]"):
        console = Console(file=io.StringIO(), width=300, color_system=None)
        print_summary(summary_with(name), console)
        assert f"critic/{name}" in console.file.getvalue()


MD = MarkdownIt("commonmark").enable("table").enable("strikethrough")


OURS = {("code_inline", "×n"), ("link_open", "timeline.html"), ("image", "timeline.png"),
        ("image", "timeline_steps.png")}
"""The only code span, link and image summary.md has: its own."""


def _texts(tokens) -> List[str]:
    """The text of every inline run; fails on HTML, or a code span, link or image not ours."""
    out = []
    for token in tokens:
        assert token.type != "html_block", token.content
        if token.type != "inline":
            continue
        for child in token.children:
            assert child.type not in ("html_inline", "autolink"), child.content
            if child.type in ("code_inline", "link_open", "image"):
                assert (child.type, child.content if child.type == "code_inline"
                        else child.attrs.get("href", child.attrs.get("src"))) in OURS
        out.append("".join(c.content for c in token.children if c.type == "text"))
    return out


@given(names)
@SETTINGS
def test_markdown_shows_the_visible_name_in_its_cells_and_never_html_a_link_or_code(name):
    md = render_md(summary_with(name))
    texts = _texts(MD.parse(md))
    shown = visible(shown_name(name))
    assert f"critic/{shown}" in texts or shown in texts  # a table cell of its own
    assert visible(name) in texts  # the problem's group and component cells
    assert f"cannot read {visible(name)}" in texts
    assert md_text(f"note about {name}") in md


@given(name=names)
@SETTINGS
def test_csv_has_the_raw_name_and_no_cell_a_spreadsheet_evaluates(name, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("csv") / "summary.csv")
    write_csv(summary_with(name), path)
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert rows and not [c for r in rows for c in r.values() if evaluates(c)]
    raw = without_surrogates(shown_name(name))
    assert raw in {csv_raw(r["phase"]) for r in rows}
    assert without_surrogates(name) in {csv_raw(r["host"]) for r in rows}


def _payload(page: str) -> dict:
    script = re.search(r"<script>(.*)</script>", page, re.S).group(1)
    return json.loads(re.search(r"const D = (.*?);\n", script).group(1))


@given(names)
@SETTINGS
def test_html_carries_names_as_json_text_and_builds_no_markup_from_them(name):
    summary = summary_with(name)
    data = build_timeline(summary.records, summary.steps, summary.windows, summary.stragglers,
                          summary.t0_ns)
    page = render_html(data, title=f"verlprof timeline: {name}")
    assert page.count("<script") == 1 and page.count("</script>") == 1
    assert "innerHTML" not in page and "insertAdjacentHTML" not in page
    payload = _payload(page)
    shown = visible(shown_name(name))
    assert [shown, payload["phases"][0][1]] in payload["phases"] or \
        any(p[0] == shown for p in payload["phases"])
    assert f"{visible(shown_name(name))} r0" in payload["lanes"]
    assert any(label.startswith(f"critic/{shown} step 1") for label in
               (b[4] for b in payload["bars"]))
    head = page.split("<script>")[0]
    import html as html_lib

    assert f"<title>verlprof timeline: {html_lib.escape(visible(name))}</title>" in head
    assert not hidden(page.replace("\n", ""))


@given(name=names)
@settings(SETTINGS, max_examples=25)  # ~0.1 s a picture
def test_png_draws_the_visible_name_as_text(name, tmp_path_factory):
    from unittest import mock

    from PIL import ImageDraw

    drawn: List[str] = []
    original = ImageDraw.ImageDraw.text

    def record(self, xy, text, *args, **kwargs):
        drawn.append(text)
        return original(self, xy, text, *args, **kwargs)

    summary = summary_with(name)
    data = build_timeline(summary.records, summary.steps, summary.windows, summary.stragglers,
                          summary.t0_ns)
    path = str(tmp_path_factory.mktemp("png") / "t.png")
    steps_path = str(tmp_path_factory.mktemp("png") / "s.png")
    with mock.patch.object(ImageDraw.ImageDraw, "text", record):
        write_png(data, path, title=f"verlprof timeline: {name}")
        write_steps_png(summary.spreads, summary.stragglers, data.colours, steps_path,
                        title=f"verlprof phases by step: {name}")
    for written in (path, steps_path):
        with open(written, "rb") as handle:
            assert handle.read(8) == b"\x89PNG\r\n\x1a\n"
    assert label(shown_name(name), "legend") in drawn
    for lane in (f"{shown_name(name)} r0", lane_name("critic", "critic", shown_name(name))):
        assert all(line in drawn for line in lane_lines(lane))  # whole, on one or two lines
    assert label(f"verlprof timeline: {name}", "title") in drawn
    assert label(f"verlprof phases by step: {name}", "title") in drawn
    assert not [t for t in drawn if hidden(t)]


@pytest.mark.parametrize("name", CRAFTED, ids=range(len(CRAFTED)))
def test_next_steps_quote_paths_as_visible_shell_words(name):
    out = f"/tmp/{name}" if "\x00" not in name and len(name) < 1000 else "/tmp/x"
    lines = next_steps(summary_with(name, out=out))
    text = "\n".join(lines)
    assert shell_quote(f"{out}/summary/timeline.html") in text
    assert not hidden(text.replace("\n", ""))


# -- readers: a name that is not UTF-8 is decoded with replacement, never an unreadable report


def test_a_torch_trace_with_a_name_that_is_not_utf8_is_read(tmp_path):
    import gzip

    from verlprof.backends.torch.read import read_torch_trace

    event = b'{"ph": "X", "cat": "user_annotation", "name": "actor/up\xffdate", "ts": 1, "dur": 2}'
    path = tmp_path / "t.pt.trace.json.gz"
    with gzip.open(path, "wb") as handle:
        handle.write(b'{"baseTimeNanoseconds": 1790000000000000000, "traceEvents": [' + event
                     + b"]}")
    data = read_torch_trace(str(path))
    assert data.error is None and [r.name for r in data.ranges] == ["actor/up\ufffddate"]


def test_an_nsys_export_with_a_name_that_is_not_utf8_is_read(tmp_path):
    import sqlite3

    from tests.unit.test_report_readers import make_sqlite
    from verlprof.backends.nsys.read import read_nsys_sqlite

    path = make_sqlite(tmp_path / "x.sqlite", cuda=False)
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, domainId) "
                 "VALUES (700000000, 800000000, 59, CAST(? AS TEXT), 1)",
                 (b"critic/val\xff\xfeues",))
    conn.commit()
    conn.close()
    names = {r.name for r in read_nsys_sqlite(path).ranges}
    assert "critic/val\ufffd\ufffdues" in names


def test_a_torch_trace_with_an_unescaped_quote_in_a_name_is_read(tmp_path):
    """torch's trace writer puts a ``record_function`` label between quotes as it is: a label
    with a ``"`` made the trace invalid JSON (and the report unreadable)."""
    from verlprof.backends.torch.read import read_torch_trace

    lines = ['{', '  "baseTimeNanoseconds": 1790000000000000000,', '  "traceEvents": [']
    for i, name in enumerate(['critic/values<img src=x onerror="alert(1)">', 'actor/a"b"',
                              'actor/ok', 'actor/esc\\u001b']):
        lines += ['  {', '    "ph": "X",', '    "cat": "user_annotation",',
                  f'    "name": "{name}",', f'    "ts": {i * 10}, "dur": 5', '  },']
    lines[-1] = '  }'
    path = tmp_path / "kineto.pt.trace.json"
    path.write_text("\n".join(lines + ["  ]", "}"]))
    data = read_torch_trace(str(path))
    assert data.error is None
    assert [r.name for r in data.ranges] == [
        'critic/values<img src=x onerror="alert(1)">', 'actor/a"b"', "actor/ok",
        "actor/esc\x1b"]


@pytest.mark.parametrize("name", CRAFTED, ids=range(len(CRAFTED)))
def test_the_reading_progress_shows_a_report_name_visibly(name):
    from verlprof.report.progress import Progress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    lines = io.StringIO()
    progress = Progress("reading reports", 3, stream=lines, min_interval_s=0)
    progress.advance(name)
    progress.close()
    assert f"1/3 ({visible(name)})" in lines.getvalue() if name else "1/3" in lines.getvalue()
    assert not hidden(lines.getvalue().replace("\n", ""))
    bar = Progress("reading reports", 2, stream=Terminal())
    with bar:  # the bar's detail column: a name with [/] in it is text, not markup
        bar.advance(name)
        bar.advance(name)
    assert bar.done == 2
