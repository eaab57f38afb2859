"""Each bench run keeps its rows; the next run of the same command says which verdicts changed.
Fixed rows, no timing."""

import json

import pytest

from benchmarks import __main__ as bench
from benchmarks import history
from benchmarks.common import Result


def _run(started, rows, command=("--only", "p2,p5"), commit="abc1234"):
    return history.RunRecord(started=started, commit=commit, command=command, seconds=700.0,
                             load_start="0.1 0.2 0.3", load_end="1.0 2.0 3.0",
                             rows=tuple(history.row_record(r) for r in rows))


FIRM = Result("C step cost", 7.4, 8.8, samples=[7.36, 7.4, 7.4, 7.43])
CLOSE = Result("P5 whole", 0.96, 1.0, samples=[0.92, 0.96, 0.96, 0.99])
OVER = Result("P5 whole", 0.99, 1.0, samples=[0.93, 0.99, 1.0, 1.04])


def test_a_run_saved_loads_back_as_it_was(tmp_path):
    run = _run("2026-12-02T04:10:12Z", [FIRM, CLOSE, Result("Memory", 1.07, None)])
    path = history.save(run, str(tmp_path))
    assert path.endswith("2026-12-02T041012Z.json")
    assert [p.name for p in tmp_path.iterdir()] == ["2026-12-02T041012Z.json"]  # no temp file
    lines = (tmp_path / "2026-12-02T041012Z.json").read_text().splitlines()
    assert len(lines) == 1 + 6 + 1 + 3 + 1 + 1  # {, six fields, "rows": [, a row a line, ], }
    back = history.load(path)
    assert back == run
    assert back.rows[0].samples == (7.36, 7.4, 7.4, 7.43) and back.rows[2].verdict == "INFO"
    assert back.rows[1].holds == CLOSE.holds and back.rows[2].holds is None


def test_the_previous_run_is_the_latest_earlier_one_of_the_same_command(tmp_path):
    first = _run("2026-12-02T04:00:00Z", [CLOSE])
    other = _run("2026-12-02T04:20:00Z", [CLOSE], command=("--only", "p1"))
    later = _run("2026-12-02T04:40:00Z", [OVER])
    for run in (first, other, later):
        history.save(run, str(tmp_path))
    (tmp_path / "2026-12-02T045000Z.json").write_text("{not json")  # passed over
    now = _run("2026-12-02T05:00:00Z", [CLOSE])
    assert history.previous(now, str(tmp_path)) == later
    assert history.previous(first, str(tmp_path)) is None
    assert history.previous(_run("2026-12-02T05:00:00Z", [CLOSE], command=("--only", "p1")),
                            str(tmp_path)) == other


def test_compare_names_each_changed_row_with_both_verdicts_and_holds():
    before = _run("2026-12-02T04:00:00Z", [FIRM, CLOSE, Result("P4 gone", 1.0, 1.3)])
    after = _run("2026-12-02T04:15:00Z", [FIRM, OVER, Result("P4 new", 1.0, 1.3)],
                 commit="def5678+changes")
    c = history.compare(before, after)
    assert (c.compared, len(c.changed), c.only_before, c.only_after) == \
        (2, 1, ("P4 gone",), ("P4 new",))
    assert c.changed[0].before.verdict == "PASS" and c.changed[0].after.verdict == "WITHIN NOISE"
    assert (c.firm_both, c.firm_changed) == (1, 0)  # the firm row kept its verdict
    assert c.expected == pytest.approx((1 - FIRM.holds) + (1 - CLOSE.holds))
    lines = history.render(before, after, c)
    expected = 2 - FIRM.holds - CLOSE.holds
    assert lines[0].startswith("against 2026-12-02T04:00:00Z (commit abc1234, 700 s): same "
                               f"verdict on 1 of 2 rows (1 changed, {expected:.1f} expected by "
                               "the earlier run's holds); of the 1 rows that held in 90% or more")
    assert lines[0].endswith(", 0 changed")
    assert "the code differs: abc1234 then def5678+changes" in lines[1]
    assert lines[2] == (f"  changed: P5 whole: 0.960x PASS, holds {CLOSE.holds:.0%} -> "
                        f"0.990x WITHIN NOISE, holds {OVER.holds:.0%}")
    assert lines[3:] == ["  only in the earlier run: P4 gone", "  only in this run: P4 new"]


def test_compare_from_the_command_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(history, "RUNS_DIR", str(tmp_path))
    assert bench.main(["--compare"]) == 2
    assert "0 saved run(s)" in capsys.readouterr().err
    a = history.save(_run("2026-12-02T04:00:00Z", [CLOSE]), str(tmp_path))
    b = history.save(_run("2026-12-02T04:15:00Z", [OVER]), str(tmp_path))
    assert bench.main(["--compare"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{a} -> {b}\n") and "same verdict on 0 of 1 rows" in out
    assert bench.main(["--compare", b, a]) == 0
    assert "WITHIN NOISE" in capsys.readouterr().out
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"started": "x"}))
    assert bench.main(["--compare", a, str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"python -m benchmarks: {bad}: not a saved benchmark run") and \
        err.count("\n") == 1
    assert bench.main(["--compare", a]) == 2  # one run named
    assert "two saved runs" in capsys.readouterr().err


def test_a_full_run_keeps_its_rows_and_compares_with_the_one_before(tmp_path, monkeypatch,
                                                                  capsys):
    monkeypatch.setattr(history, "RUNS_DIR", str(tmp_path))
    bench._keep([CLOSE], ["--only", "p5"], 700.0, "0 0 0", "1 1 1", started=1764648000.0)
    assert "no earlier run of this command" in capsys.readouterr().out
    bench._keep([OVER], ["--only", "p5"], 690.0, "0 0 0", "1 1 1", started=1764649000.0)
    out = capsys.readouterr().out
    assert "rows saved: " in out and "same verdict on 0 of 1 rows" in out
    assert "changed: P5 whole: 0.960x PASS" in out
    assert len(list(tmp_path.glob("*.json"))) == 2
