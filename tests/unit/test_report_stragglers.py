"""The straggler rule at its edges (survivors of the mutation check, docs/reliability.md):
the defaults, strict and inclusive bounds, the record a straggler is, and the cell size from
which several ranks of one cell may be flagged."""

from __future__ import annotations

import dataclasses
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verlprof.report.stragglers import (
    DEFAULT_MIN_EXCESS_MS,
    DEFAULT_THRESHOLD,
    Straggler,
    find_stragglers,
)
from verlprof.report.table import MANY_RANKS, PhaseRow

MS = 1_000_000


def row(rank, ms, step=1, group="actor_rollout_ref", role="actor", phase="update_actor",
        host=""):
    return PhaseRow(step=step, group=group, rank=rank, role=role, phase=phase, calls=1,
                    duration_ns=int(ms * MS), start_ns=0, host=host)


def flagged(rows, **kw):
    return [(s.step, s.phase, s.rank) for s in find_stragglers(rows, **kw)]


def test_the_defaults_are_one_and_a_half_times_and_twenty_ms():
    assert (DEFAULT_THRESHOLD, DEFAULT_MIN_EXCESS_MS) == (1.5, 20.0)
    # exactly 20 ms over the others' median, well over 1.5x: flagged (the floor is inclusive)
    assert flagged([row(0, 10), row(1, 10), row(2, 30)]) == [(1, "update_actor", 2)]
    assert flagged([row(0, 10), row(1, 10), row(2, 29.999)]) == []
    # exactly 1.5x the others' median, far over 20 ms: not flagged (the ratio is strict)
    assert flagged([row(0, 100), row(1, 100), row(2, 150)]) == []
    assert flagged([row(0, 100), row(1, 100), row(2, 150.001)]) == [(1, "update_actor", 2)]


def test_a_straggler_is_a_frozen_record_with_its_name():
    (s,) = find_stragglers([row(0, 100), row(1, 120), row(2, 400, host="node7")])
    assert (s.group, s.role, s.phase, s.rank, s.host) == ("actor_rollout_ref", "actor",
                                                          "update_actor", 2, "node7")
    assert (s.duration_ns, s.others_median_ns, s.ratio) == (400 * MS, 110 * MS, 400 / 110)
    assert s.name == "actor/update_actor"
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.rank = 0  # type: ignore[misc]
    plain = Straggler(step=1, group="g", role="r", phase="p", rank=0, duration_ns=1,
                      others_median_ns=0, ratio=1.0)
    assert plain.host == ""


def test_others_that_took_no_time_give_an_infinite_ratio():
    (s,) = find_stragglers([row(0, 0), row(1, 0), row(2, 50)])
    assert s.ratio == float("inf") and s.others_median_ns == 0


def test_bad_settings_are_refused_in_one_line():
    with pytest.raises(ValueError, match=r"^straggler threshold must be positive, got -1$"):
        find_stragglers([], threshold=-1)
    with pytest.raises(ValueError, match=r"^straggler threshold must be positive, got 0$"):
        find_stragglers([], threshold=0)  # zero flags every rank: not a threshold
    with pytest.raises(ValueError, match=r"^straggler minimum excess must be >= 0 ms, got -0.5$"):
        find_stragglers([], min_excess_ms=-0.5)
    # the least allowed settings: any rank slower than the others' median is flagged
    assert flagged([row(0, 100), row(1, 100.5)], threshold=0.5, min_excess_ms=0) == \
        [(1, "update_actor", 1)]
    assert flagged([row(0, 100), row(1, 130)], threshold=1.0) == [(1, "update_actor", 1)]


def test_several_ranks_of_one_cell_only_above_many_ranks():
    def cell(size, slow):
        return [row(r, 400 if r >= size - slow else 100) for r in range(size)]

    # up to MANY_RANKS ranks: one alone, even when two are as slow (the lower rank: ties go
    # by rank)
    assert flagged(cell(MANY_RANKS, 2)) == [(1, "update_actor", MANY_RANKS - 2)]
    # more: every rank that passes (one slow node's ranks), in rank order
    assert flagged(cell(MANY_RANKS + 1, 2)) == [(1, "update_actor", MANY_RANKS - 1),
                                                (1, "update_actor", MANY_RANKS)]


def test_stragglers_come_in_step_then_ppo_order():
    rows = [row(r, 400 if r == 1 else 100, step=step, group=group, role=role, phase=phase)
            for step in (2, 1)
            for group, role, phase in (("critic", "critic", "update_critic"),
                                       ("actor_rollout_ref", "rollout", "generate_sequences"))
            for r in range(3)]
    assert [(s.step, s.phase) for s in find_stragglers(rows)] == [
        (1, "generate_sequences"), (1, "update_critic"),
        (2, "generate_sequences"), (2, "update_critic")]


def _reference(rows, threshold, min_excess_ns):
    """The rule as the module's docstring states it, by brute force: every rank of a large
    cell, the slowest of a small one, against the plain median of the others."""
    cells = {}
    for r in rows:
        cells.setdefault((r.step, r.phase), []).append(r)
    out = set()
    for members in cells.values():
        if len(members) < 2:
            continue
        ordered = sorted(members, key=lambda r: (-r.duration_ns, r.rank))
        for r in ordered if len(members) > MANY_RANKS else ordered[:1]:
            median = statistics.median([o.duration_ns for o in members if o is not r])
            if r.duration_ns > threshold * median and r.duration_ns - median >= min_excess_ns:
                out.add((r.step, r.phase, r.rank, int(median)))
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(0, 400), min_size=1, max_size=MANY_RANKS + 8),
                min_size=1, max_size=4),
       st.sampled_from([0.5, 1.1, 1.5, 3.0]), st.sampled_from([0.0, 20.0]))
def test_stragglers_match_the_rule_computed_by_brute_force(cells, threshold, min_excess_ms):
    rows = [row(rank, ms, step=step) for step, durations in enumerate(cells, start=1)
            for rank, ms in enumerate(durations)]
    found = {(s.step, s.phase, s.rank, s.others_median_ns)
             for s in find_stragglers(rows, threshold=threshold, min_excess_ms=min_excess_ms)}
    assert found == _reference(rows, threshold, int(min_excess_ms * MS))


def test_others_of_one_nanosecond_give_a_finite_ratio():
    rows = [PhaseRow(step=1, group="actor_rollout_ref", rank=r, role="actor",
                     phase="update_actor", calls=1, duration_ns=d, start_ns=0)
            for r, d in enumerate((1, 1, 50 * MS))]
    (s,) = find_stragglers(rows)
    assert s.ratio == 50 * MS
