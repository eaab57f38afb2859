"""The finish hook (verl's ``global_profiler.finish_hook_cmd``): run once by the controller's
finalize after every report is gathered, with the output directory in its environment; its exit
status and output tail in the manifest; a failing hook loses no report and says so.

Driven through the in-process controller of test_controller.py (real mixin ranks, a capture
that writes one file per window), so no Ray is needed."""

from __future__ import annotations

import dataclasses
import json
import os

from tests.unit.test_controller import controller_of, plan_of, run
from verlprof.manifest import read_manifest
from verlprof.plan_model import FinishHookPlan
from verlprof.runtime.finish_hook import hook_env, run_command

LIST_REPORTS = ('find "$VERLPROF_OUTPUT_DIR" -path "*/step*" -type f | sort > '
                '"$VERL_PROFILE_SAVE_PATH/seen.txt"; '
                'python3 -c "import json,os; m=json.load(open(os.environ[\'VERLPROF_MANIFEST\']));'
                'print(len(m[\'reports\']), \'reports\')"; echo "rank=${VERL_PROFILE_RANK:-none}"')
"""Writes the report files it sees, then prints how many reports the manifest lists."""


def with_hook(plan, cmd, **fields):
    return dataclasses.replace(plan, finish_hook=FinishHookPlan(
        cmd=cmd, key="global_profiler.finish_hook_cmd", **fields))


def test_a_real_hook_sees_every_report_and_its_run_is_in_the_manifest(tmp_path, capsys):
    plan = with_hook(plan_of(tmp_path, [1, 2]), LIST_REPORTS)
    controller, ranks, _ = controller_of(plan)
    run(controller, ranks, [1, 2])
    manifest = controller.finalize()
    seen = (tmp_path / "seen.txt").read_text().split()
    assert seen == sorted(str(tmp_path / e.path) for e in manifest.reports)
    assert len(seen) == 4
    (hook,) = manifest.finish_hook
    assert (hook.where, hook.exit_status, hook.error) == ("controller", 0, None)
    assert hook.output_tail == "4 reports\nrank=none\n"
    assert hook.cmd == LIST_REPORTS and hook.host and hook.duration_s > 0
    assert read_manifest(str(tmp_path)) == manifest  # written again, with the run
    assert "finish hook" not in capsys.readouterr().err


def test_a_failing_hook_loses_no_report_and_says_so(tmp_path, capsys):
    plan = with_hook(plan_of(tmp_path, [1]), "echo uploading; echo 'no bucket' >&2; exit 3")
    controller, ranks, _ = controller_of(plan)
    controller.echo = True  # the console line (controller_of keeps the console quiet)
    run(controller, ranks, [1])
    manifest = controller.finalize()
    assert [e.status for e in manifest.reports] == ["ok", "ok"]
    for entry in manifest.reports:
        assert (tmp_path / entry.path).is_file()
    (hook,) = manifest.finish_hook
    assert (hook.exit_status, hook.error) == (3, "exited with status 3")
    assert hook.output_tail == "uploading\nno bucket\n"
    line = (f"global_profiler.finish_hook_cmd: the finish hook exited with status 3 on "
            f"controller ({hook.host}); every report is kept (its output tail is in "
            "manifest.json, finish_hook)")
    assert line in manifest.warnings
    err = capsys.readouterr().err
    assert err.count("finish hook") == 1 and f"verlprof: {line}" in err
    on_disk = json.loads((tmp_path / "manifest.json").read_text())
    assert on_disk["finish_hook"][0]["exit_status"] == 3 and line in on_disk["warnings"]


def test_a_hook_that_runs_too_long_is_killed_with_what_it_started(tmp_path):
    plan = with_hook(plan_of(tmp_path, [1]), "echo started; sleep 30 & sleep 30; echo never",
                     timeout_s=0.5)
    controller, ranks, _ = controller_of(plan)
    run(controller, ranks, [1])
    (hook,) = controller.finalize().finish_hook
    assert hook.exit_status is None and hook.error == "timed out after 0.5s and was killed"
    assert hook.output_tail == "started\n" and hook.duration_s < 10


def test_the_hook_runs_once_through_each_named_rank(tmp_path):
    plan = with_hook(plan_of(tmp_path, [1]), 'echo "$VERLPROF_GROUP $VERL_PROFILE_RANK"',
                     targets=(("actor_rollout_ref", 1), ("actor_rollout_ref", 0)))
    controller, ranks, _ = controller_of(plan)
    run(controller, ranks, [1])
    runs = controller.finalize().finish_hook
    assert [(r.where, r.exit_status, r.output_tail) for r in runs] == [
        ("actor_rollout_ref rank 1", 0, "actor_rollout_ref 1\n"),
        ("actor_rollout_ref rank 0", 0, "actor_rollout_ref 0\n")]


def test_finalize_twice_runs_the_hook_once(tmp_path):
    plan = with_hook(plan_of(tmp_path, [1]), 'echo x >> "$VERLPROF_OUTPUT_DIR/count"')
    controller, ranks, _ = controller_of(plan)
    run(controller, ranks, [1])
    controller.finalize()
    controller.finalize()
    assert (tmp_path / "count").read_text() == "x\n"


def test_an_old_manifest_without_the_new_records_still_loads(tmp_path):
    controller, ranks, _ = controller_of(plan_of(tmp_path, [1]))
    run(controller, ranks, [1])
    controller.finalize()
    data = json.loads((tmp_path / "manifest.json").read_text())
    for key in ("finish_hook", "verl_release"):
        del data[key]
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    old = read_manifest(str(tmp_path))
    assert old.finish_hook == () and old.verl_release is None


def test_run_command_reports_what_it_could_not_start(tmp_path, monkeypatch):
    monkeypatch.setattr("verlprof.runtime.finish_hook.SHELL", ("/no/such/sh", "-c"))
    result = run_command("true", hook_env(str(tmp_path), "nsys"), 5, "controller")
    assert result.exit_status is None and result.error.startswith("could not start /no/such/sh")
    env = hook_env("/out", "torch", ("global_pool", 2))
    assert env["VERL_PROFILE_SAVE_PATH"] == env["VERLPROF_OUTPUT_DIR"] == "/out"
    assert (env["VERL_PROFILE_RANK"], env["VERLPROF_MANIFEST"]) == ("2", "/out/manifest.json")
    assert os.path.basename(env["VERLPROF_MANIFEST"]) == "manifest.json"
