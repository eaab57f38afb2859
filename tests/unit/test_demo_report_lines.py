"""What the demo prints about its reports: each one for a short run, only the problems and a
count for a long one (40 profiled steps used to print 80 paths)."""

from __future__ import annotations

from verlprof.demo.run import LIST_EVERY_REPORT_UP_TO, LIST_PROBLEMS_UP_TO, report_lines


def _entries(ok: int, missing: int):
    return ([{"path": f"step{i:04d}/critic/rank0/r.nsys-rep", "status": "ok", "reason": None}
             for i in range(ok)] +
            [{"path": f"step{i:04d}/critic/rank1/r.nsys-rep", "status": "missing",
              "reason": "rank died"} for i in range(missing)])


def test_a_short_run_lists_every_report():
    lines = report_lines(_entries(3, 1), "/out")
    assert lines == ["  /out/step0000/critic/rank0/r.nsys-rep",
                     "  /out/step0001/critic/rank0/r.nsys-rep",
                     "  /out/step0002/critic/rank0/r.nsys-rep",
                     "  /out/step0000/critic/rank1/r.nsys-rep  [missing: rank died]"]


def test_a_long_run_lists_the_problems_and_counts_the_rest():
    lines = report_lines(_entries(80, 2), "/out")
    assert lines[:2] == ["  /out/step0000/critic/rank1/r.nsys-rep  [missing: rank died]",
                         "  /out/step0001/critic/rank1/r.nsys-rep  [missing: rank died]"]
    assert lines[2:] == ["  80 ok report(s) under /out (each listed in manifest.json)"]
    assert len(report_lines(_entries(800, 0), "/out")) == 1
    assert len(_entries(80, 2)) > LIST_EVERY_REPORT_UP_TO


def test_many_problems_are_capped():
    lines = report_lines(_entries(0, 100), "/out")
    assert len(lines) == LIST_PROBLEMS_UP_TO + 1
    assert lines[-1] == "  ... and 80 more not ok (manifest.json has each with its reason)"
