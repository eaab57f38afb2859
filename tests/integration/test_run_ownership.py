"""One run never orphans another's reports (issue 19, part 2), with real demo runs (torch
backend, one profiled rank, one or two steps) on a live Ray cluster.

(b) two runs at once on one directory: a real ``verlprof demo`` (its own process) holds it;
    the second run (``existing_run=refuse``) refuses before it starts anything, naming the
    first run's host and PID.
(a) a re-run into the same directory once the first has ended is refused in one line
    (``existing_run=refuse``) and touches nothing; with
    ``trainer.profiler.existing_run=new_subdir`` it writes into ``<output_dir>/<run id>/``.
    Afterwards every report on disk is in exactly one manifest, and ``verlprof report`` gives
    each run's own figures (the directory's own run, then ``--run ID``), in its own summary.

One scenario, two real runs (the first one serves both parts: a real run costs ~10-20 s).
"""

from __future__ import annotations

import collections
import csv
import os
import socket
import subprocess
import sys
import time

import pytest

from tests.integration.runtime_helpers import CONFIG, files_on_disk, run_case
from verlprof import paths
from verlprof.cli import main as verlprof_main
from verlprof.errors import ConfigError
from verlprof.manifest import read_manifest
from verlprof.runtime import run_lock

pytestmark = pytest.mark.integration

ONE_RANK = ["trainer.profiler.tool=torch", "trainer.n_gpus_per_node=1",
            "actor_rollout_ref.actor.profile_ranks=[0]",
            "actor_rollout_ref.rollout.profile_ranks=[]", "critic.enable=false",
            "reward_model.enable=false"]
"""The smallest real run: one actor_rollout_ref rank (profiled), no critic, no reward model."""
REFUSE = "trainer.profiler.existing_run=refuse"
"""Not the default (move_aside: tests/unit/test_ownership.py), the policy that refuses."""


def run_of(step: int):
    """A run of ``step`` training steps profiling the last one."""
    return [*ONE_RANK, f"trainer.total_training_steps={step}", f"trainer.profile_steps=[{step}]"]


def listed(out: str, manifests) -> collections.Counter:
    """How many manifests list each report (paths relative to ``out``)."""
    seen: collections.Counter = collections.Counter()
    for manifest in manifests:
        base = os.path.relpath(manifest["output_dir"], out)
        for entry in manifest["reports"]:
            seen[os.path.normpath(os.path.join(base, entry["path"]))] += 1
    return seen


def disk(out: str) -> dict:
    return {os.path.relpath(os.path.join(r, f), out): os.stat(os.path.join(r, f)).st_mtime_ns
            for r, _, fs in os.walk(out) for f in fs}


def summary_steps(run_dir: str) -> set:
    with open(os.path.join(run_dir, paths.SUMMARY_DIR, "summary.csv"), newline="") as handle:
        return {int(row["step"]) for row in csv.DictReader(handle)}


def test_runs_on_one_directory_never_orphan_each_others_reports(ray_cluster, tmp_path, capsys):
    import ray

    out = str(tmp_path)
    # (b) a real `verlprof demo` (a driver of its own) holds the directory...
    address = ray.get_runtime_context().gcs_address
    first_run = subprocess.Popen(
        [sys.executable, "-m", "verlprof.cli", "demo", "--config", CONFIG,
         "--ray-address", address, f"trainer.profiler.output_dir={out}", *run_of(1)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        holder = None
        while holder is None and first_run.poll() is None:  # its claim comes before anything
            holder = run_lock.read_lock(out)
            time.sleep(0.02)
        assert holder is not None, first_run.communicate()[0]
        # ...so a second run on it refuses before it starts anything, naming host and PID
        with pytest.raises(ConfigError) as refused:
            run_case(out, [*run_of(2), REFUSE])
        message = str(refused.value)
        assert message.startswith("trainer.profiler.output_dir: ") and "\n" not in message
        assert f"in use by run {holder.run_id} (host {socket.gethostname()}, " \
               f"pid {first_run.pid}, started " in message
        output, _ = first_run.communicate(timeout=300)
    finally:
        if first_run.poll() is None:
            first_run.kill()
            first_run.wait()
    assert first_run.returncode == 0, output
    assert f"verlprof run: {holder.run_id}" in output
    first = read_manifest(out).to_dict()
    assert first["run_id"] == holder.run_id
    assert listed(out, [first]) == collections.Counter(files_on_disk(out))  # none of the 2nd
    assert not os.path.exists(os.path.join(out, run_lock.LOCK_NAME))

    # (a) a re-run into the same directory: refused in one line, nothing on disk touched...
    before = disk(out)
    with pytest.raises(ConfigError) as refused:
        run_case(out, [*run_of(2), REFUSE])
    message = str(refused.value)
    assert message.startswith("trainer.profiler.output_dir: ") and "\n" not in message
    assert f"run {first['run_id']} (host {first['controller']['host']}, written " in message
    assert "trainer.profiler.existing_run=new_subdir" in message
    assert disk(out) == before
    # ...or, with existing_run=new_subdir, written into <output_dir>/<run id>/
    _, second = run_case(out, [*run_of(2), "trainer.profiler.existing_run=new_subdir"])
    assert second["output_dir"] == os.path.join(out, second["run_id"])
    assert second["manifest"]["run_id"] == second["run_id"] != first["run_id"]
    assert {k: v for k, v in disk(out).items() if not k.startswith(second["run_id"])} == before

    # every report on disk is in exactly one manifest
    on_disk = collections.Counter(files_on_disk(out))
    assert len(on_disk) == 2 and listed(out, [first, second["manifest"]]) == on_disk
    assert not any(name == run_lock.LOCK_NAME for _, _, fs in os.walk(out) for name in fs)

    # verlprof report gives each run's own figures, in each run's own summary
    capsys.readouterr()
    assert verlprof_main(["report", out, "--no-picture"]) == 0
    assert f"also keeps 1 other run(s) ({second['run_id']})" in capsys.readouterr().err
    assert verlprof_main(["report", out, "--no-picture", "--run", second["run_id"]]) == 0
    assert summary_steps(out) == {1} and summary_steps(second["output_dir"]) == {2}
