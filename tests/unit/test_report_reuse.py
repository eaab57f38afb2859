"""A second ``verlprof report`` of an unchanged run: reads come from the read cache, the summary
files are kept (they are what would be written), the console output is the same; any change
(a report, an option, a deleted file) reads or writes again. And the report's import path
stays light (issue 17: its fixed cost on small reports)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

from rich.console import Console

from tests.torch_runs import write_torch_run
from verlprof.backends.reading import RawRange, ReportData, StepMark
from verlprof.report import summarize
from verlprof.report.read_cache import CACHE_NAME, ReadCache
from verlprof.report.unchanged import STAMP_NAME


def _report(tmp_path, **kwargs):
    console = Console(file=io.StringIO(), width=160)
    summary = summarize(str(tmp_path), console=console, progress=False, **kwargs)
    return summary, console.file.getvalue()


def _states(paths):
    return {name: (os.path.getsize(p), os.stat(p).st_mtime_ns) for name, p in paths.items()}


def test_second_run_keeps_the_files_and_prints_the_same(tmp_path):
    write_torch_run(tmp_path)
    first, printed = _report(tmp_path)
    assert set(first.paths) == {"summary.csv", "summary.md", "timeline.png", "timeline.html",
                                "timeline_steps.png"}
    before = _states(first.paths)
    second, again = _report(tmp_path)
    assert again == printed and "900.0!" in again
    assert list(second.paths.items()) == list(first.paths.items())
    assert _states(second.paths) == before  # not rewritten


def test_any_change_writes_again(tmp_path):
    write_torch_run(tmp_path)
    first, _ = _report(tmp_path)
    before = _states(first.paths)
    _, printed = _report(tmp_path, threshold=20.0)  # another option: other stragglers
    assert "900.0!" not in printed
    after = _states(first.paths)
    assert after["summary.md"] != before["summary.md"]
    os.remove(first.paths["timeline.png"])  # a file deleted since: all written again
    third, _ = _report(tmp_path, threshold=20.0)
    assert os.path.getsize(third.paths["timeline.png"]) > 0
    fewer, _ = _report(tmp_path, threshold=20.0, picture=False)  # pictures not wanted
    assert set(fewer.paths) == {"summary.csv", "summary.md"}


def test_reads_come_from_the_cache_until_the_report_changes(tmp_path):
    reports = write_torch_run(tmp_path)
    _report(tmp_path)
    cache_file = tmp_path / "summary" / CACHE_NAME
    cached = json.loads(cache_file.read_text())
    name = os.path.relpath(reports[2], tmp_path)
    ranges = cached["reports"][name]["ranges"]
    update = next(r for r in ranges if r[0] == "actor/update_actor")
    update[2] = update[1] + 333_000_000  # what the cache says rank 2 took: 333 ms
    cache_file.write_text(json.dumps(cached))
    _, printed = _report(tmp_path)
    assert "333.0!" in printed and "900.0" not in printed  # read from the cache
    stat = os.stat(reports[2])
    os.utime(reports[2], ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    _, printed = _report(tmp_path)
    assert "900.0!" in printed  # the report changed: read again


def test_read_cache_keeps_good_reads_only(tmp_path):
    report = tmp_path / "a.pt.trace.json.gz"
    report.write_bytes(b"x")
    summary_dir = str(tmp_path / "summary")
    good = ReportData(index=3, ranges=(RawRange("actor/x", 5, 9, kernel_ns=2, kernel_count=1),),
                      marks=(StepMark(1, 4, 10),), window=(1, 20))
    cache = ReadCache(summary_dir, str(tmp_path))
    assert cache.get(str(report), "torch", 3) is None
    cache.put(str(report), "torch", good)
    cache.put(str(tmp_path / "b"), "torch", ReportData(index=4, error="bad"))
    cache.save()
    again = ReadCache(summary_dir, str(tmp_path))
    got = again.get(str(report), "torch", 7)
    assert got is not None and got.index == 7
    assert (got.ranges, got.marks, got.window) == (good.ranges, good.marks, good.window)
    assert again.get(str(report), "nsys", 7) is None  # another reader
    assert again.get(str(report), "torch", 7, window_start_ns=5) is None  # another window
    assert again.get(str(tmp_path / "b"), "torch", 4) is None
    (tmp_path / "summary" / CACHE_NAME).write_text("{not json")
    assert ReadCache(summary_dir, str(tmp_path)).get(str(report), "torch", 3) is None


def test_stamp_and_cache_are_hidden_files_of_the_summary_dir(tmp_path):
    write_torch_run(tmp_path)
    _report(tmp_path)
    hidden = sorted(n for n in os.listdir(tmp_path / "summary") if n.startswith("."))
    assert hidden == sorted([CACHE_NAME, STAMP_NAME])


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
