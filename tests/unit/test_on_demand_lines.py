"""Capture requests at their limits, and each refusal's whole line (found by the mutation
check of plan/request_plan.py, docs/reliability.md: the refusals were matched by their start,
and no test sat on a cap)."""

from __future__ import annotations

import dataclasses

import pytest

from tests.unit.test_on_demand import GROUP, TOKEN, ask, od_plan
from verlprof.config.schema import (
    ComponentConfig,
    ComponentsConfig,
    OnDemandConfig,
    ProfilingConfig,
)
from verlprof.config.topology import Topology
from verlprof.plan import build_plan
from verlprof.plan.request_plan import plan_request, request_problem, requested_steps


@pytest.mark.parametrize("request_, expected", [
    (ask(tool="perf"), "tool: one of nsys, torch, rocprof_sys expected (or none: the run's "
                       "tool)"),
    (ask(token="\udcff"), "wrong token: only the job's owner can ask (the token is "
                          "<output_dir>/.verlprof-token)"),
    (ask(requested_by="a" * 201), "requested_by: printable text of at most 200 characters "
                                  "expected"),
    (ask(requested_by="a" * 200), ""),
    (ask(ranks=tuple(range(4097))), "ranks: 1 to 4096 non-negative integers expected"),
    (ask(ranks=tuple(range(4096))), ""),
    (ask(ranks=(True,)), "ranks: 1 to 4096 non-negative integers expected"),
    (ask(discrete=1), "discrete: true or false expected"),
    (ask(steps="next:2;rm -rf /"), "steps: next:N, S or S-T expected (e.g. next:2, 120, "
                                   "120-121)"),
])
def test_a_request_is_screened_to_its_limits_in_one_whole_line(request_, expected):
    assert request_problem(request_, TOKEN) == expected


@pytest.mark.parametrize("spec, expected", [
    ("x", "steps: next:N, S or S-T expected (e.g. next:2, 120, 120-121)"),
    ("next:0", "steps: next:0 asks for nothing"),
    ("9-8", "steps: 9-8 ends before it starts"),
])
def test_steps_that_ask_for_nothing_are_refused_in_one_whole_line(spec, expected):
    assert requested_steps(spec, 3) == expected


def refused(plan, request, step=1, hour=()):
    line = plan_request(plan, request, step, list(hour), 0.0)
    assert isinstance(line, str), line
    return line


def test_plan_request_refusals_are_whole_lines(tmp_path):
    plan = od_plan(tmp_path)
    assert refused(dataclasses.replace(plan, built_from=None), ask()) == (
        "this job's plan carries no inputs to plan a window from (built_from)")
    assert refused(plan, ask(tool="rocprof_sys")) == (
        "tool: rocprof_sys opens a fixed number of windows per process from its launch; a "
        "running job captures on demand with --tool torch, or nsys on armed ranks")
    assert refused(plan, ask(ranks=(2, 3))) == (
        "ranks: actor_rollout_ref has ranks 0-1; 2, 3 do not exist")
    assert refused(plan, ask(ranks=(0, 1), tool="nsys")) == (
        "tool: nsys needs ranks armed at launch; actor_rollout_ref rank(s) 0, 1 are not in "
        "trainer.profiler.on_demand.nsys_ranks (armed: none); ask --tool torch")
    two = build_plan(ProfilingConfig(steps=(), tool="torch", output_dir=str(tmp_path / "two"),
                                     components=ComponentsConfig(
                                         actor=ComponentConfig(ranks=(0,))),
                                     on_demand=OnDemandConfig(enabled=True)),
                     Topology.of({GROUP: 2, "critic": 1}, cuda=False))
    assert refused(two, ask(group="rm")) == (
        "group: 'rm' is not a worker group of this job (actor_rollout_ref, critic)")
    armed = build_plan(dataclasses.replace(plan.built_from.config, on_demand=OnDemandConfig(
        enabled=True, nsys_ranks={GROUP: (1, 3)})), Topology.of({GROUP: 4}, cuda=False))
    assert refused(armed, ask(ranks=(0, 2), tool="nsys")).endswith(
        "rank(s) 0, 2 are not in trainer.profiler.on_demand.nsys_ranks (armed: 1, 3); ask "
        "--tool torch")


def test_the_caps_let_through_exactly_their_number(tmp_path):
    plan = od_plan(tmp_path, max_steps_per_request=2, max_reports_per_request=2,
                   max_requests_per_hour=2, max_reports_per_hour=4)
    assert not isinstance(plan_request(plan, ask(steps="next:2"), 1, [2], 0.0), str)
    assert refused(plan, ask(steps="next:2", ranks=(0, 1))) == (
        "4 reports asked, at most 2 per request (trainer.profiler.on_demand."
        "max_reports_per_request); ask fewer ranks or steps")
    assert refused(plan, ask(steps="next:1"), hour=[1, 1]) == (
        "2 requests accepted in the last hour, the cap is 2 (trainer.profiler.on_demand."
        "max_requests_per_hour); try later")
    assert refused(plan, ask(steps="next:2"), hour=[3]) == (
        "3 reports accepted in the last hour, 2 more would pass the cap of 4 "
        "(trainer.profiler.on_demand.max_reports_per_hour); try later or ask fewer")


def test_a_request_without_group_or_asker_goes_to_the_first_group_from_unknown(tmp_path):
    two = build_plan(ProfilingConfig(steps=(), tool="torch", output_dir=str(tmp_path),
                                     components=ComponentsConfig(
                                         actor=ComponentConfig(ranks=(0,))),
                                     on_demand=OnDemandConfig(enabled=True)),
                     Topology.of({GROUP: 2, "critic": 1}, cuda=False))
    result = plan_request(two, ask(group="", requested_by=""), 1, [], 0.0)
    assert not isinstance(result, str), result
    assert result.decision.targets == ((GROUP, 0),)
    assert {w.report.requested_by for p in result.processes for w in p.windows} == {"unknown"}


def test_a_discrete_request_opens_per_phase_and_says_when_no_phase_opens(tmp_path):
    plan = od_plan(tmp_path)
    result = plan_request(plan, ask(steps="next:1", discrete=True), 2, [], 0.0)
    assert not isinstance(result, str), result
    (process,) = result.processes
    assert process.mode == "discrete" and process.selected_roles == process.roles
    assert {w.phase for w in process.windows} >= {"compute_log_prob", "update_actor"}
    silent = build_plan(dataclasses.replace(plan.built_from.config, phases={
        "actor": (), "rollout": (), "ref": ()}), plan.built_from.topology)
    assert refused(silent, ask(steps="next:1", discrete=True)) == (
        "--discrete: no annotated phase of actor, rollout, ref opens a window "
        "(trainer.profiler.phases)")


def test_a_request_over_a_planned_rank_and_a_new_one_extends_both(tmp_path):
    plan = od_plan(tmp_path, steps=(1,))  # rank 0 planned at step 1
    result = plan_request(plan, ask(steps="next:1", ranks=(0, 1)), 5, [], 0.0)
    assert not isinstance(result, str), result
    assert [(p.rank, [w.steps for w in p.windows]) for p in result.processes] == [
        (0, [(1,), (5,)]), (1, [(5,)])]


def test_conflicts_with_what_a_rank_already_captures_are_whole_lines(tmp_path):
    plan = od_plan(tmp_path, steps=(1,))
    assert refused(plan, ask(steps="next:1", discrete=True), step=2) == (
        "actor_rollout_ref rank 0 captures in whole mode; ask without --discrete")
    first = plan_request(plan, ask(steps="4-5", requested_by="bob"), 2, [], 0.0)
    assert not isinstance(first, str)
    grown = dataclasses.replace(plan, processes=first.processes)
    assert refused(grown, ask(steps="5-6"), step=2) == (
        "actor_rollout_ref rank 0 already captures step(s) 5 (asked by bob); ask for other "
        "steps")
    assert refused(grown, ask(steps="1-4"), step=1) == (
        "actor_rollout_ref rank 0 already captures step(s) 1, 4 (planned); ask for other "
        "steps")
    nsys = build_plan(dataclasses.replace(plan.built_from.config, tool="nsys",
                                          on_demand=OnDemandConfig(enabled=True,
                                                                   nsys_ranks={GROUP: (0,)})),
                      plan.built_from.topology)
    assert refused(nsys, ask(steps="next:1", tool="torch"), step=3) == (
        "actor_rollout_ref rank 0 is profiled with nsys by the plan; it cannot also run torch "
        "(ask --tool nsys or another rank)")
