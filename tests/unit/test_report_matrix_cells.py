"""What the per-step tables of `verlprof report` show, cell by cell (report/matrix.py): header
names, blank and `-` cells, `×n` call counts, the step title, the stragglers and slowest
columns of the distribution view (docs/user_guide.md, "Analysis")."""

from __future__ import annotations

from verlprof.report.matrix import ms, per_rank_fits, step_tables
from verlprof.report.model import PhaseRecord, StepSpan
from verlprof.report.stragglers import find_stragglers
from verlprof.report.table import MANY_RANKS, build_rows, build_spreads

MS = 1_000_000
T0 = 1_700_000_000 * 10**9
PER_RANK_HEAD = ("group", "phase", "r0", "r1", "min", "median", "max")
DISTRIBUTION_HEAD = ("group", "phase", "ranks", "min", "median", "p95", "max", "stragglers",
                     "slowest")


def rec(step, rank, phase, ms_, group="actor_rollout_ref", role="actor", start_ms=0, **gpu):
    start = T0 + int(start_ms * MS)
    return PhaseRecord(step=step, group=group, rank=rank, role=role, phase=phase,
                       start_ns=start, end_ns=start + int(ms_ * MS), **gpu)


def tables(records, steps=(), per_rank=True):
    rows = build_rows(records)
    return step_tables(rows, build_spreads(rows), find_stragglers(rows), list(steps),
                       per_rank=per_rank)


def texts(table):
    return [[c.text for c in line] for line in table.rows]


def test_one_column_per_rank_blank_where_a_rank_did_not_run_and_spread_only_across_ranks():
    records = [  # given out of display order: the table puts them in PPO order
        rec(2, 0, "update_critic", 7, group="critic", role="critic"),
        rec(2, 1, "update_critic", 9, group="critic", role="critic"),
        rec(2, 0, "update_actor", 5), rec(2, 0, "update_actor", 5, start_ms=10),
        rec(2, 1, "update_actor", 12),
        rec(2, 1, "compute_log_prob", 4, role="ref"),
        rec(2, 1, "compute_log_prob", 3),
        rec(2, 0, "generate_sequences", 20, role="rollout"),
        rec(2, 1, "generate_sequences", 22, role="rollout"),
        rec(2, 0, "generate_sequences", 30, group="controller", role="controller"),
    ]
    (table,) = tables(records)
    assert table.title == "step 2" and table.step == 2  # no step span known: no duration
    assert table.header == PER_RANK_HEAD and table.numeric_from == 2
    assert texts(table) == [
        # the controller's role is its group: the phase alone; one rank: no spread
        ["controller", "generate_sequences", "30.0", "", "", "", ""],
        ["actor_rollout_ref", "rollout/generate_sequences", "20.0", "22.0", "20.0", "21.0",
         "22.0"],
        # the group is named once per step; rank 0 did not run these: blank, not 0
        ["", "actor/compute_log_prob", "", "3.0", "", "", ""],
        ["", "ref/compute_log_prob", "", "4.0", "", "", ""],
        # two calls summed on rank 0
        ["", "actor/update_actor", "10.0 ×2", "12.0", "10.0", "11.0", "12.0"],
        ["critic", "update_critic", "7.0", "9.0", "7.0", "8.0", "9.0"],
    ]
    assert not any(c.flagged for line in table.rows for c in line)
    rows = build_rows(records)[::-1]  # the table sorts its rows itself
    assert texts(step_tables(rows, build_spreads(rows), [], [])[0]) == texts(table)


def test_a_straggler_cell_keeps_its_call_count_and_is_marked():
    records = [rec(1, 0, "update_actor", 100), rec(1, 1, "update_actor", 100),
               rec(1, 2, "update_actor", 200), rec(1, 2, "update_actor", 200, start_ms=300),
               rec(1, 0, "compute_log_prob", 10), rec(1, 0, "compute_log_prob", 10,
                                                      start_ms=20),
               rec(1, 0, "compute_log_prob", 10, start_ms=40), rec(1, 2, "compute_log_prob", 31)]
    (table,) = tables(records)
    assert table.header == ("group", "phase", "r0", "r1", "r2", "min", "median", "max")
    log_prob, update = table.rows
    assert [c.text for c in log_prob] == ["actor_rollout_ref", "actor/compute_log_prob",
                                          "30.0 ×3", "", "31.0", "30.0", "30.5", "31.0"]
    assert [c.text for c in update] == ["", "actor/update_actor", "100.0", "100.0",
                                        "400.0 ×2!", "100.0", "100.0", "400.0"]
    assert [c.flagged for c in update] == [False] * 4 + [True] + [False] * 3


def test_the_step_title_gives_its_duration_and_where_it_came_from():
    records = [rec(step, 0, "update_actor", 10) for step in (3, 1, 2)]
    spans = [StepSpan(step=1, start_ns=T0, end_ns=T0 + 116_400_000, source="controller"),
             StepSpan(step=2, start_ns=T0, end_ns=T0 + 2_000_500_000, source="records")]
    assert [t.title for t in tables(records, spans)] == [
        "step 1: 0.116 s (controller)", "step 2: 2.001 s (extent of phases)", "step 3"]
    assert [t.step for t in tables(records, spans)] == [1, 2, 3]


def test_the_distribution_view_counts_ranks_and_names_the_slowest():
    records = [rec(1, rank, "update_actor", 100) for rank in (0, 1)]
    records += [rec(1, 2, "update_actor", 200), rec(1, 2, "update_actor", 200, start_ms=300)]
    records += [rec(1, rank, "compute_log_prob", ms_) for rank, ms_ in ((0, 10), (1, 12))]
    (table,) = tables(records, per_rank=False)
    assert table.header == DISTRIBUTION_HEAD and table.numeric_from == 2
    assert texts(table) == [
        ["actor_rollout_ref", "actor/compute_log_prob", "2", "10.0", "11.0", "12.0", "12.0",
         "", "r1"],
        ["", "actor/update_actor", "3", "100.0", "100.0", "400.0", "400.0", "1", "r2!"],
    ]
    calm, slow = table.rows
    assert not any(c.flagged for c in calm)
    assert [c.flagged for c in slow] == [False] * 7 + [True, True]


def test_a_cell_of_many_ranks_shows_its_p95_and_its_three_slowest_stragglers_marked():
    times = [10 + rank for rank in range(MANY_RANKS + 4)]  # 20 ranks: 10..29 ms
    times[-1], times[-2] = 100, 90  # r19, r18: stragglers; r17 (27 ms) is only the 3rd slowest
    (table,) = tables([rec(1, rank, "update_actor", t) for rank, t in enumerate(times)],
                      per_rank=False)
    # p95 by nearest rank of 20 durations is the 19th: 90 ms, below the max
    assert texts(table) == [["actor_rollout_ref", "actor/update_actor", "20", "10.0", "19.5",
                             "90.0", "100.0", "2", "r19! r18! r17"]]
    assert [c.flagged for c in table.rows[0]][-2:] == [True, True]
    # up to MANY_RANKS ranks (a narrow terminal) the slowest one alone is named
    (table,) = tables([rec(1, rank, "update_actor", t) for rank, t in
                       enumerate(times[:MANY_RANKS])], per_rank=False)
    assert texts(table)[0][-1] == f"r{MANY_RANKS - 1}"


def test_gpu_columns_give_the_median_across_ranks_and_a_dash_where_nothing_was_measured():
    records = [rec(1, rank, "update_actor", 50, kernel_ns=k * MS, kernel_count=n)
               for rank, k, n in ((0, 2, 10), (1, 9, 30), (2, 4, 20))]
    records.append(rec(1, 0, "compute_log_prob", 5))  # read from a report with no GPU data
    records.append(rec(1, 1, "compute_log_prob", 5, memcpy_ns=MS))
    for per_rank, head in ((True, ("group", "phase", "r0", "r1", "r2", "min", "median",
                                   "max")), (False, DISTRIBUTION_HEAD)):
        (table,) = tables(records, per_rank=per_rank)
        assert table.header == head + ("kernel ms", "kernels")
        assert [line[-2:] for line in texts(table)] == [["-", "-"], ["4.0", "20"]]
    (no_gpu,) = tables([rec(1, 0, "update_actor", 50)])
    assert no_gpu.header == ("group", "phase", "r0", "min", "median", "max")


def test_per_rank_columns_fit_up_to_many_ranks_in_a_cell():
    def rows(ranks, steps=(1,), phases=("update_actor",)):
        return build_rows([rec(s, r, p, 1) for s in steps for p in phases
                           for r in range(ranks)])

    assert per_rank_fits(rows(MANY_RANKS)) and not per_rank_fits(rows(MANY_RANKS + 1))
    # counted per cell: steps and phases do not add up
    assert per_rank_fits(rows(MANY_RANKS, steps=(1, 2), phases=("update_actor", "x")))
    assert per_rank_fits([])
    # the default is one column per rank
    records = [rec(1, 0, "update_actor", 1)]
    (table,) = step_tables(build_rows(records), build_spreads(build_rows(records)), [], [])
    assert table.header == ("group", "phase", "r0", "min", "median", "max")


def test_milliseconds_text():
    assert (ms(None), ms(1_234_567), ms(1_250_000, 3), ms(0)) == ("-", "1.2", "1.250", "0.0")


def test_the_distribution_view_keeps_the_time_of_a_phase_one_rank_ran():
    """No column per rank there: a one-rank phase (the controller's, beside a 20-rank actor)
    shows its time as its distribution and names its rank, instead of blank cells (which lost
    the controller's phases from the table whenever a phase had over 16 ranks)."""
    records = [rec(1, rank, "update_actor", 10 + rank) for rank in range(MANY_RANKS + 4)]
    records.append(rec(1, 0, "update_actor", 30, group="controller", role="controller"))
    (table,) = tables(records, per_rank=False)
    rows = {line[1]: line for line in texts(table)}
    assert rows["update_actor"] == ["controller", "update_actor", "1", "30.0", "30.0",
                                    "30.0", "30.0", "", "r0"]
