"""A job that dies keeps every finished window: ``verlprof demo``'s driver killed with SIGKILL
in the third of four profiled steps (real Ray, real nsys). The manifest on disk is the running
one (``running: true``); ``verlprof status`` says the run ended without finalize;
``verlprof collect`` places what the processes left (nsys 2022.4 writes a ``repeat:N``
session's reports when its process ends: steps 1-2 ``ok``, step 3 cut short, step 4 never
opened), the controller's own nsys reports the same way, and ``verlprof report`` summarises
it."""

from __future__ import annotations

import os

import pytest

from tests.faults import harness

pytestmark = pytest.mark.integration

FOUR_STEPS = ["trainer.total_training_steps=4", "trainer.profile_steps=[1,2,3,4]",
              "trainer.n_gpus_per_node=1", "actor_rollout_ref.actor.profile_ranks=[0]",
              "actor_rollout_ref.rollout.profile_ranks=[]", "critic.enable=false",
              "reward_model.enable=false"]  # the controller under nsys too, as shipped


verlprof = harness.verlprof_cli


def test_a_driver_killed_after_two_of_four_profiled_steps(ray_cluster, ray_head, tmp_path):
    out = str(tmp_path / "out")
    marker = str(tmp_path / "step3.json")
    harness.kill_demo_at([
        "--config", harness.CONFIG, "--ray-address", ray_head.address,
        f"trainer.profiler.output_dir={out}", *FOUR_STEPS,
        "+demo.faults=[{group:actor_rollout_ref,rank:0,phase:update_actor,step:3,"
        f"action:sleep,seconds:120,marker:'{marker}'}}]"], marker)  # in step 3: 1-2 closed
    running = harness.read_manifest(out)
    assert running["running"] is True
    closed = [e for e in running["reports"] if e["steps"] in ([1], [2])]
    assert len(closed) == 2 and all(e["status"] == "ok" or e["reason"].startswith("pending")
                                    for e in closed)

    status = harness.wait_until_ended(out)
    assert status.returncode == 0
    assert f"run `verlprof collect {out}` to place what it left" in status.stdout

    early = verlprof("report", out, "--no-picture", "--no-trace")  # before collect: it says so
    assert early.returncode == 0, early.stdout + early.stderr
    assert f"run `verlprof collect {out}` to place what it left" in \
        " ".join(early.stdout.split()), early.stdout

    collected = verlprof("collect", out, "--timeout", "60")
    assert collected.returncode == 1, collected.stdout + collected.stderr  # step 4: missing
    manifest = harness.read_manifest(out)
    assert manifest["running"] is False
    assert not {".verlprof.lock", ".verlprof-reserve"} & set(os.listdir(out))  # as finalize
    for group in ("actor_rollout_ref", "controller"):  # the controller's: never listed before
        by_step = {e["steps"][0]: e for e in manifest["reports"] if e["group"] == group}
        assert sorted(by_step) == [1, 2, 3, 4], manifest["reports"]
        assert [by_step[s]["status"] for s in (1, 2)] == ["ok", "ok"], collected.stdout
        assert by_step[3]["status"] in ("incomplete", "ok", "missing")
        assert by_step[4]["status"] == "missing"
        assert by_step[4]["reason"].startswith("window never opened: the run ended without "
                                               "finalize")
        assert harness.check_reports(out, [by_step[1], by_step[2]]) == 2
        assert f"{by_step[4]['path']}: missing: window never opened" in collected.stdout

    report = verlprof("report", out)
    assert report.returncode == 0, report.stdout + report.stderr
    assert "step0001" in report.stdout or "1" in report.stdout
    assert "in no manifest" not in report.stdout + report.stderr  # every file is listed
    assert os.path.isfile(os.path.join(out, "summary", "summary.csv"))
    assert "the run ended without finalize" in verlprof("status", out).stdout
    harness.assert_no_leftovers()
