"""Capture on demand inside verl, without Ray or verl's trainer: a verl-layout config with
``global_profiler.steps`` empty and ``+trainer.profiler.on_demand.enabled=true`` gives the
bridge a controller that serves requests; verl's ``_start_profiling`` (wrapped by the bridge,
called by verl's fit at every step whether or not the step is profiled) is the step boundary
where they are decided and their windows open."""

from __future__ import annotations

import pytest

from tests.unit.test_controller import Rank, Sent
from verlprof.bridges.verl import bridge as verl_bridge
from verlprof.bridges.verl import trainer as verl_trainer
from verlprof.bridges.verl.driver_side import active_bridge, set_active_bridge
from verlprof.records import CaptureRequest
from verlprof.runtime.request_desk import Desk, LocalChannel
from verlprof.runtime.request_windows import OnDemand

TOKEN = "v" * 64
GROUP = "global_pool"
"""verl's resource pool: the worker group of its hybrid actor_rollout_ref workers."""


def verl_config(out, armed=None):
    profiler = {"output_dir": str(out), "on_demand": {"enabled": True}}
    if armed:
        profiler["on_demand"]["nsys_ranks"] = armed
    return {"trainer": {"device": "cpu", "n_gpus_per_node": 2, "nnodes": 1,
                        "profiler": profiler},
            "global_profiler": {"tool": "torch", "steps": [], "save_path": str(out)},
            "actor_rollout_ref": {"actor": {"profiler": {"enable": True, "ranks": [0]}}}}


class FakeTrainer:
    """What the bridge's wrapped hooks read of verl's trainer."""

    def __init__(self):
        self.global_steps = 0
        self.profiled = []

    def _start_profiling(self, do_profile):  # verl's own: never reached under the bridge
        self.profiled.append(do_profile)

    def _stop_profiling(self, do_profile):
        self.profiled.append(do_profile)


@pytest.fixture
def attached(tmp_path):
    desk = Desk(TOKEN)
    bridge = verl_bridge.attach(verl_config(tmp_path), requests=LocalChannel(desk), rpc=Sent(),
                                preflight=False, handle_signals=False, echo=False)
    ranks = [Rank(r) for r in range(2)]
    bridge.controller.register_group(GROUP, ranks)
    try:
        yield bridge, desk, ranks
    finally:
        if active_bridge() is bridge:
            bridge.finish()
        set_active_bridge(None)


def test_an_empty_verl_step_list_with_on_demand_still_serves_requests(attached):
    bridge, _, _ = attached
    plan = bridge.plan
    assert plan.source == "verl_global_profiler" and plan.steps == () and not plan.processes
    assert [g.name for g in plan.groups] == [GROUP]
    assert plan.enabled and plan.on_demand.enabled
    assert isinstance(bridge.controller._on_demand, OnDemand)


def test_requests_are_decided_at_verls_start_profiling_boundaries(attached):
    bridge, desk, ranks = attached
    start = verl_trainer._wrap_start(False)(FakeTrainer._start_profiling)
    stop = verl_trainer._wrap_stop(False)(FakeTrainer._stop_profiling)
    trainer = FakeTrainer()

    def verl_step(n):  # verl's fit: _start_profiling(do_profile) every step, False here
        trainer.global_steps = n
        start(trainer, False)
        stop(trainer, False)

    verl_step(1)
    assert desk.submit(CaptureRequest(id="a", token=TOKEN, steps="next:1", group=GROUP,
                                      ranks=(1,), requested_by="ann@login")) == ""
    assert "a" not in desk.decisions  # queued: decided at the next boundary, not before
    verl_step(2)
    decision = desk.decisions["a"]
    assert decision.accepted and decision.at_step == 2 and decision.steps == (2,)
    assert ranks[1].rpcs == [("verlprof_start", (2,)), ("verlprof_stop", (2,))]
    assert ranks[0].rpcs == []  # not asked: never called
    assert trainer.profiled == []  # verl's own hooks never ran: the bridge drives the step
    manifest = bridge.finish()
    (entry,) = manifest.reports
    assert (entry.group, entry.rank, entry.steps, entry.requested_by) == (GROUP, 1, (2,),
                                                                          "ann@login")


def test_nsys_armed_in_a_verl_config_plans_the_armed_rank(tmp_path):
    plan = verl_bridge.plan_of(verl_config(tmp_path, armed={GROUP: [1]}))
    (armed,) = plan.processes
    assert (armed.group, armed.rank, armed.backend, armed.windows) == (GROUP, 1, "nsys", ())
    assert "--capture-range-end=repeat" in armed.launch_argv


def test_an_armed_rank_never_asked_is_not_a_run_that_profiled_nothing(tmp_path, monkeypatch):
    """The launcher exits 3 when a planned rank wrote no report; an armed rank with no
    request has nothing to write (a planned one without its report still counts)."""
    from verlprof.bridges.verl import launch

    plan = verl_bridge.plan_of(verl_config(tmp_path, armed={GROUP: [1]}))
    monkeypatch.setattr(launch, "read_manifest", lambda _: type("M", (), {
        "reports": [], "warnings": []})())
    launch._exit_if_nothing_profiled(plan)  # returns: no SystemExit
    planned = verl_bridge.plan_of({**verl_config(tmp_path), "global_profiler": {
        "tool": "torch", "steps": [1], "save_path": str(tmp_path)}})
    assert planned.processes and planned.processes[0].windows
    with pytest.raises(SystemExit) as stop:
        launch._exit_if_nothing_profiled(planned)
    assert stop.value.code == launch.EXIT_NOTHING_PROFILED
