"""Fault 7: the disk under output_dir fills during a run.

Real nsys, real Ray, output_dir on a small tmpfs that this test fills between two profiled
steps. Before the fix, each worker waited the whole finalize timeout for reports nsys could
never write (its importer fails with "No space left on device"), and the manifest could not be
written at all. Now: no window opens once the disk is full (one line naming
``trainer.profiler.output_dir`` and the free space), training goes on, the wait for reports
ends as soon as the directory is known to be unwritable, the manifest is written in the room
held since the start and lists every planned report, and no temporary file stays behind."""

from __future__ import annotations

import errno
import os
import subprocess
import time

import pytest

from tests.faults import harness, light
from tests.helpers import mount_tmpfs
from verlprof.storage import RESERVE_NAME

pytestmark = pytest.mark.integration

TMPFS_SIZE = "66m"  # preflight wants 64 MiB free: the run starts, then the disk fills


@pytest.fixture
def small_disk(tmp_path):
    """A 66 MB tmpfs (root may mount one; where the machine forbids it, skip, or fail under
    CI=true; tests/unit/test_storage.py covers the full-disk logic without one)."""
    mount = tmp_path / "fs"
    mount_tmpfs(mount, f"size={TMPFS_SIZE}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(directory) -> int:
    """Write zeros until the file system says ENOSPC; return the bytes written."""
    written = 0
    block = b"\0" * (1 << 20)
    with open(os.path.join(directory, "filler"), "wb", buffering=0) as handle:
        while True:
            try:
                written += handle.write(block)
            except OSError as err:
                assert err.errno == errno.ENOSPC
                return written


def test_a_disk_that_fills_ends_profiling_in_bounded_time_and_keeps_the_manifest(
        ray_cluster, small_disk):
    out = str(small_disk / "out")
    plan = light.make_plan(out, [
        "trainer.total_training_steps=3", "trainer.profile_steps=[1,3]",
        "trainer.controller_nsight_options=null", "trainer.n_gpus_per_node=1",
        "actor_rollout_ref.actor.profile_ranks=[0]", "actor_rollout_ref.rollout.profile_ranks=[]",
        "critic.enable=false", "reward_model.enable=false"])
    controller = light.controller_for(plan, rpc_timeout_s=60.0, finalize_timeout_s=60.0,
                                      on_rank_failure="continue")
    actors = light.start_group(plan)
    controller.register_group("actor_rollout_ref", actors)
    harness.COUNTS["light_runs"] += 1
    trained = []
    try:
        with controller.step(1):
            trained.append(light.step_work(actors))
        with controller.step(2):
            fill(small_disk)  # the disk fills while training runs
            trained.append(light.step_work(actors))
        with controller.step(3):  # planned, but nothing more can be written
            trained.append(light.step_work(actors))
        assert light.statuses(actors)[0].opened == 1
        started = time.monotonic()
        manifest = controller.finalize()
        finalize_s = time.monotonic() - started
        print(f"finalize took {finalize_s:.1f}s")
    finally:
        light.shutdown(controller, actors)
    assert len(trained) == 3  # training went on without profiling
    # bounded: the wait ends when the directory is known to be unwritable, not at the
    # 60 s finalize timeout (before the fix: the whole timeout, then no manifest at all)
    assert finalize_s < 45, finalize_s
    lines = [w for w in manifest.warnings if w.startswith("trainer.profiler.output_dir: ")]
    assert len(lines) == 1 and "No space left on device" in lines[0] and " free)" in lines[0]
    assert "no more profiling windows open" in lines[0]
    on_disk = harness.read_manifest(out)  # written although the disk was full
    assert [(e["steps"], e["status"]) for e in on_disk["reports"]] == \
        [([1], "missing"), ([3], "missing")]
    first, third = on_disk["reports"]
    assert "No space left on device" in first["reason"], first["reason"]
    assert third["reason"].startswith(
        "not opened: trainer.profiler.output_dir could not be written"), third["reason"]
    leftovers = [n for n in os.listdir(out) if n.startswith((".manifest.", RESERVE_NAME,
                                                               ".verlprof-probe"))]
    assert leftovers == []
