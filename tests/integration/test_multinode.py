"""Ray nodes started as on a real cluster (``ray start --head``, ``ray start --address``: each
its own raylet and node id, tests/ray_start.py), no shared staging assumed: reports written on
the second node reach the controller's output_dir over Ray, and the manifest is complete; so
do the traces verl's engine writes on the node of a rollout replica (the second node holds the
one logical GPU, so verl's replica lands there, the bridge's driver on the head node); a third
node whose raylet is killed mid-run keeps its closed windows."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.faults import harness
from tests.helpers import require_nsys
from tests.integration.runtime_helpers import files_on_disk, nvtx_names, planned_files, run_case
from tests.ray_start import RayStartNode
from verlprof.backends.summary import SUMMARY_SUFFIX

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def two_nodes():
    """The head (``head_node``) and a second node (``second_node``, one logical GPU), joined
    by ``ray start --address``; this process is the driver."""
    require_nsys()
    import ray

    head = RayStartNode(name="head", num_cpus=1, resources={"head_node": 100}).wait_ready()
    second = RayStartNode(name="second", head_address=head.address, num_cpus=2, num_gpus=1,
                          resources={"second_node": 100})
    try:
        second.wait_ready()
        ray.init(address=head.address, logging_level="ERROR", log_to_driver=False)
        wait_for_node("second_node")
        yield head
    finally:
        ray.shutdown()
        second.stop()
        head.stop()


def wait_for_node(resource: str, timeout_s: float = 120.0) -> str:
    """The id of the live node holding ``resource``, once the cluster sees it."""
    import time

    import ray

    deadline = time.monotonic() + timeout_s
    while True:
        alive = [n["NodeID"] for n in ray.nodes() if n["Alive"] and resource in n["Resources"]]
        if alive:
            return alive[0]
        assert time.monotonic() < deadline, f"no node with {resource} joined"
        time.sleep(0.5)


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
        # one machine: output_dir is one file system on both nodes, so the second node's
        # reports are renamed where they are (the lost-node test below sends them over Ray)
        assert report["transfer"] == ("shared" if expected_node == second else "rename")
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


def third_node(two_nodes, name: str):
    """A third node (resource ``<name>_node``) that can have a disk of its own, joined for
    one test and stopped after it."""
    node = RayStartNode(name=name, head_address=two_nodes.address, num_cpus=2,
                        resources={f"{name}_node": 100}, own_mounts=True)
    try:
        yield node.wait_ready()
    finally:
        node.stop()


@pytest.fixture
def apart(two_nodes):
    """A third node with a disk of its own, joined for one test."""
    yield from third_node(two_nodes, "apart")


def test_collect_of_a_killed_driver_reads_what_another_node_kept(two_nodes, apart, tmp_path):
    """A job's driver killed (SIGKILL) in step 3 of 4; its Ray cluster goes on. Its critic rank
    ran under nsys on a node with a disk of its own, where nsys wrote steps 1-2 when Ray ended
    the process: the controller's node never sees them. ``verlprof collect --address`` asks
    that node: steps 1-2 arrive over Ray, whole (each opened with ``nsys export``), listed
    with that node; they are deleted there, the node's nsys agents are gone, step 4 is
    ``missing`` as never opened."""
    import subprocess
    import time

    from tests.helpers import assert_no_leaked_agents

    node = wait_for_node("apart_node")
    out, marker = str(tmp_path / "out"), str(tmp_path / "step3.json")
    raw = os.path.join(out, ".raw")
    apart.hide(raw)
    harness.kill_demo_at([  # in step 3: steps 1-2 closed
        "--config", harness.CONFIG, "--ray-address", two_nodes.address,
        f"trainer.profiler.output_dir={out}", "trainer.total_training_steps=4",
        "trainer.profile_steps=[1,2,3,4]", "trainer.n_gpus_per_node=1",
        "actor_rollout_ref.actor.profile_ranks=[]", "actor_rollout_ref.rollout.profile_ranks=[]",
        "critic.profile_ranks=[0]", "reward_model.enable=false",
        "trainer.controller_nsight_options=null", "+demo.controller_resources={head_node: 1}",
        "+demo.worker_resources={actor_rollout_ref: {head_node: 1}, critic: {apart_node: 1}}",
        "+demo.faults=[{group:actor_rollout_ref,rank:0,phase:update_actor,step:3,"
        f"action:sleep,seconds:120,marker:'{marker}'}}]"], marker)
    harness.wait_until_ended(out)

    def reports_in(directory: str) -> list:
        return sorted(str(p) for p in Path(directory).rglob("*.nsys-rep"))

    assert not reports_in(raw)  # the controller's node never sees them: they are there
    # a process in that node's file system, in its .raw: it still sees it after collect
    # removes the (empty) .raw here, which takes the node's mount away from the node itself
    holder = subprocess.Popen(["nsenter", f"--target={apart.proc.pid}", "--mount", "--",
                               "sh", "-c", 'cd "$1" && exec sleep 300', "sh", raw])
    try:
        there = f"/proc/{holder.pid}/cwd"
        deadline = time.monotonic() + 30
        while os.readlink(there) != raw or len(reports_in(there)) < 2:  # nsys wrote 1-2
            assert time.monotonic() < deadline, f"on the other node: {reports_in(there)}"
            time.sleep(0.2)
        collected = harness.verlprof_cli("collect", out, "--address", two_nodes.address,
                                         "--timeout", "60")
        assert not reports_in(there), reports_in(there)  # each one placed, deleted there
    finally:
        holder.kill()
        holder.wait()
    assert collected.returncode == 1, collected.stdout + collected.stderr  # step 4: missing
    with open(os.path.join(out, "manifest.json")) as handle:
        manifest = json.load(handle)
    assert manifest["running"] is False
    by_step = {e["steps"][0]: e for e in manifest["reports"] if e["group"] == "critic"}
    for step in (1, 2):
        entry = by_step[step]
        assert (entry["status"], entry["transfer"], entry["node_id"]) == ("ok", "ray", node), \
            collected.stdout
        assert entry["bytes"] == os.path.getsize(os.path.join(out, entry["path"]))
        assert nvtx_names(os.path.join(out, entry["path"])) == {
            "critic/compute_values": 1, "critic/update_critic": 1}
    assert by_step[3]["status"] in ("incomplete", "ok", "missing")
    assert by_step[4]["status"] == "missing"
    assert by_step[4]["reason"].startswith("window never opened: the run ended without finalize")
    assert_no_leaked_agents()


@pytest.fixture
def doomed(two_nodes):
    """A third node, joined for one test, which kills it."""
    yield from third_node(two_nodes, "doomed")


def test_a_lost_node_keeps_its_closed_windows(doomed, tmp_path):
    """A third node joins, with a disk of its own (its ``.raw`` is not the others'); its
    critic ranks' reports of steps 1-2 are placed while the job runs (torch writes each at
    close; they travel over Ray from that node). Its raylet and
    worker processes are then killed during step 3 (as when the machine goes): steps 1-2 of
    that node stay ok and readable, its step 3 is missing naming the node, and every report
    of the other two nodes is ok. Last in this module: the cluster keeps two nodes after it."""
    import contextlib
    import gzip
    import json
    import signal
    import threading
    import time

    import ray

    lost = wait_for_node("doomed_node")
    out, marker = str(tmp_path / "out"), str(tmp_path / "step3.json")
    doomed.hide(os.path.join(out, ".raw"))  # its reports are on its own disk, gone with it
    release = str(tmp_path / "node_gone")  # ends the stuck rank's sleep once the node is lost
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["result"] = run_case(out, [
                "trainer.total_training_steps=3", "trainer.profile_steps=[1,2,3]",
                "trainer.profiler.tool=torch", "actor_rollout_ref.actor.profile_ranks=[0]",
                "actor_rollout_ref.rollout.profile_ranks=[]", "critic.profile_ranks_all=true",
                "reward_model.profile_ranks=[0]", "+demo.controller_resources={head_node: 1}",
                "+demo.worker_resources={actor_rollout_ref: {head_node: 1}, "
                "critic: {doomed_node: 1}, rm: {second_node: 1}}",
                "+demo.faults=[{group:actor_rollout_ref,rank:0,phase:generate_sequences,"
                f"step:3,action:sleep,seconds:60,marker:'{marker}',release:'{release}'}}]"])[1]
        except Exception as err:  # the step needing the lost critic fails; finalize ran
            outcome["error"] = err

    trainer = threading.Thread(target=run, daemon=True)
    trainer.start()
    deadline = time.monotonic() + 300
    while not os.path.exists(marker):  # step 3 began: steps 1-2 closed, step 3's windows open
        assert trainer.is_alive() and time.monotonic() < deadline, outcome
        time.sleep(0.2)
    seen: dict = {}
    while sorted(seen.get(s, "") for s in ((0, 1), (0, 2), (1, 1), (1, 2))) != ["ok"] * 4:
        assert trainer.is_alive() and time.monotonic() < deadline, (outcome, seen)
        time.sleep(0.3)
        try:
            with open(os.path.join(out, "manifest.json")) as handle:
                running = json.load(handle)
        except (OSError, ValueError):
            continue
        seen = {(e["rank"], e["steps"][0]): e["status"] if e["status"] == "ok" else e["reason"]
                for e in running["reports"] if e["group"] == "critic"}
    # placed while running, and step 3 still open on that node as it goes
    assert seen[(0, 3)] == seen[(1, 3)] == "open: being captured", seen
    doomed.kill()  # its raylet, as when the machine goes
    for process in running["processes"]:  # its worker processes go with the machine
        if process["node_id"] == lost:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process["pid"], signal.SIGKILL)
    while lost in {n["NodeID"] for n in ray.nodes() if n["Alive"]}:  # before step 3 goes on
        assert time.monotonic() < deadline
        time.sleep(0.5)
    open(release, "w").close()
    trainer.join(300)
    assert not trainer.is_alive()
    with open(os.path.join(out, "manifest.json")) as handle:
        manifest = json.load(handle)
    assert manifest["running"] is False
    nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    on_lost = [e for e in manifest["reports"] if e["node_id"] == lost]
    assert sorted((e["rank"], e["steps"][0]) for e in on_lost) == [
        (r, s) for r in (0, 1) for s in (1, 2, 3)], manifest
    for entry in on_lost:
        if entry["steps"] == [3]:
            assert entry["status"] == "missing" and entry["reason"].startswith(
                f"node {lost} lost"), entry
        else:
            assert entry["status"] == "ok" and entry["transfer"] == "ray", entry
            with gzip.open(os.path.join(out, entry["path"]), "rt") as handle:
                assert json.load(handle)["traceEvents"]  # whole and readable
    others = [e for e in manifest["reports"] if e["node_id"] != lost]
    assert {e["status"] for e in others} == {"ok"}, others
    assert sorted((e["group"], e["steps"][0]) for e in others if e["group"] != "controller") \
        == [(g, s) for g in ("actor_rollout_ref", "rm") for s in (1, 2, 3)]
    assert {e["node_id"] for e in others if e["group"] != "controller"} <= nodes
