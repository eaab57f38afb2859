"""The straggler rule at its edges (survivors of the mutation check, docs/reliability.md):
the defaults, strict and inclusive bounds, the record a straggler is, and the cell size from
which several ranks of one cell may be flagged."""

from __future__ import annotations

import dataclasses

import pytest

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


def test_a_straggler_is_a_frozen_record_with_its_excess_and_name():
    (s,) = find_stragglers([row(0, 100), row(1, 120), row(2, 400, host="node7")])
    assert (s.group, s.role, s.phase, s.rank, s.host) == ("actor_rollout_ref", "actor",
                                                          "update_actor", 2, "node7")
    assert (s.duration_ns, s.others_median_ns, s.ratio) == (400 * MS, 110 * MS, 400 / 110)
    assert s.excess_ns == 290 * MS and s.name == "actor/update_actor"
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
