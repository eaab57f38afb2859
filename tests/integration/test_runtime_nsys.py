"""End to end on a real local Ray cluster with real nsys: the files that appear are exactly the
plan's, each holds the NVTX ranges of exactly its window's phases, and unselected ranks ran
without nsys."""

from __future__ import annotations

import os

import pytest

from tests.helpers import require_nsys
from tests.integration.runtime_helpers import (
    PHASES_OF_GROUP,
    files_on_disk,
    nvtx_names,
    planned_files,
    processes_by_target,
    run_case,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", autouse=True)
def _nsys():
    require_nsys()


def test_whole_steps_rank_subsets_and_bounded_controller(ray_cluster, tmp_path):
    out = str(tmp_path)
    plan, result = run_case(out, [
        "trainer.total_training_steps=3", "trainer.profile_steps=[2]",
        "actor_rollout_ref.actor.profile_ranks=[1]", "actor_rollout_ref.rollout.profile_ranks=[]",
        "critic.profile_ranks=[0]", "reward_model.profile_ranks=[]"])
    manifest = result["manifest"]
    assert {r["status"] for r in manifest["reports"]} == {"ok"}
    workers = planned_files(plan, manifest)
    controller = [r["path"] for r in manifest["reports"] if r["group"] == "controller"]
    assert len(workers) == 2 and len(controller) == 1
    assert files_on_disk(out) == sorted(workers + controller)
    for rel in workers:
        group = rel.split("/")[1]
        assert nvtx_names(os.path.join(out, rel)) == {p: 1 for p in PHASES_OF_GROUP[group]}
    names = nvtx_names(os.path.join(out, controller[0]))
    assert names.get("step/2") == 1 and "step/1" not in names and "step/3" not in names
    assert names.get("controller/update_actor") == 1
    procs = processes_by_target(result)
    assert procs[("actor_rollout_ref", 1)]["under_profiler"]
    assert procs[("critic", 0)]["under_profiler"]
    for target in [("actor_rollout_ref", 0), ("critic", 1), ("rm", 0)]:
        assert not procs[target]["under_profiler"], target
    assert not os.listdir(os.path.join(out, ".raw", "critic", "rank0"))


def test_discrete_hybrid_one_report_per_selected_phase_call(ray_cluster, tmp_path):
    out = str(tmp_path)
    plan, result = run_case(out, [
        "trainer.total_training_steps=2", "trainer.profile_steps=[1,2]",
        "trainer.controller_nsight_options=null",
        "actor_rollout_ref.actor.profile_ranks=[0]",
        "actor_rollout_ref.actor.profile_discrete=true",
        "actor_rollout_ref.rollout.profile_ranks=[0]",
        "actor_rollout_ref.rollout.profile_discrete=true",
        "critic.profile_ranks=[]", "reward_model.profile_ranks=[]"])
    manifest = result["manifest"]
    assert {r["status"] for r in manifest["reports"]} == {"ok"}
    assert files_on_disk(out) == planned_files(plan, manifest)
    phases = sorted(os.path.basename(os.path.dirname(os.path.dirname(p)))
                    for p in files_on_disk(out))
    assert phases == sorted(["rollout.generate_sequences", "actor.compute_log_prob",
                             "actor.update_actor"] * 2)
    for rel in files_on_disk(out):
        component = rel.split("/")[1]
        role, phase = component.split(".")
        assert nvtx_names(os.path.join(out, rel)) == {f"{role}/{phase}": 1}, rel


def test_continuous_steps_all_ranks(ray_cluster, tmp_path):
    out = str(tmp_path)
    plan, result = run_case(out, [
        "trainer.total_training_steps=3", "trainer.profile_steps=[1,2]",
        "trainer.profile_continuous_steps=true", "trainer.controller_nsight_options=null",
        "actor_rollout_ref.actor.profile_ranks=[]", "actor_rollout_ref.rollout.profile_ranks=[]",
        "critic.profile_ranks_all=true", "reward_model.profile_ranks=[]"])
    manifest = result["manifest"]
    assert files_on_disk(out) == planned_files(plan, manifest)
    assert [list(r["steps"]) for r in manifest["reports"]] == [[1, 2], [1, 2]]
    for rel in files_on_disk(out):
        assert rel.startswith("step0001-0002/critic/rank")
        assert nvtx_names(os.path.join(out, rel)) == {"critic/compute_values": 2,
                                                      "critic/update_critic": 2}


def test_a_size_budget_that_holds_one_of_two_windows(ray_cluster, tmp_path):
    """trainer.profiler.max_total_bytes at the first window's estimate: step 1 is captured by
    real nsys (its report within the estimate), step 2 is skipped with the reason."""
    from verlprof.demo.run import plan_demo

    out = str(tmp_path)
    given = ["trainer.total_training_steps=2", "trainer.profile_steps=[1,2]",
             "trainer.controller_nsight_options=null", "critic.profile_ranks=[0]",
             "actor_rollout_ref.actor.profile_ranks=[]",
             "actor_rollout_ref.rollout.profile_ranks=[]", "reward_model.profile_ranks=[]"]
    _, estimated, _ = plan_demo(None, [f"trainer.profiler.output_dir={out}", *given])
    first = estimated.size.window_bytes[0]
    _, result = run_case(out, [*given, f"++trainer.profiler.max_total_bytes={first}"])
    manifest = result["manifest"]
    assert [(list(r["steps"]), r["status"]) for r in manifest["reports"]] == [
        ([1], "ok"), ([2], "skipped")]
    ok, skipped = manifest["reports"]
    assert 0 < ok["bytes"] <= first
    assert skipped["reason"].startswith("not opened: trainer.profiler.max_total_bytes is ")
    assert [w for w in manifest["warnings"] if "max_total_bytes" in w][0].endswith(
        "window(s) [2] are skipped (listed as skipped in the manifest)")
    assert files_on_disk(out) == [ok["path"]]
