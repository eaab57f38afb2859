"""Two Ray nodes (ray.cluster_utils.Cluster), no shared staging assumed: reports written on the
second node reach the controller's output_dir over Ray, and the manifest is complete; so do the
traces verl's engine writes on the node of a rollout replica (the second node holds the one
logical GPU, so verl's replica lands there, the bridge's driver on the head node)."""

from __future__ import annotations

import json
import os

import pytest

from tests.helpers import require_nsys
from tests.integration.runtime_helpers import files_on_disk, nvtx_names, planned_files, run_case
from verlprof.backends.summary import SUMMARY_SUFFIX

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    require_nsys()
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "resources": {"head_node": 100}, "include_dashboard": False})
    cluster.add_node(num_cpus=2, num_gpus=1, resources={"second_node": 100})
    ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


@pytest.mark.timeout(420)  # 300 s default; finalize also summarises 8 reports (22 s at load 25)
def test_reports_from_every_node_end_up_in_one_output_dir(two_nodes, tmp_path):
    import ray

    out = str(tmp_path / "out")
    plan, result = run_case(out, [
        "trainer.total_training_steps=2", "trainer.profile_steps=[1,2]",
        "actor_rollout_ref.actor.profile_ranks=[0]", "actor_rollout_ref.rollout.profile_ranks=[]",
        "critic.profile_ranks_all=true", "reward_model.profile_ranks=[]",
        "trainer.profiler.summarise=at_end",  # the default, which run_case turns off
        "+demo.controller_resources={head_node: 1}",
        "+demo.worker_resources={actor_rollout_ref: {head_node: 1}, critic: {second_node: 1},"
        " rm: {head_node: 1}}"])
    manifest = result["manifest"]
    nodes = {n["NodeID"]: n["Resources"] for n in ray.nodes()}
    head = next(i for i, r in nodes.items() if "head_node" in r)
    second = next(i for i, r in nodes.items() if "second_node" in r)
    assert manifest["controller"]["node_id"] == head
    workers = [r for r in manifest["reports"] if r["group"] != "controller"]
    assert len(workers) == 6 and {r["status"] for r in manifest["reports"]} == {"ok"}
    for report in workers:
        expected_node = second if report["group"] == "critic" else head
        assert report["node_id"] == expected_node
        assert report["transfer"] == ("ray" if expected_node == second else "rename")
        assert report["bytes"] == os.path.getsize(os.path.join(out, report["path"]))
    controller = [r["path"] for r in manifest["reports"] if r["group"] == "controller"]
    assert files_on_disk(out) == sorted(planned_files(plan, manifest) + controller)
    for report in workers:
        if report["group"] == "critic":
            assert nvtx_names(os.path.join(out, report["path"])) == {
                "critic/compute_values": 1, "critic/update_critic": 1}
    # summarised in finalize (summarise: at_end) by a task on the node that wrote each report
    # (this machine's nodes share its disk: the second node sees output_dir)
    for report in manifest["reports"]:
        assert report["summary"] == report["path"] + SUMMARY_SUFFIX
        with open(os.path.join(out, report["summary"])) as handle:
            assert json.load(handle)["node_id"] == (report["node_id"] or head)
    # the second node's staging copies are gone once the controller holds the reports
    for rank in (0, 1):
        staging = os.path.join(out, ".raw", "critic", f"rank{rank}")
        assert not [f for f in os.listdir(staging) if f.endswith(".nsys-rep")]


def test_verls_engine_traces_on_another_node_reach_the_output_dir(two_nodes, tmp_path):
    """verl's LLMServerManager with a standalone stand-in replica on the second node, verl's own
    engine profiling on (torch, a token window) and the bridge attached in a driver on the head
    node: each step's engine trace, written on the replica's node, is copied over Ray into
    the output directory, listed as verl's with that node, and deleted there."""
    import ray

    from tests.helpers import require_verl

    require_verl()
    from tests.integration.apps.verl_cpu_rollout import run_generation
    from tests.integration.test_verl_fit_cpu import (
        BRIDGED,
        ENGINE_KEYS,
        SPAWN_ENGINE,
        _assert_engine_trace_gathered,
    )

    profiler = [o.replace("global_profiler.tool=nsys", "global_profiler.tool=torch")
                for o in BRIDGED]
    result = run_generation("standalone", [*profiler, SPAWN_ENGINE, *ENGINE_KEYS],
                            str(tmp_path), bridged=True, resources={"head_node": 1})
    manifest = result["manifest"]
    _assert_engine_trace_gathered(result, manifest, tmp_path, steps=(1, 2))
    second = next(n["NodeID"] for n in ray.nodes() if "second_node" in n["Resources"])
    engine = [e for e in manifest["reports"] if e.get("origin") == "verl"]
    assert {(e["node_id"], e["transfer"]) for e in engine} == {(second, "ray")}
    assert manifest["controller"]["node_id"] != second
    assert not list(tmp_path.glob("agent_loop_rollout_replica_*/*"))  # deleted where written
