"""The trace's NVTX ranges read from the export's pages (verlprof/trace/nvtx_pages.py) give the
same packets as the SQLite path: an export whose names all come through ``StringIds`` (as
nsys writes them), many ranges over several threads, domains and names, equal starts across
chunk boundaries, marks, ranges left open, the window and step ranges; and an inline name
makes the trace fall back to SQLite, the part rewound, with the same packets."""

from __future__ import annotations

import os
import sqlite3

import pytest

from tests.trace_reader import decode
from tests.unit.test_report_readers import MS, make_sqlite
from verlprof.backends.nsys.sqlite_pages import NotPlain
from verlprof.manifest import Manifest, ReportEntry, write_manifest
from verlprof.trace import nsys_events, nvtx_pages
from verlprof.trace.build import write_trace
from verlprof.trace.tracks import Filters

GROUP = "g"


def _packets(path: str) -> list:
    with open(path, "rb") as handle:
        data, at, out = handle.read(), 0, []
    while at < len(data):
        assert data[at] == 0x0A
        at, size, shift = at + 1, 0, 0
        while True:
            byte = data[at]
            at, size, shift = at + 1, size | (byte & 0x7F) << shift, shift + 7
            if byte < 0x80:
                break
        out.append(data[at:at + size])
        at += size
    return out


def _run(out: str, inline: bool) -> str:
    """A run of one nsys report: the readers' test export, its names moved to StringIds,
    6,000 more ranges, and a last one named inline when ``inline``."""
    rel = os.path.join("r", "w.nsys-rep")
    full = os.path.join(out, rel)
    os.makedirs(os.path.dirname(full))
    open(full, "wb").close()
    export = full[: -len(".nsys-rep")] + ".sqlite"
    make_sqlite(export, cuda=False)
    conn = sqlite3.connect(export)
    rows = []
    for i in range(6000):  # three threads, two domains, 7 names; starts repeat in pairs
        start = 2000 * MS + (i // 2) * 1000
        rows.append((start, start + 500 + i % 3 * 100, 59 if i % 5 else 60, 100 + i % 7,
                     i % 2, (4242 << 24) | (4242 + i % 3)))
    rows.append((2100 * MS, None, 34, 101, 0, (4242 << 24) | 4242))  # a mark
    rows.append((2200 * MS, 2300 * MS, 59, 300, 1, (4242 << 24) | 4242))  # step/3
    conn.executemany("INSERT INTO StringIds VALUES (?, ?)",
                     [(100 + k, f"name {k}") for k in range(7)] + [(300, "step/3")])
    conn.executemany("INSERT INTO NVTX_EVENTS (start, end, eventType, textId, domainId, "
                     "globalTid) VALUES (?, ?, ?, ?, ?, ?)", rows)
    conn.execute("INSERT INTO StringIds SELECT 1000 + rowid, text FROM NVTX_EVENTS WHERE "
                 "text IS NOT NULL AND eventType != 75")
    conn.execute("UPDATE NVTX_EVENTS SET textId = 1000 + rowid, text = NULL WHERE "
                 "text IS NOT NULL AND eventType != 75")
    if inline:  # the last row, met after pages were written
        conn.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, domainId, "
                     "globalTid) VALUES (?, ?, 59, 'inline', 0, ?)",
                     (2400 * MS, 2500 * MS, (4242 << 24) | 4242))
    conn.commit()
    conn.close()
    os.utime(full, ns=(1, 1))
    entry = ReportEntry(steps=(1,), group=GROUP, rank=0, component=GROUP, backend="nsys",
                        path=rel, status="ok")
    write_manifest(Manifest(tool="nsys", output_dir=out, step_windows=((1,),),
                            reports=(entry,), groups={GROUP: 1}), out)
    return out


class _Refused:
    def __init__(self, *_):
        raise NotPlain("the SQLite path, for comparison")


@pytest.mark.parametrize("chunk_bytes", [512, 1 << 20])
@pytest.mark.parametrize("filters", [Filters(), Filters(min_duration_ns=550)])
def test_pages_give_the_packets_sqlite_gives(tmp_path, monkeypatch, chunk_bytes, filters):
    run = _run(str(tmp_path / "run"), inline=False)
    monkeypatch.setattr(nvtx_pages, "CHUNK_BYTES", chunk_bytes)  # 512: a page a chunk
    monkeypatch.setattr(nsys_events._Encoder, "rows", None)  # the pages, or it fails
    pages = write_trace(run, out_path=str(tmp_path / "pages.pftrace"), filters=filters)
    monkeypatch.undo()
    monkeypatch.setattr(nsys_events, "NvtxPages", _Refused)
    sql = write_trace(run, out_path=str(tmp_path / "sql.pftrace"), filters=filters)
    assert sorted(_packets(pages.path)) == sorted(_packets(sql.path))
    assert pages.written == sql.written
    trace = decode(pages.path)
    rank0 = trace.process_named("g rank 0")
    names = [s.name for s in trace.slices_of_process(rank0)]
    assert names[:3] == ["VERLPROF_CAPTURE", "actor/compute_log_prob", "actor/update_actor"]
    assert "step/3" in names and "actor/never_ended" not in names
    assert len(names) == (6006 if filters.min_duration_ns == 0 else 4006)
    marks = [i[0] for t, items in trace.instants.items() if trace.process_of(t) == rank0
             for i in items]
    assert marks == ["name 1"]


def test_an_inline_name_falls_back_to_sqlite_from_a_clean_part(tmp_path, monkeypatch):
    run = _run(str(tmp_path / "run"), inline=True)
    monkeypatch.setattr(nvtx_pages, "CHUNK_BYTES", 512)  # the inline row is met mid-way
    mixed = write_trace(run, out_path=str(tmp_path / "mixed.pftrace"))
    monkeypatch.setattr(nsys_events, "NvtxPages", _Refused)
    sql = write_trace(run, out_path=str(tmp_path / "sql.pftrace"))
    assert sorted(_packets(mixed.path)) == sorted(_packets(sql.path))
    assert mixed.written == sql.written
    assert mixed.written.slices == 6007


def test_the_report_writes_the_trace_once_and_leaves_a_large_run_to_verlprof_trace(
        tmp_path, monkeypatch, capsys):
    from verlprof.trace import cli

    run = _run(str(tmp_path / "run"), inline=False)
    trace = os.path.join(run, "summary", "trace.pftrace")
    cli.trace_for_report(run)
    assert "6,006 ranges" in capsys.readouterr().out
    written = os.stat(trace).st_mtime_ns
    cli.trace_for_report(run)  # nothing changed: kept
    assert "newer than the run's reports: kept" in capsys.readouterr().out
    assert os.stat(trace).st_mtime_ns == written
    os.utime(os.path.join(run, "manifest.json"), ns=(written + 10**9, written + 10**9))
    cli.trace_for_report(run)  # the manifest changed: written again
    assert "6,006 ranges" in capsys.readouterr().out
    os.unlink(trace)
    monkeypatch.setattr(cli, "REPORT_TRACE_LIMIT_BYTES", -1)  # its report file is empty
    cli.trace_for_report(run)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("trace: not written by verlprof report for reports of 0 MB")
    assert f"`verlprof trace {run}` writes it" in lines[0] and lines[1].startswith("  clocks")
    assert not os.path.exists(trace)
