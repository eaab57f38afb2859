"""The readers' memory budget: sizes, how many readers fit, a trace refused in one line while
the other reports are read, and the CLI flag."""

from __future__ import annotations

import gzip
import json

import pytest

from tests.helpers import report_main
from tests.unit.test_report_gpu_sql import p4_gpu
from verlprof.report import budget
from verlprof.report.load import ReadTask, read_reports


def test_parse_size_and_refusals():
    assert budget.parse_size("4G") == 4 << 30
    assert budget.parse_size("512M") == 512 << 20
    assert budget.parse_size("1.5GiB") == 3 << 29
    assert budget.parse_size(str(1 << 30)) == 1 << 30
    for bad in ("", "4X", "-1G", "10M"):
        with pytest.raises(ValueError, match="--memory-budget"):
            budget.parse_size(bad)


def test_jobs_fit_the_budget():
    need = budget.NSYS_READER_BYTES
    assert budget.jobs_for(need, 4 << 30, tasks=4, cores=16) == 4
    assert budget.jobs_for(need, 4 << 30, tasks=100, cores=16) == 16
    assert budget.jobs_for(need, 2 * need, tasks=100, cores=16) == 2
    assert budget.jobs_for(need, need // 2, tasks=100, cores=16) == 1  # still read, alone
    assert budget.jobs_for(need, 2 * need, tasks=100, cores=16, requested=8) == 2


def test_default_budget_and_environment(monkeypatch):
    monkeypatch.delenv(budget.BUDGET_ENV, raising=False)
    assert budget.budget_bytes() == budget.DEFAULT_BUDGET == 4 << 30
    monkeypatch.setenv(budget.BUDGET_ENV, "1G")
    assert budget.budget_bytes() == 1 << 30
    assert budget.budget_bytes(256 << 20) == 256 << 20


def trace(path, events: int) -> str:
    data = {"traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "actor/update_actor",
                             "pid": 1, "tid": 1, "ts": 1.0e15 + k, "dur": 1.0}
                            for k in range(events)]}
    with gzip.open(path, "wt") as handle:
        json.dump(data, handle)
    return str(path)


def test_a_trace_over_the_budget_is_refused_in_one_line_and_the_others_read(tmp_path):
    big = trace(tmp_path / "big.pt.trace.json.gz", 40_000)
    small = trace(tmp_path / "small.pt.trace.json.gz", 3)
    p4_gpu.build(str(tmp_path / "g.sqlite"), 200)
    nsys = tmp_path / "g.nsys-rep"
    nsys.write_bytes(b"x")
    (tmp_path / "g.sqlite").touch()  # the export is newer than the report: cached
    tasks = [ReadTask(index=i, path=p, backend=b, window_start_ns=None, timeout_s=30)
             for i, (p, b) in enumerate([(big, "torch"), (small, "torch"),
                                          (str(nsys), "nsys")])]
    # the big trace's JSON needs 64 MiB + 12 x its size: over a 64.5 MiB budget
    out = read_reports(tasks, memory_budget=budget.parse_size("64.5M"))
    assert [d.index for d in out] == [0, 1, 2]
    assert out[0].error and "\n" not in out[0].error and "--memory-budget" in out[0].error
    assert not out[1].error and out[1].ranges
    assert not out[2].error and len(out[2].ranges) == len(p4_gpu.phases(200))
    # the nsys report's GPU totals were read from its export, not lost to the budget
    by_name: dict = {}
    for r in out[2].ranges:
        by_name.setdefault(r.name, []).append((r.kernel_ns, r.kernel_count, r.memcpy_ns))
    assert p4_gpu.in_phase_order(200, by_name) == p4_gpu.reference(200)


def test_cli_refuses_a_bad_budget_in_one_line(tmp_path, capsys):
    assert report_main([str(tmp_path), "--memory-budget", "lots"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--memory-budget" in err


def _dies_on_big(task):
    import os as _os

    from verlprof.report.model import ReportData

    if "big" in task.path:
        _os._exit(9)  # as the kernel's out-of-memory killer would end it
    return ReportData(index=task.index)


def test_a_reader_process_that_dies_loses_only_its_report(tmp_path, monkeypatch):
    from multiprocessing import get_context

    from verlprof.report import load

    monkeypatch.setattr(load, "read_one", _dies_on_big)
    monkeypatch.setattr(load, "POOL_MIN_BYTES", 0)
    monkeypatch.setattr(load, "_pool_context", lambda: get_context("fork"))
    names = ["a", "big", "c", "d"]
    tasks = [ReadTask(index=i, path=trace(tmp_path / f"{n}.pt.trace.json.gz", 2),
                      backend="torch", window_start_ns=None, timeout_s=30)
             for i, n in enumerate(names)]
    out = read_reports(tasks, jobs=2)
    assert [d.index for d in out] == [0, 1, 2, 3]
    assert out[1].error and "died" in out[1].error and "\n" not in out[1].error
    assert all(not d.error for i, d in enumerate(out) if i != 1)
