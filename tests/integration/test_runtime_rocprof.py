"""rocprof-sys cannot run here (no AMD GPU): a stand-in executable records the argv and the
environment verlprof launches it with, then runs the worker. Only planned ranks go through
it, the argv is the plan's, and the manifest says why no report exists yet."""

from __future__ import annotations

import glob
import os
import sys

import pytest

from tests.integration.runtime_helpers import run_case

pytestmark = pytest.mark.integration

FAKE = os.path.join(os.path.dirname(__file__), "apps", "fake_rocprof_sys_python.sh")


def test_planned_ranks_run_under_rocprof_sys_with_the_plans_argv(ray_cluster, tmp_path):
    out = str(tmp_path)
    plan, result = run_case(out, [
        "trainer.profiler.tool=rocprof_sys", f"+trainer.profiler.rocprof_sys.executable={FAKE}",
        "+trainer.profiler.rocprof_sys.args={trace: true, T: 'a b;c'}",
        "trainer.total_training_steps=1", "trainer.profile_steps=[1]",
        "actor_rollout_ref.actor.profile_ranks=[]", "actor_rollout_ref.rollout.profile_ranks=[]",
        "critic.profile_ranks=[1]", "reward_model.profile_ranks=[]"])
    logs = glob.glob(os.path.join(out, ".raw", "*", "*", "fake_rocprof_argv_*.txt"))
    assert len(logs) == 1 and "/.raw/critic/rank1/" in logs[0]
    with open(logs[0]) as handle:
        argv = handle.read().splitlines()
    assert argv[:5] == [FAKE, "--trace=true", "-T", "a b;c", "--"]
    assert argv[5] == sys.executable
    with open(logs[0] + ".env") as handle:
        env = dict(line.split("=", 1) for line in handle.read().splitlines())
    assert env["ROCPROFSYS_OUTPUT_PATH"] == os.path.join(out, ".raw", "critic", "rank1")
    assert env["ROCPROFSYS_OUTPUT_PREFIX"] == "critic_rank1_"
    # rocprof-sys-python execs the interpreter (no ancestor to see): the single argv log above
    # is the proof that critic rank 1, and no other process, was launched through it
    (entry,) = result["manifest"]["reports"]
    assert entry["status"] == "incomplete"
    assert entry["reason"] == "rocprof-sys writes its output when the process exits"
