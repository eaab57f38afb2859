"""Fault 2: an exception inside a profiled step, Ctrl-C (KeyboardInterrupt) and SIGTERM of the
controller. In every case each started window is stopped, every report finalised (the manifest
written), no worker is left capturing and no nsys process is left running."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from tests.faults import harness, light

pytestmark = pytest.mark.integration

TWO_RANKS = ["trainer.total_training_steps=2", "trainer.profile_steps=[1,2]",
             "actor_rollout_ref.actor.profile_ranks=[0,1]",
             "actor_rollout_ref.rollout.profile_ranks=[]",
             "critic.enable=false", "reward_model.enable=false"]


def _check_first_window_only(out: str, manifest: dict, ranks=(0, 1), controller=True) -> None:
    """Step 1 was open when the fault hit: complete reports; step 2 never started."""
    status = harness.by_status(manifest)
    ok = sorted((e["group"], e["rank"], tuple(e["steps"])) for e in status["ok"])
    expected = [("actor_rollout_ref", r, (1,)) for r in ranks]
    if controller:
        expected.append(("controller", 0, (1,)))
    assert ok == sorted(expected)
    assert {e["reason"].split(":")[0] for e in status["missing"]} <= {
        "window never opened", "controller window [2] never opened"}
    assert harness.check_reports(out, manifest["reports"]) == len(expected)
    assert not harness.raw_leftovers(out)


def _light(tmp_path, **kwargs):
    plan = light.make_plan(str(tmp_path), [*TWO_RANKS, "trainer.controller_nsight_options=null"])
    controller = light.controller_for(plan, **kwargs)
    actors = light.start_group(plan)
    controller.register_group("actor_rollout_ref", actors)
    harness.COUNTS["light_runs"] += 1
    return controller, actors


def test_exception_in_a_profiled_step(ray_cluster, tmp_path):
    """Rank 0 raises inside a phase of step 1 (both windows open); the trainer's step fails."""
    import ray

    controller, actors = _light(tmp_path)
    try:
        with pytest.raises(ray.exceptions.RayTaskError, match="planted"), controller, \
                controller.step(1):
            light.step_work(actors)
            ray.get([actors[0].fail.remote("planted"), actors[1].update_actor.remote()])
        assert all(s.open_window is None and s.finalized for s in light.statuses(actors))
        manifest = harness.read_manifest(str(tmp_path))
    finally:
        light.shutdown(controller, actors)
    _check_first_window_only(str(tmp_path), manifest, controller=False)


def test_keyboard_interrupt_of_the_controller(ray_cluster, tmp_path):
    """Ctrl-C in the controller's main thread while step 1's windows are open."""
    controller, actors = _light(tmp_path)
    try:
        with pytest.raises(KeyboardInterrupt), controller, controller.step(1):
            light.step_work(actors)
            assert [s.open_window is not None for s in light.statuses(actors)] == [1, 1]
            signal.raise_signal(signal.SIGINT)
            pytest.fail("SIGINT did not interrupt")
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
        assert all(s.open_window is None and s.finalized for s in light.statuses(actors))
        manifest = controller.finalize().to_dict()  # the one written on the way out
    finally:
        light.shutdown(controller, actors)
    _check_first_window_only(str(tmp_path), manifest, controller=False)
    assert harness.read_manifest(str(tmp_path))["reports"] == json.loads(
        json.dumps(manifest["reports"]))


def test_sigterm_of_the_controller_process(ray_cluster, tmp_path):
    """SIGTERM to the controller process (here: this one, main thread) mid-step: windows
    stopped, reports finalised, then the previous SIGTERM handler runs and the process exits
    (SystemExit 143)."""
    received = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    controller, actors = _light(tmp_path)
    try:
        with pytest.raises(SystemExit) as info, controller, controller.step(1):
            light.step_work(actors)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
            pytest.fail("SIGTERM did not interrupt")
        assert info.value.code == 143
        assert received == [signal.SIGTERM]  # passed on after finalising
        assert all(s.open_window is None and s.finalized for s in light.statuses(actors))
        manifest = controller.finalize().to_dict()
    finally:
        signal.signal(signal.SIGTERM, previous)
        light.shutdown(controller, actors)
    _check_first_window_only(str(tmp_path), manifest, controller=False)


def test_sigterm_of_verlprof_demo(ray_cluster, tmp_path):
    """``verlprof demo`` gets SIGTERM while step 1's windows are open (a rank is in a long
    phase): it passes SIGTERM to the controller (the TaskRunner actor, itself under nsys),
    which stops every window and finalises; the demo exits 143 with the manifest written."""
    out = str(tmp_path / "out")
    marker = str(tmp_path / "in_phase.json")
    cmd = [str(harness.VENV_BIN / "verlprof"), "demo", "--config", harness.CONFIG,
           "--ray-address", ray_cluster.address, f"trainer.profiler.output_dir={out}",
           *TWO_RANKS,
           "+demo.faults=[{group:actor_rollout_ref,rank:0,phase:generate_sequences,step:1,"
           f"action:sleep,seconds:4,marker:'{marker}'}}]"]
    harness.COUNTS["demo_runs"] += 1
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=str(harness.ROOT))
    try:
        deadline = time.monotonic() + 180
        while not os.path.exists(marker):
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "the planted phase never started"
            time.sleep(0.2)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, output
    assert time.monotonic() - sent < 120
    assert "verlprof: terminated (SIGTERM)" in output
    manifest = harness.read_manifest(out)
    _check_first_window_only(out, manifest)
    assert "the run was stopped by SIGTERM; windows that had not opened by then stay " \
           "missing" in manifest["warnings"]  # the manifest says why, not only the log
    harness.assert_no_leftovers()


def test_a_second_sigterm_stops_the_demos_wait_and_leaves_the_run_to_collect(ray_cluster,
                                                                            tmp_path):
    """The first SIGTERM asks the controller to finalise, but a rank is stuck for a minute,
    so finalising waits on it; the second SIGTERM stops the driver's wait at once (before, it
    was held without a word until the stuck phase ended) and says how to get the reports:
    ``verlprof collect`` then places what the processes wrote and nothing is left running."""
    out = str(tmp_path / "out")
    marker = str(tmp_path / "in_phase.json")
    log = tmp_path / "demo.log"
    cmd = [str(harness.VENV_BIN / "verlprof"), "demo", "--config", harness.CONFIG,
           "--ray-address", ray_cluster.address, f"trainer.profiler.output_dir={out}",
           *TWO_RANKS, "trainer.controller_nsight_options=null",
           "+demo.faults=[{group:actor_rollout_ref,rank:0,phase:generate_sequences,step:1,"
           f"action:sleep,seconds:60,marker:'{marker}'}}]"]
    harness.COUNTS["demo_runs"] += 1
    with open(log, "w") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, text=True,
                                cwd=str(harness.ROOT))
    try:
        deadline = time.monotonic() + 180
        while not os.path.exists(marker):
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the planted phase never started"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        while "send it again to stop waiting" not in log.read_text():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        again = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    output = log.read_text()
    assert proc.returncode == 143, output
    assert time.monotonic() - again < 40, output  # not the stuck minute
    assert f"then `verlprof collect {out}` places them" in output
    deadline = time.monotonic() + 60
    while "ended without finalize" not in (status := harness.verlprof_cli("status", out)).stdout:
        assert time.monotonic() < deadline, status.stdout + status.stderr
        time.sleep(1)
    collected = harness.verlprof_cli("collect", out, "--timeout", "60")
    assert collected.returncode in (0, 1), collected.stdout + collected.stderr
    manifest = harness.read_manifest(out)
    assert manifest["running"] is False
    assert all(e["status"] == "missing" and e["reason"] for e in manifest["reports"]
               if e["steps"] == [2])  # step 2 never opened
    harness.assert_no_leftovers()


def test_handlers_only_in_main_thread(ray_cluster, tmp_path):
    """Signal handlers are installed only from the main thread and only over default ones."""
    import threading

    plan = light.make_plan(str(tmp_path), ["trainer.profile_steps=null"])
    seen = {}

    def enter():
        with light.controller_for(plan) as controller:
            seen["installed"] = controller._signals.installed

    thread = threading.Thread(target=enter)
    thread.start()
    thread.join()
    assert seen == {"installed": False}
    ignored = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with light.controller_for(plan):
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN  # left alone
            assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGTERM, ignored)
