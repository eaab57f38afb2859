"""The controller's promises the window tests leave open (found by the mutation check of
runtime/controller.py, docs/reliability.md): a failed stop never hides the exception that
ended a step, finalize never raises for a rank and waits a bounded margin longer than the
ranks, a changed plan is taken before the first step only, and the controller's own ranges
carry the labels its nsys report is read by."""

from __future__ import annotations

import dataclasses
import logging
from contextlib import contextmanager

import pytest

from tests.unit.test_controller import GROUP, R0, R1, Rank, Sent, controller_of, plan_of
from verlprof.config.schema import ComponentConfig, ComponentsConfig, ProfilingConfig
from verlprof.config.topology import Topology
from verlprof.errors import ProfilingRuntimeError
from verlprof.manifest import read_manifest
from verlprof.plan import build_plan
from verlprof.runtime import controller as controller_module
from verlprof.runtime import run_context
from verlprof.runtime.controller import ProfileController
from verlprof.runtime.teardown import Settled
from verlprof.worker.identity import node_id


class Timed(Sent):
    """The in-process layer, also noting the timeout each fan-out was given."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.timeouts = {}

    def call(self, method, targets, args, **kwargs):
        self.timeouts[method] = kwargs.get("timeout_s")
        return super().call(method, targets, args, **kwargs)


@pytest.mark.parametrize("finalize_s, waited_s", [(100.0, 115.0), (20.0, 27.0), (400.0, 430.0)])
def test_finalize_waits_the_ranks_own_timeout_and_a_bounded_margin(tmp_path, finalize_s,
                                                                   waited_s):
    rpc = Timed()
    controller, _, _ = controller_of(plan_of(tmp_path, [1]), rpc=rpc,
                                     finalize_timeout_s=finalize_s)
    controller.finalize()
    assert rpc.timeouts["verlprof_finalize"] == pytest.approx(waited_s)


@pytest.mark.parametrize("policy", ["continue", "raise"])
def test_a_failing_stop_never_hides_the_exception_that_ended_the_step(tmp_path, policy):
    controller, ranks, _ = controller_of(plan_of(tmp_path, [1, 2]), on_rank_failure=policy)
    ranks[0].faults["verlprof_stop"] = OSError("disk full")
    with pytest.raises(ValueError, match="the trainer's own error"), controller.step(1):
        raise ValueError("the trainer's own error")
    assert "actor_rollout_ref rank 0: verlprof_stop failed: OSError: disk full" in \
        controller.context.warnings


def test_a_failing_stop_of_the_start_fan_out_never_hides_its_interrupt(tmp_path):
    controller, ranks, _ = controller_of(plan_of(tmp_path, [1]), on_rank_failure="raise")
    ranks[1].faults["verlprof_start"] = KeyboardInterrupt()
    ranks[0].faults["verlprof_stop"] = OSError("disk full")
    with pytest.raises(KeyboardInterrupt), controller.step(1):
        pytest.fail("the step must not run")


def test_finalize_never_raises_for_a_rank_and_says_why_its_reports_are_missing(tmp_path):
    controller, ranks, _ = controller_of(plan_of(tmp_path, [1]), on_rank_failure="raise")
    with controller.step(1):
        pass
    with controller.step(2):  # nothing planned: a window may still be open for stop_all
        pass
    ranks[1].faults["verlprof_finalize"] = RuntimeError("no room")
    manifest = controller.finalize()
    lost = [e for e in manifest.reports if e.rank == 1]
    assert [e.status for e in lost] == ["missing"]
    assert lost[0].reason.startswith("verlprof_finalize failed: RuntimeError: no room"), \
        lost[0].reason
    assert [e.status for e in manifest.reports if e.rank == 0] == ["ok"]


def test_finalize_with_a_window_open_stops_it_without_raising_for_a_rank(tmp_path):
    controller, ranks, _ = controller_of(plan_of(tmp_path, [1, 2], continuous=True),
                                         on_rank_failure="raise")
    with controller.step(1):  # the window 1-2 stays open
        pass
    ranks[0].faults["verlprof_stop"] = OSError("disk full")
    manifest = controller.finalize()
    assert "actor_rollout_ref rank 0: verlprof_stop failed: OSError: disk full" in \
        manifest.warnings


def test_registering_a_group_the_plan_does_not_know_or_of_another_size_is_one_line(tmp_path):
    plan = build_plan(ProfilingConfig(steps=(1,), tool="torch", output_dir=str(tmp_path),
                                      components=ComponentsConfig(
                                          actor=ComponentConfig(ranks=(0,)))),
                      Topology.of({GROUP: 2, "critic": 1}, cuda=False))
    controller = ProfileController(plan, rpc=Sent(), echo=False, preflight=False,
                                   handle_signals=False)
    with pytest.raises(ProfilingRuntimeError) as unknown:
        controller.register_group("rm", [Rank(0)])
    assert str(unknown.value) == "group 'rm' is not in the plan (actor_rollout_ref, critic)"
    with pytest.raises(ProfilingRuntimeError) as size:
        controller.register_group(GROUP, [Rank(0)])
    assert str(size.value) == ("group 'actor_rollout_ref' has 1 actors but the plan expects "
                               "world size 2")


def test_a_new_plan_is_followed_before_the_first_step_only(tmp_path):
    controller, _, _ = controller_of(plan_of(tmp_path, [1, 2]))
    more_steps = plan_of(tmp_path, [1, 2, 3])  # the registered ranks get another window
    assert more_steps.process(*R0) != controller.plan.process(*R0)
    with pytest.raises(ProfilingRuntimeError) as changed:
        controller.replan(more_steps)
    assert str(changed.value) == ("no new plan after a step or for registered "
                                  "[('actor_rollout_ref', 0), ('actor_rollout_ref', 1)]")
    one_rank = plan_of(tmp_path, [1, 2], ranks=(0,))
    with pytest.raises(ProfilingRuntimeError, match=r"registered \[\('actor_rollout_ref', 1\)"):
        controller.replan(one_rank)
    # the same processes planned into another directory: moved to this run's directory
    elsewhere = plan_of(tmp_path / "elsewhere", [1, 2])
    followed = controller.replan(elsewhere)
    assert controller.plan is followed and followed.output_dir == str(tmp_path)
    assert followed.process(*R1) == controller.plan.process(*R1)
    with controller.step(1):
        pass
    with pytest.raises(ProfilingRuntimeError, match="^no new plan after a step or for "
                                                    r"registered \[\]$"):
        controller.replan(followed)


def test_a_note_is_logged_with_the_verlprof_prefix_and_kept(tmp_path, caplog):
    controller, _, _ = controller_of(plan_of(tmp_path, [1]))
    with caplog.at_level(logging.WARNING, logger="verlprof"):
        controller.note("first", "second")
    assert [r.getMessage() for r in caplog.records] == ["verlprof: first", "verlprof: second"]
    assert list(controller.finalize().warnings[-2:]) == ["first", "second"]


class AttachedCapture:
    """The controller's own nsys capture as it is under nsys, reduced to what it was asked."""

    def __init__(self, plan):
        self.attached = True
        self.labels = []

    def unwrapped_warning(self):
        return None

    @contextmanager
    def opening(self, window):
        yield

    @contextmanager
    def range(self, label):
        self.labels.append(label)
        yield

    def close(self):
        pass

    def collect(self, timeout_s, node_id=""):
        return []


def test_under_nsys_the_controller_labels_its_ranges_and_reuses_its_report_folder(
        tmp_path, monkeypatch):
    monkeypatch.setattr(controller_module, "ControllerCapture", AttachedCapture)
    (tmp_path / "controller").mkdir()  # an earlier run's controller reports
    controller, ranks, _ = controller_of(plan_of(tmp_path, [2]))
    with controller.step(2), controller.range("reward"):
        pass
    assert controller._controller.labels == ["step/2", "controller/reward"]
    controller.finalize()


def test_a_controller_not_started_under_its_planned_nsys_says_so(tmp_path):
    plan = plan_of(tmp_path, [1])
    argv = ("nsys", "profile", "-o", str(tmp_path / "controller" / "controller"))
    unwrapped = dataclasses.replace(plan, controller=dataclasses.replace(
        plan.controller, launch_argv=argv), controller_options_key="trainer.controller_opts")
    controller = ProfileController(unwrapped, rpc=Sent(), echo=False, preflight=False,
                                   handle_signals=False)
    assert any(w.startswith("trainer.controller_opts is set but this controller process does "
                            "not run under nsys") for w in controller.finalize().warnings)


def test_raise_names_every_rank_that_failed_in_one_line(tmp_path):
    controller, ranks, _ = controller_of(plan_of(tmp_path, [1]), on_rank_failure="raise")
    for rank in ranks:
        rank.faults["verlprof_start"] = OSError(f"disk {rank.rank} full")
    with pytest.raises(ProfilingRuntimeError) as info, controller.step(1):
        pass
    assert str(info.value) == ("actor_rollout_ref rank 0: verlprof_start failed: OSError: disk 0 "
                               "full; actor_rollout_ref rank 1: verlprof_start failed: "
                               "OSError: disk 1 full")


def test_waiting_for_the_profilers_settles_each_node_and_gathers_what_they_wrote_at_exit(
        tmp_path, monkeypatch, caplog):
    asked, gathered = [], []

    def settle(by_node, timeout_s, owner):
        asked.append((by_node, timeout_s, owner))
        return Settled(problems=("node-b did not answer",), ended_agents=(4242,))

    def collect(manifest, plan, timeout_s, local_node):
        gathered.append(timeout_s)
        return dataclasses.replace(manifest, warnings=manifest.warnings + ("late",)), ["late"]

    monkeypatch.setattr(controller_module, "settle_on_nodes", settle)
    monkeypatch.setattr(controller_module, "collect_at_exit", collect)
    controller, _, _ = controller_of(plan_of(tmp_path, [1]))
    identities = controller.context.identity
    for (target, identity), node, profiler in zip(sorted(identities.items()), ("a", "b"),
                                                  (11, 22)):
        identities[target] = dataclasses.replace(identity, node_id=node, profiler_pid=profiler)
    with caplog.at_level(logging.INFO, logger="verlprof"):
        assert controller.wait_for_profilers() == ["node-b did not answer"]  # not finalized
    assert asked == [({"a": [11], "b": [22]}, 120.0, str(tmp_path))] and gathered == []
    assert "verlprof: ended 1 nsys agent(s) nsys left behind (pid 4242)" in caplog.messages
    first = controller.finalize()
    assert controller.wait_for_profilers(5.0) == ["node-b did not answer", "late"]
    assert gathered == [5.0]
    assert read_manifest(str(tmp_path)).warnings[-1] == "late"  # written again at once
    rewritten = controller.finalize()
    assert rewritten is not first and rewritten is controller.finalize()
    assert rewritten.warnings[-1] == "late"
    assert controller.context.warnings[-2:] == ["node-b did not answer", "late"]


def test_the_controller_is_listed_in_the_manifest_as_rank_0_of_its_own_group(tmp_path):
    controller, _, _ = controller_of(plan_of(tmp_path, [1]))
    listed = controller.finalize().controller
    assert listed is not None
    assert (listed.group, listed.rank, listed.host, listed.pid, listed.clock_offset_ns,
            listed.clock_error_ns, listed.under_profiler) == (
        "controller", 0, controller.host, controller.pid, 0, 0, False)
    assert listed.node_id == node_id()


def test_a_rank_that_never_said_where_it_runs_has_its_reports_missing_from_nowhere(tmp_path):
    controller, ranks, rpc = controller_of(plan_of(tmp_path, [1]))
    del controller.context.identity[R1]  # its configure answer never came
    rpc.kill(R1, "SIGKILL")
    manifest = controller.finalize()
    (lost,) = [e for e in manifest.reports if e.rank == 1]
    assert (lost.status, lost.host, lost.pid) == ("missing", "", 0)


def _unwritable(monkeypatch, error: BaseException) -> None:
    def write(manifest, output_dir):
        raise error
    monkeypatch.setattr(run_context, "write_manifest", write)


def test_with_controller_a_manifest_that_cannot_be_written_is_raised_when_nothing_else_was(
        tmp_path, monkeypatch):
    controller, _, _ = controller_of(plan_of(tmp_path, [1]))
    _unwritable(monkeypatch, OSError(28, "No space left on device"))
    with pytest.raises(ProfilingRuntimeError, match="^trainer.profiler.output_dir: cannot "
                                                    "write manifest.json to "), controller:
        pass


def test_with_controller_the_trainers_exception_wins_and_the_failed_finalize_is_logged(
        tmp_path, monkeypatch, caplog):
    controller, _, _ = controller_of(plan_of(tmp_path, [1]))
    _unwritable(monkeypatch, OSError(28, "No space left on device"))
    with pytest.raises(ValueError, match="the trainer's"), \
            caplog.at_level(logging.ERROR, logger="verlprof"), controller:
        raise ValueError("the trainer's")
    assert [m for m in caplog.messages if m.startswith("verlprof: finalize after ValueError "
                                                       "failed: ")], caplog.messages


def test_with_controller_an_interrupt_inside_finalize_is_passed_on(tmp_path, monkeypatch):
    controller, _, _ = controller_of(plan_of(tmp_path, [1]))
    _unwritable(monkeypatch, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt), controller:
        pass
