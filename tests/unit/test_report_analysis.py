"""The report's analyses on synthetic records: rows, spread, stragglers, step assignment."""

from __future__ import annotations

import pytest

from verlprof.manifest import ReportEntry
from verlprof.report.load import normalise
from verlprof.report.matrix import step_tables
from verlprof.report.model import PhaseRecord, RawRange, ReportData, StepMark
from verlprof.report.stragglers import find_stragglers
from verlprof.report.table import build_rows, build_spreads

MS = 1_000_000
T0 = 1_700_000_000 * 10**9


def rec(step, rank, phase, ms, start_ms=0, group="actor_rollout_ref", role="actor"):
    start = T0 + int(start_ms * MS)
    return PhaseRecord(step=step, group=group, rank=rank, role=role, phase=phase,
                       start_ns=start, end_ns=start + int(ms * MS))


def flags(records, **kw):
    return [(s.step, s.phase, s.rank) for s in find_stragglers(build_rows(records), **kw)]


def test_rows_sum_calls_and_keep_gpu_columns_absent():
    rows = build_rows([rec(1, 0, "update_actor", 10), rec(1, 0, "update_actor", 5, 20),
                       rec(1, 1, "update_actor", 12)])
    assert [(r.rank, r.calls, r.duration_ns) for r in rows] == [(0, 2, 15 * MS), (1, 1, 12 * MS)]
    assert rows[0].kernel_ns is None and rows[0].kernel_count is None


def test_rows_follow_ppo_order():
    records = [rec(1, 0, p, 1, role=r) for r, p in (("actor", "update_actor"),
               ("rollout", "generate_sequences"), ("ref", "compute_ref_log_prob"))]
    records.append(rec(1, 0, "compute_values", 1, group="critic", role="critic"))
    records.append(rec(1, 0, "update_actor", 1, group="controller", role="controller"))
    rows = build_rows(records)
    assert [(r.group, r.phase) for r in rows] == [
        ("controller", "update_actor"), ("actor_rollout_ref", "generate_sequences"),
        ("actor_rollout_ref", "compute_ref_log_prob"), ("actor_rollout_ref", "update_actor"),
        ("critic", "compute_values")]


def test_spread_min_median_max():
    rows = build_rows([rec(1, r, "update_actor", ms) for r, ms in enumerate((10, 30, 20, 40))])
    (spread,) = build_spreads(rows)
    assert (spread.min_ns, spread.median_ns, spread.max_ns, spread.slowest_rank) == \
        (10 * MS, 25 * MS, 40 * MS, 3)
    assert spread.ranks == (0, 1, 2, 3)


def test_planted_straggler_flagged_and_nothing_else():
    records = [rec(s, r, p, 100 + r) for s in (1, 2, 3) for r in range(8)
               for p in ("compute_log_prob", "update_actor")]
    records = [x for x in records if not (x.step == 2 and x.rank == 5
                                          and x.phase == "update_actor")]
    records.append(rec(2, 5, "update_actor", 400))
    assert flags(records) == [(2, "update_actor", 5)]


def test_no_straggler_when_ranks_agree():
    records = [rec(s, r, "update_actor", 100 + 3 * r) for s in (1, 2) for r in range(8)]
    assert flags(records) == []


def test_threshold_and_minimum_excess():
    two = [rec(1, 0, "update_actor", 100), rec(1, 1, "update_actor", 160)]
    assert flags(two) == [(1, "update_actor", 1)]           # 1.6x, +60 ms
    assert flags(two, threshold=1.7) == []
    assert flags(two, min_excess_ms=61) == []
    short = [rec(1, 0, "update_actor", 2), rec(1, 1, "update_actor", 10)]
    assert flags(short) == []                               # 5x but only +8 ms: noise
    assert flags(short, min_excess_ms=5) == [(1, "update_actor", 1)]


def test_median_of_the_others_and_single_rank_cells():
    # the slowest is compared with the median of the three others, not with all four
    records = [rec(1, r, "update_actor", ms) for r, ms in enumerate((100, 190, 190, 200))]
    assert flags(records) == []
    records = [rec(1, r, "update_actor", ms) for r, ms in enumerate((100, 100, 190, 200))]
    assert flags(records) == [(1, "update_actor", 3)]
    assert flags([rec(1, 0, "update_actor", 500)]) == []   # one rank: nothing to compare


def test_groups_are_compared_separately():
    records = [rec(1, 0, "update", 100, group="critic", role="critic"),
               rec(1, 1, "update", 100, group="critic", role="critic"),
               rec(1, 0, "update", 400, group="rm", role="rm")]
    assert flags(records) == []


def test_bad_threshold():
    with pytest.raises(ValueError, match="threshold"):
        find_stragglers([], threshold=0)


def _entry(steps, group="actor_rollout_ref", rank=0, path="r.nsys-rep"):
    return ReportEntry(steps=tuple(steps), group=group, rank=rank, component=group,
                       backend="nsys", path=path, status="ok")


def _raw(name, start_ms, ms=10):
    return RawRange(name, T0 + start_ms * MS, T0 + (start_ms + ms) * MS)


def test_single_step_report_and_ignored_names():
    data = ReportData(index=0, ranges=(_raw("actor/update_actor", 0), _raw("VERLPROF_CAPTURE", 0),
                                       _raw("step/3", 0), _raw("noslash", 0)))
    records, steps, _, notes = normalise([_entry((3,))], [data])
    assert [(r.step, r.name) for r in records] == [(3, "actor/update_actor")]
    assert [(s.step, s.source) for s in steps] == [(3, "records")] and not notes


def test_continuous_window_uses_controller_steps():
    worker = ReportData(index=0, ranges=(_raw("actor/update_actor", 10),
                                         _raw("actor/update_actor", 110),
                                         _raw("critic/compute_values", 120)))
    ctl = ReportData(index=1, marks=(StepMark(1, T0, T0 + 100 * MS),
                                     StepMark(2, T0 + 100 * MS, T0 + 200 * MS)),
                     ranges=(_raw("controller/update_actor", 5, 20),))
    entries = [_entry((1, 2)), _entry((1, 2), group="controller", path="c.nsys-rep")]
    records, steps, _, notes = normalise(entries, [worker, ctl])
    assert [(r.group, r.step, r.phase) for r in records] == [
        ("controller", 1, "update_actor"), ("actor_rollout_ref", 1, "update_actor"),
        ("actor_rollout_ref", 2, "update_actor"), ("actor_rollout_ref", 2, "compute_values")]
    assert [(s.step, s.source) for s in steps] == [(1, "controller"), (2, "controller")]
    assert not notes


def test_continuous_window_own_marks_then_call_order_then_first_step():
    own = ReportData(index=0, marks=(StepMark(4, T0, T0 + 50 * MS),
                                     StepMark(5, T0 + 50 * MS, T0 + 99 * MS)),
                     ranges=(_raw("actor/update_actor", 60),))
    # one ProfilerStep#4 marker around both steps (torch backend): marks do not name step 5
    order = ReportData(index=1, marks=(StepMark(4, T0, T0 + 300 * MS),),
                       ranges=(_raw("actor/a", 200), _raw("actor/a", 250),
                               _raw("actor/b", 260)))
    entries = [_entry((4, 5)), _entry((4, 5), rank=1, path="o.json")]
    records, _, _, notes = normalise(entries, [own, order])
    got = sorted((r.rank, r.phase, r.step) for r in records)
    assert got == [(0, "update_actor", 5), (1, "a", 4), (1, "a", 5), (1, "b", 4)]
    assert len(notes) == 1 and "o.json" in notes[0] and "step 4" in notes[0]


def test_step_tables_flag_the_straggler_cell():
    records = [rec(1, r, "update_actor", ms) for r, ms in enumerate((100, 100, 400))]
    rows = build_rows(records)
    stragglers = find_stragglers(rows)
    (table,) = step_tables(rows, build_spreads(rows), stragglers, [])
    assert table.header == ("group", "phase", "r0", "r1", "r2", "min", "median", "max")
    (line,) = table.rows
    assert [c.text for c in line] == ["actor_rollout_ref", "actor/update_actor", "100.0",
                                      "100.0", "400.0!", "100.0", "100.0", "400.0"]
    assert [c.flagged for c in line][4] and not any(c.flagged for c in line[:4])
    (compact,) = step_tables(rows, build_spreads(rows), stragglers, [], per_rank=False)
    assert compact.header[-1] == "slowest" and compact.rows[0][-1].text == "r2!"
