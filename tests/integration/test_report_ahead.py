"""``verlprof report`` starts its first ``nsys export`` before the rest of it loads
(verlprof.report.export_ahead, verlprof.backends.nsys.cli.export_ahead), on real nsys reports: the
reader joins the export started ahead (one export, its result or its error), and a cold
report with it prints and writes what the report without it does."""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from tests.helpers import report_main, require_nsys
from verlprof.backends.nsys import cli as nsys_cli
from verlprof.backends.nsys.cli import NsysExportError, export_ahead, export_sqlite
from verlprof.report import summarize

FIXTURE = Path(__file__).resolve().parents[1] / "docs" / "fixtures" / "quickstart_run"


@pytest.fixture()
def run_dir(tmp_path):
    require_nsys()
    out = tmp_path / "run"
    shutil.copytree(FIXTURE, out)
    for path in out.rglob("*.sqlite"):
        path.unlink()
    return out


def test_reader_joins_the_export_started_ahead(run_dir):
    report = next(run_dir.rglob("*.nsys-rep"))
    export_ahead(report, 120.0)
    export_ahead(report, 120.0)  # asked twice: one export
    assert list(nsys_cli._AHEAD) == [str(nsys_cli.sqlite_path_for(report))]
    out = export_sqlite(report, 120.0)
    assert out.is_file() and nsys_cli._AHEAD == {}
    assert not [p for p in report.parent.iterdir() if p.name.endswith(".tmp.sqlite")]
    broken = run_dir / "broken.nsys-rep"
    broken.write_bytes(b"not a report")
    export_ahead(broken, 120.0)
    with pytest.raises(NsysExportError, match="broken.nsys-rep"):
        export_sqlite(broken, 120.0)  # the error of the export started ahead


def test_cold_report_with_exports_ahead_prints_what_it_did_before(run_dir, tmp_path, capsys):
    plain = tmp_path / "plain"
    shutil.copytree(run_dir, plain)
    console = Console(file=io.StringIO(), width=200)
    expected = summarize(str(plain), console=console, progress=False)
    assert report_main([str(run_dir), "--no-trace"]) == 0
    # the report's own lines, less the clocks' error bound the trace's line states
    printed = "".join(line for line in capsys.readouterr().out.splitlines(keepends=True)
                      if not line.startswith(("clocks:", "clocks aligned")))
    table = console.file.getvalue().replace(str(plain), str(run_dir))
    assert printed.replace(" ", "") == table.replace(" ", "")  # same tables, same lines
    for name, path in expected.paths.items():
        mine = run_dir / "summary" / name
        if name.endswith((".csv", ".md")):
            assert mine.read_text() == Path(path).read_text().replace(str(plain), str(run_dir))
        assert os.path.getsize(mine) > 0
    assert nsys_cli._AHEAD == {}
