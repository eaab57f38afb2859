"""A second ``verlprof report`` of the same run prints the same and leaves nothing hidden
behind (it keeps no cache of its own: the nsys exports next to each report do the work); and
the report's import path stays light (issue 17: its fixed cost on small reports)."""

from __future__ import annotations

import io
import os
import subprocess
import sys

from rich.console import Console

from tests.torch_runs import write_torch_run
from verlprof.report import summarize


def _report(tmp_path, **kwargs):
    console = Console(file=io.StringIO(), width=160)
    summary = summarize(str(tmp_path), console=console, progress=False, **kwargs)
    return summary, console.file.getvalue()


def test_second_run_prints_the_same_and_keeps_no_hidden_file(tmp_path):
    write_torch_run(tmp_path)
    first, printed = _report(tmp_path)
    assert set(first.paths) == {"summary.csv", "summary.md", "timeline.png", "timeline.html",
                                "timeline_steps.png"}
    second, again = _report(tmp_path)
    assert again == printed and "900.0!" in again
    assert list(second.paths.items()) == list(first.paths.items())
    assert [n for n in os.listdir(tmp_path / "summary") if n.startswith(".")] == []


HEAVY = ("torch", "ray", "omegaconf", "hydra", "numpy", "yaml", "matplotlib", "pandas",
         "verlprof.plan", "verlprof.config", "verlprof.runtime.controller", "verlprof.worker")


def _imported(code: str):
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys\n"
                          "print('\\n'.join(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True, timeout=120)
    return set(out.stdout.split())


def _heavy(modules):
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


def test_report_import_path_is_light():
    parser_only = _imported("import verlprof.cli\nverlprof.cli._parser()")
    assert _heavy(parser_only) == []
    # the parser of every subcommand: no rich, no Pillow, no readers yet
    assert not {"rich", "PIL", "sqlite3", "verlprof.report.summary"} & parser_only
    report = _imported("import verlprof.report.cli, verlprof.report.summary, "
                       "verlprof.report.load\nfrom verlprof.backends import get_backend\n"
                       "get_backend('nsys').has_reader")
    assert _heavy(report) == []
    assert not {"PIL", "verlprof.report.timeline_png"} & report  # drawn only when written


def test_the_nsys_reader_loads_no_nvtx_emitter():
    """Reading needs the NVTX contract's names, not the ctypes emitter behind them."""
    reader = _imported("import verlprof.backends.nsys.read")
    assert not {"ctypes", "verlprof.backends.nsys.nvtx", "numpy"} & reader
