"""Capture on demand without Ray: requests screened, planned at a step boundary, their windows
run by the real worker session through :class:`~verlprof.runtime.local_rpc.InProcessRanks`."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from tests.unit.test_controller import GROUP, TOPO, Rank, Sent, phases, plan_of
from verlprof.config.schema import (
    ComponentConfig,
    ComponentsConfig,
    OnDemandConfig,
    ProfilingConfig,
)
from verlprof.manifest import read_manifest
from verlprof.plan import build_plan
from verlprof.plan.request_plan import (
    plan_request,
    request_problem,
    requested_steps,
    with_processes,
)
from verlprof.records import CaptureRequest
from verlprof.runtime.controller import ProfileController
from verlprof.runtime.request_desk import Desk, LocalChannel

TOKEN = "t" * 64


def od_plan(tmp_path, steps=(), **caps):
    config = ProfilingConfig(steps=tuple(steps), tool="torch", output_dir=str(tmp_path),
                             components=ComponentsConfig(actor=ComponentConfig(ranks=(0,))),
                             on_demand=OnDemandConfig(enabled=True, **caps))
    return build_plan(config, TOPO)


def ask(steps="next:2", ranks=(0,), **fields):
    return CaptureRequest(id=fields.pop("id", "r1"), token=fields.pop("token", TOKEN),
                          steps=steps, group=fields.pop("group", GROUP), ranks=tuple(ranks),
                          requested_by=fields.pop("requested_by", "ann@login1"), **fields)


# -- screen: what a request says on its own -------------------------------------------------
@pytest.mark.parametrize("request_, expected", [
    (ask(token="x"), "wrong token"),
    (ask(steps="next:2;rm -rf /"), "steps:"),
    (ask(steps="x" * 300), "steps: printable text"),
    (ask(group="../../etc"), "group: a worker group"),
    (ask(ranks=()), "ranks:"),
    (ask(ranks=(0, 0)), "ranks: a rank is listed twice"),
    (ask(ranks=(-1,)), "ranks:"),
    (ask(tool="perf"), "tool:"),
    (ask(requested_by="a\x1b[2Jb"), "requested_by: printable"),
    ({"steps": "next:2"}, "not a capture request"),
])
def test_malformed_or_hostile_requests_are_refused_in_one_line(request_, expected):
    line = request_problem(request_, TOKEN)
    assert line.startswith(expected) and "\n" not in line and TOKEN not in line


def test_a_well_formed_request_passes_and_steps_resolve_at_the_boundary():
    assert request_problem(ask(), TOKEN) == ""
    assert requested_steps("next:2", 7) == (7, 8)
    assert requested_steps("9-10", 7) == (9, 10)
    assert requested_steps("5", 7).startswith("steps: step 5 has started already")


# -- plan_request: against the plan's limits ------------------------------------------------
def test_plan_request_adds_a_torch_process_marked_with_who_asked(tmp_path):
    plan = od_plan(tmp_path)
    assert plan.enabled and not plan.processes  # nothing planned, but the job takes requests
    result = plan_request(plan, ask(ranks=(1,)), 4, [], now=123.0)
    assert not isinstance(result, str)
    (process,) = result.processes
    assert (process.group, process.rank, process.backend, process.mode) == (GROUP, 1, "torch",
                                                                            "whole")
    assert [w.steps for w in process.windows] == [(4,), (5,)]
    assert {(w.report.requested_by, w.report.requested_at) for w in process.windows} == \
        {("ann@login1", 123.0)}
    assert result.decision.reports == tuple(w.report.path for w in process.windows)
    assert result.decision.reports[0].startswith("step0004/actor_rollout_ref/rank1/")
    assert plan_request(plan, ask(ranks=(1,)), 4, [], 123.0) == result  # pure
    grown = with_processes(plan, result.processes)
    assert grown.process(GROUP, 1) == process and len(grown.processes) == 1


@pytest.mark.parametrize("request_, step, hour, expected", [
    (ask(ranks=(2,)), 1, [], "ranks: actor_rollout_ref has ranks 0-1; 2 do not exist"),
    (ask(group="critic"), 1, [], "group: 'critic' is not a worker group"),
    (ask(steps="next:9"), 1, [], "steps: 9 steps asked, at most 4 per request "
                                 "(trainer.profiler.on_demand.max_steps_per_request)"),
    (ask(tool="nsys"), 1, [], "tool: nsys needs ranks armed at launch; actor_rollout_ref "
                              "rank(s) 0 are not in trainer.profiler.on_demand.nsys_ranks"),
    (ask(tool="rocprof_sys"), 1, [], "tool: rocprof_sys opens a fixed number of windows"),
    (ask(ranks=(0, 1), steps="next:3"), 1, [], "6 reports asked, at most 4 per request"),
    (ask(), 1, [1, 1, 1], "3 requests accepted in the last hour, the cap is 3"),
    (ask(), 1, [3], "3 reports accepted in the last hour, 2 more would pass the cap of 4"),
])
def test_plan_request_refuses_beyond_the_limits_in_one_line(tmp_path, request_, step, hour,
                                                             expected):
    plan = od_plan(tmp_path, max_reports_per_request=4, max_requests_per_hour=3,
                   max_reports_per_hour=4)
    line = plan_request(plan, request_, step, hour, 0.0)
    assert isinstance(line, str) and line.startswith(expected), line


# -- nsys on demand: ranks armed at launch -----------------------------------------------
def armed_plan(tmp_path, steps=(), tool="torch", armed=None):
    config = ProfilingConfig(steps=tuple(steps), tool=tool, output_dir=str(tmp_path),
                             components=ComponentsConfig(actor=ComponentConfig(ranks=(0,))),
                             on_demand=OnDemandConfig(enabled=True,
                                                      nsys_ranks=armed or {GROUP: (1,)}))
    return build_plan(config, TOPO)


def test_an_armed_rank_runs_under_open_ended_nsys_and_takes_nsys_windows(tmp_path):
    plan = armed_plan(tmp_path)
    (armed,) = plan.processes
    assert (armed.group, armed.rank, armed.backend, armed.windows) == (GROUP, 1, "nsys", ())
    argv = list(armed.launch_argv)
    assert argv[:2] == ["nsys", "profile"] and "--capture-range=nvtx" in argv
    assert "--capture-range-end=repeat" in argv and not any(
        a.startswith("--capture-range-end=repeat:") for a in argv)
    result = plan_request(plan, ask(ranks=(1,), tool="nsys"), 3, [], 1.0)
    assert not isinstance(result, str), result
    (process,) = result.processes
    assert process.launch_argv == armed.launch_argv and process.backend == "nsys"
    assert [w.steps for w in process.windows] == [(3,), (4,)]
    assert all(p.endswith(".nsys-rep") for p in result.decision.reports)
    refused = plan_request(plan, ask(ranks=(0,), tool="nsys"), 3, [], 1.0)
    assert refused == ("tool: nsys needs ranks armed at launch; actor_rollout_ref rank(s) 0 "
                       "are not in trainer.profiler.on_demand.nsys_ranks (armed: 1); ask "
                       "--tool torch")
    torch_there = plan_request(plan, ask(ranks=(1,), tool="torch"), 3, [], 1.0)
    assert isinstance(torch_there, str) and "profiled with nsys" in torch_there


def test_a_planned_nsys_rank_armed_keeps_its_windows_and_the_run_tool_is_the_default(tmp_path):
    plan = armed_plan(tmp_path, steps=(2,), tool="nsys", armed={GROUP: (0,)})
    (process,) = plan.processes
    assert [w.steps for w in process.windows] == [(2,)]
    assert "--capture-range-end=repeat" in process.launch_argv
    result = plan_request(plan, ask(steps="5", ranks=(0,)), 3, [], 1.0)  # no tool: the run's
    assert not isinstance(result, str) and result.decision.tool == "nsys"
    assert [w.steps for w in result.processes[0].windows] == [(2,), (5,)]


@pytest.mark.parametrize("armed, on, expected", [
    ({"critic": [0]}, True, "trainer.profiler.on_demand.nsys_ranks.critic: not a worker group "
                            "of this run (groups: actor_rollout_ref)"),
    ({GROUP: [2]}, True, f"trainer.profiler.on_demand.nsys_ranks.{GROUP}: rank 2 is outside "
                         "world size 2"),
    ({GROUP: [1]}, False, "trainer.profiler.on_demand.nsys_ranks: arms ranks for capture "
                          "requests, which this job does not take; set "
                          "trainer.profiler.on_demand.enabled=true or leave it out"),
    ({GROUP: [0]}, True, f"trainer.profiler.on_demand.nsys_ranks.{GROUP}: rank 0 is profiled "
                         "with torch by the plan; one process runs one tool (arm another rank, "
                         "or plan it with nsys)"),
])
def test_bad_armed_ranks_are_one_line_naming_the_key(tmp_path, armed, on, expected):
    from verlprof.errors import ConfigError

    config = ProfilingConfig(steps=(1,), tool="torch", output_dir=str(tmp_path),
                             components=ComponentsConfig(actor=ComponentConfig(ranks=(0,))),
                             on_demand=OnDemandConfig(enabled=on, nsys_ranks=armed))
    with pytest.raises(ConfigError) as err:
        build_plan(config, TOPO)
    assert str(err.value) == expected  # the whole line: its key and all of its message


@pytest.mark.parametrize("value, expected", [
    ([0], "trainer.profiler.on_demand.nsys_ranks: must be a mapping"),
    ({"a/../b": [0]}, "trainer.profiler.on_demand.nsys_ranks: keys are worker group names"),
    ({"actor_rollout_ref": [0, 0]}, "trainer.profiler.on_demand.nsys_ranks.actor_rollout_ref[1]"
                                    ": rank 0 listed twice"),
    ({"actor_rollout_ref": ["x"]}, "trainer.profiler.on_demand.nsys_ranks.actor_rollout_ref[0]"),
])
def test_the_nsys_ranks_key_is_validated_like_other_rank_keys(value, expected):
    from verlprof.config.build import config_from_dict
    from verlprof.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        config_from_dict({"trainer": {"profile_steps": [1], "profiler": {
            "on_demand": {"enabled": True, "nsys_ranks": value}}}})
    assert str(err.value).startswith(expected), str(err.value)


def test_a_planned_rank_takes_more_windows_but_not_its_planned_steps(tmp_path):
    plan = plan_of(tmp_path, [3])
    plan = dataclasses.replace(plan, on_demand=OnDemandConfig(enabled=True))
    line = plan_request(plan, ask(steps="2-3"), 2, [], 0.0)
    assert line == ("actor_rollout_ref rank 0 already captures step(s) 3 (planned); ask for "
                    "other steps")
    result = plan_request(plan, ask(steps="5"), 2, [], 0.0)
    assert [w.steps for w in result.processes[0].windows] == [(3,), (5,)]
    discrete = dataclasses.replace(plan_of(tmp_path, [3], discrete=True),
                                   on_demand=OnDemandConfig(enabled=True))
    assert plan_request(discrete, ask(steps="5"), 2, [], 0.0) == (
        "actor_rollout_ref rank 0 captures in discrete mode; ask with --discrete")


def test_off_by_default_and_then_the_controller_pays_nothing(tmp_path):
    plan = plan_of(tmp_path, [2])
    assert not plan.on_demand.enabled
    controller = ProfileController(plan, rpc=Sent(), echo=False, preflight=False,
                                   handle_signals=False)
    assert type(controller._on_demand).__name__ == "NoRequests"
    assert plan_request(plan, ask(), 1, [], 0.0).startswith("this job does not take")


# -- the controller: the queue drains at step boundaries ------------------------------------
def on_demand_controller(tmp_path, steps=(), **caps):
    desk = Desk(TOKEN)
    rpc = Sent()
    controller = ProfileController(od_plan(tmp_path, steps, **caps), rpc=rpc, echo=False,
                                   preflight=False, handle_signals=False,
                                   requests=LocalChannel(desk))
    ranks = [Rank(r) for r in range(2)]
    controller.register_group(GROUP, ranks)
    return controller, ranks, rpc, desk


def test_requests_are_taken_at_the_next_boundary_and_land_in_the_manifest(tmp_path):
    controller, ranks, rpc, desk = on_demand_controller(tmp_path)
    for rank in ranks:
        rank.real_capture = True  # the torch profiler: it writes each trace as a window closes
    with controller.step(1):
        phases(ranks)
        assert desk.submit(ask(ranks=(1,))) == ""  # during step 1: applies at step 2
        assert desk.status(TOKEN).pending == 1
    assert not any(m == "verlprof_extend" for m, _ in rpc.sent)  # the job never waited on it
    for step in (2, 3, 4):
        with controller.step(step):
            phases(ranks)
    decision = desk.decision(TOKEN, "r1")
    assert decision.accepted and decision.steps == (2, 3) and decision.at_step == 2
    assert desk.status(TOKEN).reports == 2 and desk.status(TOKEN).pending == 0
    assert [(m, t) for m, t in rpc.sent if m in ("verlprof_start", "verlprof_stop")] == [
        ("verlprof_start", [(GROUP, 1)]), ("verlprof_stop", [(GROUP, 1)]),
        ("verlprof_start", [(GROUP, 1)]), ("verlprof_stop", [(GROUP, 1)])]
    assert ranks[0].rpcs == []  # an unasked rank hears nothing
    # torch wrote each trace at its window's close: gathered after step 3, before the job
    # ends, into a manifest marked running (what `verlprof capture --wait` reads)
    running = read_manifest(str(tmp_path))
    assert running.running and [(e.steps, e.status) for e in running.reports] == [
        ((2,), "ok"), ((3,), "ok")]
    assert all(os.path.isfile(tmp_path / e.path) and e.bytes for e in running.reports)
    from rich.console import Console

    from verlprof.report import summarize

    console = Console(record=True, width=100)  # verlprof report on the running job says so
    summarize(str(tmp_path), console=console, picture=False, write=False, progress=False)
    assert "the job is still running: this manifest lists the reports placed so far" \
        in " ".join(console.export_text().split())
    manifest = controller.finalize()
    assert not manifest.running
    assert [(e.rank, e.steps, e.status, e.requested_by) for e in manifest.reports] == [
        (1, (2,), "ok", "ann@login1"), (1, (3,), "ok", "ann@login1")]  # each once, still ok
    assert read_manifest(str(tmp_path)).reports == manifest.reports
    assert any("ann@login1 asked for steps 2-3" in w for w in manifest.warnings)


def test_a_capture_is_held_to_the_size_budget_and_refused_naming_the_key(tmp_path):
    """Torch on CPU is estimated at 1 MiB per report and step (nothing measured yet): in a
    1.5 MiB budget one step on one rank fits and is promised; two steps do not, nor does a
    second step once the first is promised. Each refusal is one line naming the key."""
    key = "trainer.profiler.max_total_bytes"
    config = ProfilingConfig(tool="torch", output_dir=str(tmp_path),
                             max_total_bytes=3 * (1 << 20) // 2,
                             components=ComponentsConfig(actor=ComponentConfig(ranks=(0,))),
                             on_demand=OnDemandConfig(enabled=True))
    desk, rpc = Desk(TOKEN), Sent()
    controller = ProfileController(build_plan(config, TOPO), rpc=rpc, echo=False,
                                   preflight=False, handle_signals=False,
                                   requests=LocalChannel(desk))
    ranks = [Rank(r) for r in range(2)]
    controller.register_group(GROUP, ranks)
    for step, request in ((1, ask(steps="next:2", ranks=(1,), id="two")),
                          (2, ask(steps="next:1", ranks=(1,), id="one")),
                          (4, ask(steps="next:1", ranks=(0,), id="more"))):
        assert desk.submit(request) == ""
        with controller.step(step):
            phases(ranks)
    too_big, fits, over = (desk.decision(TOKEN, i) for i in ("two", "one", "more"))
    assert not too_big.accepted and too_big.reason == (
        f"{key}: 1.5 MiB budget: 0 bytes written or promised, these 2 report(s) would add "
        "about 2.0 MiB (estimated); ask for fewer steps or ranks")
    assert fits.accepted and fits.steps == (2,)
    assert not over.accepted and over.reason.startswith(
        f"{key}: 1.5 MiB budget: 1.0 MiB written or promised, these 1 report(s) would add "
        "about 1.0 MiB")
    assert [(e.rank, e.steps, e.status) for e in controller.finalize().reports] == [
        (1, (2,), "ok")]


def test_two_users_at_once_are_served_in_order(tmp_path):
    controller, ranks, _, desk = on_demand_controller(tmp_path)
    assert desk.submit(ask(id="a", requested_by="ann@h")) == ""
    assert desk.submit(ask(id="b", requested_by="bob@h", steps="next:1")) == ""
    assert desk.submit(ask(id="a")).startswith("id: a request with this id")
    with controller.step(1):
        phases(ranks)
    assert desk.decision(TOKEN, "a").accepted
    assert desk.decision(TOKEN, "b").reason == (
        "actor_rollout_ref rank 0 already captures step(s) 1 (asked by ann@h); ask for other "
        "steps")
    assert desk.decision("wrong", "a") == "wrong token"


def test_a_request_racing_the_end_is_refused_and_planned_reports_are_kept(tmp_path):
    controller, ranks, _, desk = on_demand_controller(tmp_path, steps=[1])
    with controller.step(1):
        phases(ranks)
    desk.submit(ask(id="late"))
    manifest = controller.finalize()
    assert desk.decision(TOKEN, "late").reason.startswith("the job ended (after step 1)")
    assert desk.submit(ask(id="later")) == "the job has ended; it takes no more requests"
    assert [(e.rank, e.status) for e in manifest.reports] == [(0, "ok")]  # the planned ones


def test_a_rank_dying_mid_window_is_named_and_the_job_goes_on(tmp_path):
    controller, ranks, rpc, desk = on_demand_controller(tmp_path)
    desk.submit(ask(ranks=(0, 1)))
    with controller.step(1):
        phases(ranks)
        rpc.kill((GROUP, 1), "node lost")
    with controller.step(2):
        phases(ranks)
    manifest = controller.finalize()
    status = {(e.rank, e.steps): e.status for e in manifest.reports}
    assert status[(0, (1,))] == status[(0, (2,))] == "ok"
    assert status[(1, (1,))] == "missing"
    desk2 = Desk(TOKEN)
    assert desk2.submit(ask()) == ""


def test_the_token_and_where_to_ask_are_written_owner_only(tmp_path):
    from verlprof.runtime.request_desk import write_descriptor

    write_descriptor(str(tmp_path), TOKEN, {"actor": "verlprof-controller-x"})
    token = tmp_path / ".verlprof-token"
    assert token.read_text() == TOKEN and (token.stat().st_mode & 0o777) == 0o600
    assert json.loads((tmp_path / ".verlprof-on-demand.json").read_text())["actor"] == \
        "verlprof-controller-x"
    assert os.path.basename(str(token)) == ".verlprof-token"


def test_the_plan_shows_the_armed_ranks_and_their_launch_command(tmp_path):
    import io

    from rich.console import Console

    from verlprof.plan.render import render_plan

    out = io.StringIO()
    render_plan(armed_plan(tmp_path), Console(file=out, width=400))
    text = out.getvalue()
    assert f"armed for nsys (--tool nsys; launched under nsys with an open-ended window count): " \
           f"{GROUP} rank 1" in text
    (line,) = [ln for ln in text.splitlines() if ln.startswith(f"  {GROUP} rank 1: ")]
    assert "nsys profile" in line and "--capture-range-end=repeat " in line


def test_the_hourly_caps_forget_a_request_exactly_one_hour_after_it_was_accepted(
        tmp_path, monkeypatch):
    clock = [1_000.0]
    monkeypatch.setattr("verlprof.runtime.request_windows.time",
                        type("Clock", (), {"time": staticmethod(lambda: clock[0])}))
    controller, ranks, _, desk = on_demand_controller(tmp_path, max_requests_per_hour=1)
    for step, (name, later_s) in enumerate((("a", 0), ("b", 3599), ("c", 3600)), 1):
        clock[0] = 1_000.0 + later_s
        assert desk.submit(ask(id=name, steps="next:1")) == ""
        with controller.step(step):
            phases(ranks)
    assert desk.decision(TOKEN, "a").accepted
    assert desk.decision(TOKEN, "b").reason == (  # 3599 s later: a still counts
        "1 requests accepted in the last hour, the cap is 1 (trainer.profiler.on_demand."
        "max_requests_per_hour); try later")
    assert desk.decision(TOKEN, "c").accepted  # 3600 s later: a no longer counts
