"""Capture on demand, end to end: the demo trainer runs with no planned window and
``trainer.profiler.on_demand.enabled``; ``verlprof capture --wait`` from another process asks
it for the next two steps on one rank, with torch, and gets reports marked with who asked.

Both processes join this module's Ray cluster (the job with ``--ray-address``, the capture
from the address the job wrote next to its token)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

STEPS = 400
"""Enough steps for the capture to arrive while the job runs (a demo step is ~50 ms here)."""


def verlprof(*args: str) -> list:
    return [sys.executable, "-m", "verlprof.cli", *args]


def start_job(out, *overrides: str, steps: int = STEPS) -> subprocess.Popen:
    """The demo with no planned window, taking requests once its token is written."""
    import ray

    job = subprocess.Popen(
        verlprof("demo", "--ray-address", ray.get_runtime_context().gcs_address,
                 "trainer.profile_steps=[]", "++trainer.profiler.on_demand.enabled=true",
                 f"trainer.total_training_steps={steps}", f"++trainer.profiler.output_dir={out}",
                 *overrides),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while not (out / ".verlprof-on-demand.json").exists():
        if job.poll() is not None or time.monotonic() > deadline:
            job.kill()
            pytest.fail("the job never took requests: " + job.communicate()[0][-3000:])
        time.sleep(0.2)
    return job


def refuse_then_ask(job, out, refused_args, asked_args, stop_job=False):
    """One request that is refused and one with ``--wait``, sent at once (each client's start
    takes seconds on a busy machine: one after the other could miss the job); then the job's
    end (with ``stop_job``, asked for by SIGTERM as soon as ``--wait`` returned, after noting
    that the job still ran; killed if it outlives the test). Returns (refused, asked, the
    job's log, whether the job ran on after ``--wait`` returned)."""
    clients = []
    try:
        for args in (refused_args, [*asked_args, "--wait", "--timeout", "180"]):
            clients.append(subprocess.Popen(verlprof("capture", str(out), *args), text=True,
                                            stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        refused, asked = (subprocess.CompletedProcess(c.args, 0, *c.communicate(timeout=200))
                          for c in clients)
        ran_on = job.poll() is None
        if stop_job and ran_on:
            job.send_signal(signal.SIGTERM)  # finalize now: the rest of the run is not needed
        refused.returncode, asked.returncode = (c.returncode for c in clients)
        log = job.communicate(timeout=200)[0]
    finally:
        for process in (job, *clients):
            if process.poll() is None:
                process.kill()
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert asked.returncode == 0, asked.stdout + asked.stderr + log[-3000:]
    return refused, asked, log, ran_on


@pytest.mark.timeout(240)
def test_capture_next_two_steps_of_a_running_demo(ray_cluster, tmp_path):
    out = tmp_path / "out"
    job = start_job(out, "++trainer.profiler.tool=torch", steps=4000)
    refused, asked, _, ran_on = refuse_then_ask(
        job, out, ["--ranks", "7"], ["--steps", "next:2", "--ranks", "1", "--tool", "torch"],
        stop_job=True)
    # --wait returned while the job ran on: the traces were gathered after their last step
    assert ran_on, asked.stdout
    line = refused.stderr.strip().splitlines()[-1]
    assert line.startswith("verlprof: capture refused at step ") and line.endswith(
        ": ranks: actor_rollout_ref has ranks 0-1; 7 do not exist"), refused.stderr
    assert "accepted at step" in asked.stdout and "2 of 2 report(s) ok" in asked.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    entries = [e for e in manifest["reports"] if e["requested_by"]]
    assert len(entries) == 2 == len(manifest["reports"])
    first = entries[0]["steps"][0]
    assert [(e["group"], e["rank"], e["steps"], e["status"]) for e in entries] == [
        ("actor_rollout_ref", 1, [first], "ok"), ("actor_rollout_ref", 1, [first + 1], "ok")]
    assert all(os.path.getsize(out / e["path"]) > 0 and e["requested_at"] for e in entries)
    assert not (out / ".verlprof-token").exists()  # gone with the job


@pytest.mark.timeout(300)
def test_nsys_on_an_armed_rank_of_a_running_demo(ray_cluster, tmp_path):
    """Rank 1 is armed (open-ended nsys from launch); rank 0 is not: nsys there is refused
    naming the key, and one nsys window on rank 1 becomes a real report in the manifest."""
    out = tmp_path / "out"
    job = start_job(out, "++trainer.profiler.tool=nsys",
                    "++trainer.profiler.on_demand.nsys_ranks={actor_rollout_ref:[1]}")
    refused, asked, _, _ = refuse_then_ask(job, out, ["--ranks", "0"],
                                        ["--steps", "next:1", "--ranks", "1"])
    assert refused.stderr.strip().splitlines()[-1].endswith(
        "tool: nsys needs ranks armed at launch; actor_rollout_ref rank(s) 0 are not in "
        "trainer.profiler.on_demand.nsys_ranks (armed: 1); ask --tool torch"), refused.stderr
    assert "with nsys" in asked.stdout and "1 of 1 report(s) ok" in asked.stdout, asked.stdout
    (entry,) = json.loads((out / "manifest.json").read_text())["reports"]
    assert (entry["group"], entry["rank"], entry["status"]) == ("actor_rollout_ref", 1, "ok")
    assert entry["path"].endswith(".nsys-rep") and entry["requested_by"]
    assert os.path.getsize(out / entry["path"]) > 0
