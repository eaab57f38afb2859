"""``verlprof report`` of an unchanged run prints what it printed before without running again
(:mod:`verlprof.report.warm`, issue 17): the same bytes as a full run, and a full run again as
soon as a report, the manifest, an option, a summary file or the terminal changes."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest

from tests.torch_runs import write_torch_run, write_torch_trace
from verlprof.cli import main
from verlprof.report import warm
from verlprof.report.progress import Progress


def _report(capsys, *argv):
    assert main(["report", *argv]) == 0
    return capsys.readouterr().out


def test_second_run_prints_the_first_runs_output_from_the_record(tmp_path, capsys):
    write_torch_run(tmp_path)
    cold = _report(capsys, str(tmp_path), "--no-picture")
    assert "900.0!" in cold and "summary.md:" in cold
    assert warm.replay([str(tmp_path), "--no-picture"]) == 0  # replayed, not run
    out, err = capsys.readouterr()
    assert out == cold
    assert err == "verlprof: reading reports: 3/3 done in 0.0 s\n"
    assert _report(capsys, str(tmp_path), "--no-picture") == cold  # through the CLI


def test_any_change_runs_the_report_again(tmp_path, capsys):
    reports = write_torch_run(tmp_path)
    args = [str(tmp_path), "--no-picture"]
    cold = _report(capsys, *args)
    assert warm.replay([str(tmp_path), "--no-picture", "--threshold", "20"]) is None
    other = _report(capsys, *args, "--threshold", "20")  # another option: no straggler
    assert "900.0!" not in other and "no stragglers" in other
    assert warm.replay([*args, "--threshold", "20"]) == 0
    capsys.readouterr()
    assert warm.replay(args) is None  # that run rewrote the summary files
    assert _report(capsys, *args) == cold

    write_torch_trace(reports[2], 400.0)  # a report rewritten
    assert warm.replay(args) is None
    again = _report(capsys, *args)
    assert "400.0!" in again and "900.0" not in again

    os.remove(tmp_path / "summary" / "summary.csv")  # a summary file deleted
    assert warm.replay(args) is None
    assert _report(capsys, *args) == again
    assert os.path.isfile(tmp_path / "summary" / "summary.csv")

    os.makedirs(tmp_path / "late")  # a new folder: perhaps another run, or a stray report
    assert warm.replay(args) is None


def test_terminal_settings_are_part_of_the_key(tmp_path, capsys, monkeypatch):
    write_torch_run(tmp_path)
    _report(capsys, str(tmp_path), "--no-picture")
    assert warm.replay([str(tmp_path), "--no-picture"]) == 0
    capsys.readouterr()
    monkeypatch.setenv("NO_COLOR", "1")
    assert warm.replay([str(tmp_path), "--no-picture"]) is None
    monkeypatch.setenv("VERLPROF_MEMORY_BUDGET", "1G")
    assert warm.replay([str(tmp_path), "--no-picture"]) is None


def test_memory_budget_option_is_replayed(tmp_path, capsys, monkeypatch):
    from verlprof.report.budget import BUDGET_ENV

    write_torch_run(tmp_path)
    monkeypatch.delenv(BUDGET_ENV, raising=False)
    args = [str(tmp_path), "--no-picture", "--memory-budget", "1G"]
    cold = _report(capsys, *args)
    monkeypatch.delenv(BUDGET_ENV)  # the option set it in this process; the next starts afresh
    assert warm.replay(args) == 0
    assert capsys.readouterr().out == cold


def test_a_run_with_an_unreadable_report_is_not_kept(tmp_path, capsys):
    reports = write_torch_run(tmp_path)
    with open(reports[1], "wb") as handle:
        handle.write(b"not gzip")
    assert main(["report", str(tmp_path), "--no-picture"]) == 0
    assert "unreadable" in capsys.readouterr().out
    assert warm.replay([str(tmp_path), "--no-picture"]) is None
    assert not os.path.exists(tmp_path / "summary" / warm.RECORD_NAME)


def test_a_damaged_record_is_ignored(tmp_path, capsys):
    write_torch_run(tmp_path)
    cold = _report(capsys, str(tmp_path), "--no-picture")
    (tmp_path / "summary" / warm.RECORD_NAME).write_text("{not json")
    assert warm.replay([str(tmp_path), "--no-picture"]) is None
    assert _report(capsys, str(tmp_path), "--no-picture") == cold


@pytest.mark.parametrize(("argv", "found"), [
    (["d"], "d"), (["d", "--threshold", "2", "--per-step", "--no-picture"], "d"),
    (["--jobs", "2", "d", "--min-excess-ms", "5", "--memory-budget", "1G"], "d"),
    (["d", "--run", "x"], None), (["d", "--help"], None), (["d", "--threshold=2"], None),
    (["d", "e"], None), ([], None), (["d", "--jobs"], None), (["-h"], None),
])
def test_only_plainly_written_arguments_are_replayed(argv, found):
    assert warm.output_dir_of(argv) == found


def test_only_the_progress_on_stderr_is_replayed():
    assert warm.progress_reads(["verlprof: reading reports: 1/4 (a.nsys-rep)\n",
                                "verlprof: reading reports: 4/4 done in 1.2 s\n"]) == [4]
    assert warm.progress_reads(["verlprof: report: 1 report file(s) under x are in no "
                                "manifest\n"]) is None
    bar = io.StringIO()
    bar.isatty = lambda: True  # type: ignore[method-assign]
    with Progress("reading reports", 2, stream=bar) as progress:  # a terminal's live bar
        progress.advance("a.nsys-rep")
        progress.advance("b.nsys-rep")
    assert "\x1b[" in bar.getvalue()
    assert warm.progress_reads([bar.getvalue()]) == [None]  # it leaves nothing to replay
    warned = bar.getvalue().replace("\r", "\rwarning: something\n\r", 1)
    assert warm.progress_reads([warned]) is None


def test_the_cli_replays_without_importing_rich_and_prints_the_same(tmp_path):
    write_torch_run(tmp_path)
    code = ("import sys\nfrom verlprof.cli import main\nrc = main(sys.argv[1:])\n"
            "sys.stderr.write('rich imported: %s\\n' % ('rich' in sys.modules))\nsys.exit(rc)")

    def run():
        done = subprocess.run([sys.executable, "-c", code, "report", str(tmp_path)],
                              capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
        assert done.returncode == 0, done.stderr
        return done.stdout, done.stderr

    cold, cold_err = run()
    assert "rich imported: True" in cold_err and "timeline.png:" in cold
    again, again_err = run()
    assert again == cold
    assert "rich imported: False" in again_err
