"""The controller's defaults, as a trainer gets them by passing the plan alone (found untested
by the mutation check, docs/reliability.md): it says where it runs, checks before any worker
starts, routes signals inside ``with controller:`` and tells the console of a failing finish
hook."""

from __future__ import annotations

import dataclasses
import signal

import pytest

from tests.unit.test_controller import GROUP, Rank, Sent, plan_of
from verlprof.plan_model import FinishHookPlan
from verlprof.runtime import controller as controller_module
from verlprof.runtime.controller import ProfileController


@pytest.fixture
def preflights(monkeypatch):
    """Each preflight call the controller makes: (timeout_s, dry_run)."""
    calls = []
    monkeypatch.setattr(controller_module, "check_before_start",
                        lambda plan, timeout_s, dry_run: calls.append((timeout_s, dry_run)))
    return calls


def test_by_default_it_prints_its_line_and_preflights_with_the_dry_run(tmp_path, capsys,
                                                                        preflights):
    controller = ProfileController(plan_of(tmp_path, [1]), rpc=Sent())
    assert capsys.readouterr().out.startswith("verlprof controller: host=")
    assert preflights == [(60.0, True)]
    assert controller.targets == []  # nothing registered yet
    ProfileController(plan_of(tmp_path / "quick", [1]), rpc=Sent(), echo=False,
                      preflight="quick", preflight_timeout_s=5.0)
    ProfileController(plan_of(tmp_path / "none", [1]), rpc=Sent(), echo=False, preflight=False)
    assert preflights == [(60.0, True), (5.0, False)]


def test_by_default_with_controller_routes_sigterm_and_gives_it_back(tmp_path, preflights):
    before = signal.getsignal(signal.SIGTERM)
    controller = ProfileController(plan_of(tmp_path, [1]), rpc=Sent(), echo=False)
    with controller:
        assert signal.getsignal(signal.SIGTERM) != before
    assert signal.getsignal(signal.SIGTERM) == before
    quiet = ProfileController(plan_of(tmp_path / "off", [1]), rpc=Sent(), echo=False,
                              handle_signals=False)
    with quiet:
        assert signal.getsignal(signal.SIGTERM) == before


def test_a_controller_with_no_group_registered_still_writes_its_manifest(tmp_path, preflights):
    controller = ProfileController(plan_of(tmp_path, [1]), rpc=Sent(), echo=False)
    manifest = controller.finalize()
    assert [e.status for e in manifest.reports] == []
    assert (tmp_path / "manifest.json").is_file()


@pytest.mark.parametrize("echo", [True, False])
def test_a_failing_finish_hook_is_told_on_the_console_unless_quiet(tmp_path, capsys, preflights,
                                                                   echo):
    plan = dataclasses.replace(plan_of(tmp_path, [1]), finish_hook=FinishHookPlan(
        cmd="exit 3", targets=(), timeout_s=30.0, key="trainer.profiler.finish_hook.cmd"))
    kwargs = {} if echo else {"echo": False}
    controller = ProfileController(plan, rpc=Sent(), handle_signals=False, **kwargs)
    controller.register_group(GROUP, [Rank(0), Rank(1)])
    with controller.step(1):
        pass
    manifest = controller.finalize()
    told = capsys.readouterr().err
    assert any("finish_hook" in w for w in manifest.warnings), manifest.warnings
    assert ("trainer.profiler.finish_hook.cmd" in told) is echo, told
    controller.note("a later line")  # kept after the hook's, for wait_for_profilers
    assert controller.context.warnings == [*manifest.warnings, "a later line"]


def test_an_unknown_failure_policy_is_refused_in_one_whole_line(tmp_path):
    with pytest.raises(ValueError) as err:
        ProfileController(plan_of(tmp_path, [1]), rpc=Sent(), echo=False, preflight=False,
                          on_rank_failure="ignore")  # type: ignore[arg-type]
    assert str(err.value) == "on_rank_failure must be one of continue, raise, not 'ignore'"
