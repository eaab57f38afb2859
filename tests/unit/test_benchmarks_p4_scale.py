"""P4 at report sizes (benchmarks/p4_scale.py): rows and verdicts from given figures, the sizes
chosen by the environment. No time is asserted."""

from __future__ import annotations

from benchmarks import p4_scale


def figures(export, cold, warm, rss_kib):
    return {"export": [export], "cold": [cold], "warm": [warm], "rss": [rss_kib],
            "kids": [30_000], "warm_rss": [rss_kib], "export_cpu": [export],
            "cold_cpu": [cold], "warm_cpu": [warm], "mb": [1.0], "k": [4]}


def test_rows_and_verdicts():
    rows = p4_scale.results({1: figures(1.0, 1.6, 0.5, 40_000),
                             100: figures(100.0, 110.0, 10.0, 100_000)})
    verdicts = {r.metric: r.verdict for r in rows}
    assert verdicts == {
        "P4 1 MB x 4: verlprof report cold vs nsys export": "INFO",  # fixed start-up only
        "P4 1 MB x 4: verlprof report warm vs nsys export": "INFO",  # no goal below 20 MB
        "P4 100 MB x 4: verlprof report cold vs nsys export": "PASS",
        "P4 100 MB x 4: verlprof report warm vs nsys export": "PASS",
        "P4 peak RSS of verlprof report, 100 MB / 1 MB reports": "MISS",
    }
    assert rows[-1].ratio == 2.5
    assert any("warm 0.50 s" in d for d in rows[0].details)
    assert "verlprof's own 600 ms above an export of 1000 ms" in rows[0].note


def test_sizes_from_the_environment(monkeypatch):
    monkeypatch.delenv(p4_scale.SIZES_ENV, raising=False)
    assert p4_scale.sizes() == [1, 20]
    monkeypatch.setenv(p4_scale.SIZES_ENV, "1, 20,100")
    assert p4_scale.sizes() == [1, 20, 100]


def test_an_opt_in_size_left_out_is_a_row_that_says_so():
    (row,) = p4_scale.not_measured([1, 20])
    assert row.verdict == "NOT RUN (runs under --large)" and "100 MB" in row.metric
    assert "--large" in row.line() and f"{p4_scale.SIZES_ENV}=1,20,100" in row.line()
    assert p4_scale.not_measured([1, 20, 100]) == []
