"""verl 0.9.1's real trainer loop and rollout replicas on CPU, with no verlprof attached.

``RayPPOTrainer.init_workers()`` + ``fit()`` for two steps (hybrid rollout: the only mode its
actor replicas take in 0.9.1), and the generation phase with the actor rollout standalone and
colocated, all with the stand-in ``cpu_standin`` engine registered through verl's public
``RolloutReplicaRegistry`` (see ``apps/verl_cpu_trainer.py`` for what runs for real and what is
stubbed, and why). Each run enables verl's own rollout profiler route on step 1 only
(``global_profiler.steps=[1]``, the rollout's ``profiler`` with tool ``torch``): verl must call
the servers' ``start_profile`` / ``stop_profile`` around step 1's generation and no other, and
the server's torch trace must hold exactly that step's generate calls.
"""

from __future__ import annotations

import glob
import json
import os
import time

import pytest

from tests.helpers import local_ray_cluster, require_verl

pytestmark = pytest.mark.integration

require_verl()

from tests.integration.apps.verl_cpu_trainer import BATCH, STEPS  # noqa: E402

N = 2
"""``actor_rollout_ref.rollout.n`` in the harness: each prompt is generated twice."""

ROLLOUT_PROFILE = [
    "global_profiler.steps=[1]", "global_profiler.tool=torch",
    "actor_rollout_ref.rollout.profiler.enable=true",
    "actor_rollout_ref.rollout.profiler.tool=torch",
    # verl's vLLM/SGLang servers only profile in discrete mode (``_should_profile``)
    "actor_rollout_ref.rollout.profiler.tool_config.torch.discrete=true",
]


@pytest.fixture(scope="module")
def ray_cluster():
    """Logical GPUs (``num_gpus``: a label for Ray's scheduler, no device behind it) for
    verl's resource pools, which always ask for ``GPU`` bundles and check the cluster's GPU
    count: one for the training pool, one for a standalone replica's own pool."""
    with local_ray_cluster(num_cpus=4, num_gpus=2):
        yield


def _only_server(result):
    [replica] = result["replicas"]
    [server] = replica["servers"]
    return replica, server


def _assert_step_1_profiled(server, save_path):
    """verl's route: one start/stop pair, around step 1's generation only; one trace, in
    verl's per-replica directory, holding step 1's generate ranges and nothing of step 2."""
    calls = server["calls"]
    methods = [c["method"] for c in calls]
    assert methods.count("start_profile") == 1 and methods.count("stop_profile") == 1, methods
    [start] = [c for c in calls if c["method"] == "start_profile"]
    assert start["kwargs"] == {}  # LLMServerManager.start_profile() passes nothing on
    first, last = methods.index("start_profile"), methods.index("stop_profile")
    generated = [c for c in calls if c["method"] == "generate"]
    assert server["generate_per_step"] == [BATCH * N] * STEPS
    inside = [c for c in calls[first:last] if c["method"] == "generate"]
    assert [c["global_steps"] for c in inside] == [0] * BATCH * N  # step 1's weights
    assert [c["profiling"] for c in generated] == [c in inside for c in generated]
    traces = glob.glob(os.path.join(save_path, "agent_loop_rollout_replica_0", "*.pt.trace.json"))
    [written] = [c["path"] for c in calls if c["method"] == "trace_written"]
    assert traces == [written]
    assert f"_{server['engine_pid']}." in os.path.basename(written)  # by the engine's process
    with open(written) as handle:
        events = json.load(handle)["traceEvents"]
    ranges = [e for e in events if e.get("name") == "cpu_standin.generate"]
    assert len(ranges) == BATCH * N


def test_fit_runs_two_steps_with_hybrid_replica_profiled_on_step_1(ray_cluster, tmp_path):
    """Through verl's own entry: ``main_ppo.run_ppo(config, task_runner_class)``."""
    from verl.trainer.main_ppo import run_ppo

    from tests.integration.apps.verl_cpu_trainer import CpuTaskRunner, compose, observed_path

    config = compose(ROLLOUT_PROFILE, str(tmp_path))
    run_ppo(config, CpuTaskRunner)
    with open(observed_path(config)) as handle:
        result = json.load(handle)
    assert result["global_steps"] == STEPS
    replica, server = _only_server(result)
    assert replica["mode"] == "hybrid" and server["rollout_mode"] == "hybrid"
    # hybrid: the replica's workers are the training processes; its server is its own process
    assert replica["worker_pids"] == result["training_pids"]["global_pool"]
    assert server["pid"] not in replica["worker_pids"]
    _assert_step_1_profiled(server, str(tmp_path))


SPAWN_ENGINE = "+actor_rollout_ref.rollout.engine_kwargs.cpu_standin.spawn_engine=true"


@pytest.mark.parametrize("mode,spawn", [("standalone", True), ("colocated", False)])
def test_generation_with_replica_in_mode_profiled_on_step_1(ray_cluster, tmp_path, mode, spawn):
    """Standalone with the engine in a process the server spawns (as vLLM's EngineCore),
    colocated with the engine inside the server."""
    from tests.integration.apps.verl_cpu_rollout import run_generation

    overrides = [*ROLLOUT_PROFILE, *([SPAWN_ENGINE] if spawn else [])]
    result = run_generation(mode, overrides, str(tmp_path))
    assert result["global_steps"] == STEPS
    replica, server = _only_server(result)
    assert replica["mode"] == mode and server["rollout_mode"] == mode
    assert (server["engine_pid"] != server["pid"]) == spawn
    training = result["training_pids"].get("global_pool", [])
    assert bool(training) == (mode == "colocated")
    # verl's CheckpointEngineWorker per rollout rank, beside (colocated) or apart from training
    assert not set(replica["worker_pids"]) & {server["pid"], *training}
    _assert_step_1_profiled(server, str(tmp_path))


# -- with verlprof's bridge: verl's real fit, profiled through the launcher ---------------------

NSYS = "global_profiler.global_tool_config.nsys"
BRIDGED = [
    "global_profiler.tool=nsys", "global_profiler.steps=[1,2]",
    "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.ranks=[0]",
    f"{NSYS}.worker_nsight_options.capture-range=nvtx",
    f"{NSYS}.worker_nsight_options.trace='nvtx,osrt'", f"{NSYS}.controller_nsight_options=null",
]
"""verl's own keys only: nsys on steps 1 and 2, the actor's rank 0 (and with it the rollout
replica owning global rank 0, as verl maps the rollout's ranks), the NVTX trigger (no GPU)."""


def _launched_fit(overrides, out, flags=()):
    """verl's ``run_ppo`` through verlprof's launcher, the plan derived from the config
    (composed from Hydra's ``flags`` and the overrides as the launcher reads main_ppo's line);
    (what the fit observed, the run's manifest), after checking it ran every step."""
    from verl.trainer.main_ppo import run_ppo

    from tests.integration.apps.verl_cpu_trainer import CpuTaskRunner, compose, observed_path
    from verlprof.bridges.verl.launch import wrap_run_ppo

    config = compose(overrides, str(out), flags)
    wrap_run_ppo(run_ppo)(config, CpuTaskRunner)
    with open(observed_path(config)) as handle:
        result = json.load(handle)
    with open(out / "manifest.json") as handle:
        manifest = json.load(handle)
    assert result["global_steps"] == STEPS
    return result, manifest


def _user_config_dir(tmp_path, selection):
    """A user's own config directory, its trainer YAML extending verl's ``ppo_trainer``
    through ``defaults`` (the way verl's recipes do) and holding the profiling ``selection``;
    Hydra's flags that name it."""
    import yaml
    from omegaconf import OmegaConf

    folder = tmp_path / "my_configs"
    folder.mkdir()
    own = OmegaConf.to_container(OmegaConf.from_dotlist(list(selection)))
    (folder / "my_trainer.yaml").write_text(yaml.safe_dump({
        "hydra": {"searchpath": ["pkg://verl.trainer.config"]},
        "defaults": ["ppo_trainer", "_self_"], **own}))
    return ["--config-path", str(folder), "--config-name", "my_trainer"]


def test_bridged_fit_profiles_the_training_rank_and_the_rollout_replica(ray_cluster, tmp_path):
    """verl's ``run_ppo`` through verlprof's launcher, the plan derived from the config (no
    topology given), the config a user's own (``--config-name``: verl's ``ppo_trainer``
    through ``defaults``, the profiling keys in the user's YAML): the training process and the
    replica's server run under nsys, each writes one report per step, the server's holds every
    request of its step as ``rollout/generate``, and ``verlprof report`` shows both groups side
    by side."""
    from rich.console import Console

    from tests.helpers import require_nsys
    from tests.integration.runtime_helpers import nvtx_names
    from verlprof.report import summarize

    require_nsys()
    result, manifest = _launched_fit([], tmp_path, _user_config_dir(tmp_path, BRIDGED))
    _, server = _only_server(result)
    entries = {(e["group"], e["rank"], tuple(e["steps"])): e for e in manifest["reports"]}
    assert sorted(entries) == [("global_pool", 0, (1,)), ("global_pool", 0, (2,)),
                               ("rollout_replicas", 0, (1,)), ("rollout_replicas", 0, (2,))]
    assert {e["status"] for e in entries.values()} == {"ok"}, manifest["reports"]
    processes = {(p["group"], p["rank"]): p for p in manifest["processes"]}
    assert processes[("rollout_replicas", 0)]["pid"] == server["pid"]
    assert processes[("global_pool", 0)]["pid"] == result["training_pids"]["global_pool"][0]
    assert all(p["under_profiler"] for p in processes.values())
    assert manifest["served"] == {"rollout_replicas": {"engine": "cpu_standin",
                                                       "gpus_per_replica": 1,
                                                       "servers_per_replica": 1}}
    for step in (1, 2):
        served = nvtx_names(str(tmp_path / entries[("rollout_replicas", 0, (step,))]["path"]))
        assert served == {"rollout/generate": BATCH * N}  # every request of its step
        trained = nvtx_names(str(tmp_path / entries[("global_pool", 0, (step,))]["path"]))
        assert {"actor/compute_log_prob", "actor/update_actor"} <= set(trained)
        # what the rollout does in a training process of verl 0.7+: the step's weight sync
        assert trained["rollout/update_weights"] == 1, trained
    summary = summarize(str(tmp_path), console=Console(quiet=True), picture=False)
    phases = {(r.group, r.rank, r.role, r.phase) for r in summary.rows}
    assert ("rollout_replicas", 0, "rollout", "generate") in phases
    assert ("global_pool", 0, "actor", "update_actor") in phases
    assert ("global_pool", 0, "rollout", "update_weights") in phases
    # where each step went (issue 39): its rows add up to the step, the hybrid replica's
    # weight hand-over is its own row, the replica's generation is beside them
    assert summary.anatomy is not None and len(summary.anatomy.steps) == STEPS
    for step in summary.anatomy.steps:
        assert abs(sum(r.ns for r in step.rows()) - step.wall_ns) <= 0.02 * step.wall_ns
        assert step.weight_sync_ns > 0, step
        assert [(r.group, r.replica) for r in step.replicas] == [("rollout_replicas", 0)]


@pytest.mark.parametrize("mode,tool", [("standalone", "torch"), ("colocated", "nsys")])
def test_bridged_replica_in_mode_writes_its_generation_per_step(ray_cluster, tmp_path, mode,
                                                                tool):
    """The bridge attached in a driver that runs verl's LLMServerManager itself: the selected
    replica's server (standalone: its engine in a process the server spawns) writes one report
    per step holding each request of the step, with torch (in-process) and nsys alike. With
    torch, verl's own engine profiling runs beside it (the rollout's block, with a token
    window): the driver keeps verl's step list and calls the servers' start/stop_profile
    itself, and the bridge gathers each step's engine trace after verl's stop_profile."""
    import gzip

    from tests.integration.apps.verl_cpu_rollout import run_generation
    from tests.integration.runtime_helpers import nvtx_names

    if tool == "nsys":
        from tests.helpers import require_nsys

        require_nsys()
    profiler = [o.replace("global_profiler.tool=nsys", f"global_profiler.tool={tool}")
                for o in BRIDGED]
    engine = ENGINE_KEYS if tool == "torch" else []
    result = run_generation(mode, [*profiler, *([SPAWN_ENGINE] if mode == "standalone" else []),
                                   *engine], str(tmp_path), bridged=True)
    assert result["global_steps"] == STEPS
    _, server = _only_server(result)
    if engine:
        _assert_engine_trace_gathered(result, result["manifest"], tmp_path, steps=(1, 2))
    entries = [e for e in result["manifest"]["reports"]
               if e["group"] == "rollout_replicas" and not e.get("origin")]
    assert [(e["rank"], e["steps"], e["status"]) for e in entries] == [
        (0, (1,), "ok"), (0, (2,), "ok")], result["manifest"]["reports"]
    for entry in entries:
        path = str(tmp_path / entry["path"])
        if tool == "nsys":
            assert nvtx_names(path) == {"rollout/generate": BATCH * N}
        else:
            with gzip.open(path, "rt") as handle:
                events = json.load(handle)["traceEvents"]
            assert sum(e.get("name") == "rollout/generate" for e in events) == BATCH * N
    pids = {(p["group"], p["rank"]): p["pid"] for p in result["manifest"]["processes"]}
    assert pids[("rollout_replicas", 0)] == server["pid"]


def test_a_replica_over_two_nodes_runs_each_server_under_nsys(ray_cluster, tmp_path):
    """A standalone replica of tensor parallel 2 on nodes of one GPU: verl starts one server per
    node, and both run under nsys as ranks 0 and 1 of the replica group, each writing one
    report per step; only node 0's server takes requests (its report holds each of them)."""
    from tests.helpers import require_nsys
    from tests.integration.apps.verl_cpu_rollout import run_generation
    from tests.integration.runtime_helpers import nvtx_names

    require_nsys()
    result = run_generation("standalone", [
        *BRIDGED, "actor_rollout_ref.hybrid_engine=false", "actor_rollout_ref.rollout.nnodes=2",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=2"], str(tmp_path), bridged=True)
    [replica] = result["replicas"]
    assert [s["node_rank"] for s in replica["servers"]] == [0, 1]
    manifest = result["manifest"]
    assert manifest["served"]["rollout_replicas"] == {
        "engine": "cpu_standin", "gpus_per_replica": 2, "servers_per_replica": 2}
    pids = {p["rank"]: p["pid"] for p in manifest["processes"]
            if p["group"] == "rollout_replicas" and p["under_profiler"]}
    assert pids == {node: s["pid"] for node, s in enumerate(replica["servers"])}
    entries = sorted((e["rank"], e["steps"], e["status"], e["path"]) for e in manifest["reports"]
                     if e["group"] == "rollout_replicas")
    assert [e[:3] for e in entries] == [(0, (1,), "ok"), (0, (2,), "ok"), (1, (1,), "ok"),
                                        (1, (2,), "ok")], manifest["reports"]
    for rank, _, _, path in entries:
        ranges = nvtx_names(str(tmp_path / path))
        assert ranges == ({"rollout/generate": BATCH * N} if rank == 0 else {}), (rank, ranges)


def test_a_replica_that_dies_with_its_window_open_loses_no_other_report(ray_cluster, tmp_path):
    """Two standalone replicas, both under nsys; replica 1's server is killed in step 2 after
    generating, its window open. Replica 0's reports of both steps are complete; replica 1's
    step 1 is too, and its step 2 is what nsys captured until the death, marked with why; the
    manifest names the replica (as for a training rank that dies)."""
    from tests.helpers import require_nsys
    from tests.integration.apps.verl_cpu_rollout import run_generation
    from tests.integration.runtime_helpers import nvtx_names

    require_nsys()
    selection = [o.replace("actor.profiler.ranks=[0]", "actor.profiler.all_ranks=true")
                 for o in BRIDGED]
    result = run_generation("standalone", [
        *selection, "actor_rollout_ref.hybrid_engine=false", "trainer.n_gpus_per_node=2",
        "actor_rollout_ref.rollout.n_gpus_per_node=2"], str(tmp_path), bridged=True,
        kill=(2, 1))
    assert result["global_steps"] == 2
    manifest = result["manifest"]
    entries = {(e["rank"], e["steps"]): e for e in manifest["reports"]
               if e["group"] == "rollout_replicas"}
    assert sorted(entries) == [(0, (1,)), (0, (2,)), (1, (1,)), (1, (2,))], manifest["reports"]
    [served] = [s for r in result["replicas"] for s in r["servers"]]  # replica 0's only
    for step in (1, 2):
        kept = entries[(0, (step,))]
        assert kept["status"] == "ok", kept
        share = served["generate_per_step"][step - 1]  # its share of the step's requests
        assert nvtx_names(str(tmp_path / kept["path"])) == (
            {"rollout/generate": share} if share else {})
    # replica 1's step 1 closed before the death: whole, placed; step 2's was cut short: what
    # nsys captured until then, placed and marked; nothing left in .raw
    closed, cut = entries[(1, (1,))], entries[(1, (2,))]
    assert closed["status"] == "ok" and closed["pid"] == result["killed"]["pid"], closed
    first = sum(1 for c in result["killed"]["calls"]  # its generations at step 1
                if c["method"] == "generate" and c["global_steps"] == 0)
    assert nvtx_names(str(tmp_path / closed["path"])) == (
        {"rollout/generate": first} if first else {})
    assert cut["status"] == "incomplete" and cut["reason"].startswith("worker process died") \
        and cut["reason"].endswith("in this window; the report holds what was captured until "
                                   "then"), cut
    assert (tmp_path / cut["path"]).stat().st_size == cut["bytes"] > 0
    assert not list((tmp_path / ".raw" / "rollout_replicas" / "rank1").glob("*"))
    assert [w for w in manifest["warnings"] if w.startswith("rollout_replicas rank 1: ")]
    assert not [w for w in manifest["warnings"] if w.startswith("rollout_replicas rank 0")]


def test_on_demand_capture_of_a_running_bridged_fit(ray_cluster, tmp_path):
    """verl's ``global_profiler.steps`` empty and on-demand capture on: while verl's real fit
    runs (held before step 1's boundary), ``verlprof capture --wait`` from another process asks
    for the next step on the training rank with torch; the job takes it at step 1's boundary
    (verl's ``_start_profiling``), and ``--wait`` returns with the report gathered, marked with
    who asked, while the fit is still running (held after step 1); the final manifest keeps
    it."""
    import gzip
    import subprocess
    import sys
    import threading

    from verl.trainer.main_ppo import run_ppo

    from tests.integration.apps.verl_cpu_trainer import (
        HOLD_AFTER,
        HOLD_BEFORE,
        CpuTaskRunner,
        compose,
    )
    from verlprof.bridges.verl.launch import wrap_run_ppo

    config = compose(["global_profiler.tool=torch", "global_profiler.steps=[]",
                      "+trainer.profiler.on_demand.enabled=true"], str(tmp_path))
    holds = [tmp_path / HOLD_BEFORE, tmp_path / HOLD_AFTER]
    for hold in holds:
        hold.touch()
    failed: list = []

    def fit() -> None:
        try:
            wrap_run_ppo(run_ppo)(config, CpuTaskRunner)
        except BaseException as err:  # noqa: BLE001 - reported by the test below
            failed.append(err)

    job = threading.Thread(target=fit, daemon=True)
    job.start()
    client = None
    try:
        deadline = time.monotonic() + 180
        while not (tmp_path / ".verlprof-on-demand.json").exists():
            assert job.is_alive() and time.monotonic() < deadline, failed or "no desk"
            time.sleep(0.2)
        client = subprocess.Popen(
            [sys.executable, "-m", "verlprof.cli", "capture", str(tmp_path), "--steps",
             "next:1", "--group", "global_pool", "--ranks", "0", "--tool", "torch", "--wait",
             "--timeout", "180"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert client.stdout is not None
        seen = []
        for line in client.stdout:  # queued while the fit waits before step 1
            seen.append(line)
            if "queued" in line:
                break
        holds[0].unlink()
        out = "".join(seen) + client.communicate(timeout=240)[0]
        assert client.returncode == 0, out
        assert "accepted at step 1: steps 1 on global_pool rank 0 with torch" in out, out
        assert "1 of 1 report(s) ok" in out, out
        assert job.is_alive(), failed  # --wait returned while the fit ran on (held)
        running = json.loads((tmp_path / "manifest.json").read_text())
        assert running["running"] and len(running["reports"]) == 1
    finally:
        for hold in holds:
            if hold.exists():
                hold.unlink()
        if client is not None and client.poll() is None:
            client.kill()
        job.join(timeout=300)
    assert not failed, failed
    with open(tmp_path / "manifest.json") as handle:
        manifest = json.load(handle)
    assert not manifest["running"]
    [entry] = [e for e in manifest["reports"] if e["requested_by"]]
    assert (entry["group"], entry["rank"], entry["steps"], entry["status"]) == (
        "global_pool", 0, [1], "ok")
    with gzip.open(tmp_path / entry["path"], "rt") as handle:
        names = {e.get("name") for e in json.load(handle)["traceEvents"]}
    # verl's phases, run on another thread than the window's RPCs (verl's workers are async
    # actors): the torch profiler follows every thread of a verl process
    assert {"actor/compute_log_prob", "actor/update_actor"} <= names, sorted(
        n for n in names if n and not n.startswith("aten::"))


TOKEN_WINDOW = (1, 3)
"""verl's rollout ``profile_token_start`` / ``end``: engine iterations 1 and 2 of a step."""
TORCH_CFG = "actor_rollout_ref.rollout.profiler.tool_config.torch"
ENGINE_KEYS = [*ROLLOUT_PROFILE[2:], f"{TORCH_CFG}.profile_token_start={TOKEN_WINDOW[0]}",
               f"{TORCH_CFG}.profile_token_end={TOKEN_WINDOW[1]}"]
"""verl's own engine profiling of the rollout (its rollout block, torch, discrete) with a
token window."""
ENGINE_ROUTE = [*ROLLOUT_PROFILE[:2], *ENGINE_KEYS, SPAWN_ENGINE]
"""... on step 1, the engine in a process of its own."""


def _assert_engine_trace_gathered(result, manifest, out, steps=(1,)):
    """One start/stop pair per profiled step; each step's engine trace moved into the output
    directory and listed as verl's (``origin``), holding only the token window's iterations."""
    import gzip

    _, server = _only_server(result)
    methods = [c["method"] for c in server["calls"]]
    assert methods.count("start_profile") == methods.count("stop_profile") == len(steps)
    verl = [e for e in manifest["reports"] if e.get("origin") == "verl"]
    assert [(e["group"], e["rank"], list(e["steps"]), e["component"], e["status"])
            for e in verl] == [("rollout_replicas", 0, [s], "verl_engine", "ok")
                               for s in steps], manifest["reports"]
    assert not list(out.glob("agent_loop_rollout_replica_*/*.json"))  # moved, not copied
    start, end = TOKEN_WINDOW
    for entry in verl:
        path = out / entry["path"]
        assert path.is_file() and entry["bytes"] == path.stat().st_size
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as handle:
            events = json.load(handle)["traceEvents"]
        assert sum(e.get("name") == "cpu_standin.token" for e in events) == end - start


def test_verls_engine_profiling_under_the_launcher_is_gathered_with_its_token_window(
        ray_cluster, tmp_path):
    """Through verlprof's launcher, which clears verl's step list: the bridge calls the
    servers' ``start_profile`` / ``stop_profile`` around step 1 itself, and the engine records
    iterations 1 and 2 of the step only, as vLLM does with verl's ``delay_iterations`` /
    ``max_iterations``."""
    result, manifest = _launched_fit(ENGINE_ROUTE, tmp_path)
    _assert_engine_trace_gathered(result, manifest, tmp_path)


def test_trtllm_replicas_launch_the_selected_server_under_nsys(ray_cluster, tmp_path):
    """verl's TRT-LLM replica names its server class directly (``TRTLLMHttpServer``, no
    ``server_class``). Its two replicas launch concurrently through verl's real
    ``launch_servers``: replica 0's server process starts under the plan's nsys command, replica
    1's plainly, both with the bridge's environment. The servers then die where verl's
    ``TRTLLMHttpServer.__init__`` asserts a GPU, and the run still ends with a manifest."""
    from tests.helpers import require_nsys
    from tests.integration.apps.verl_trtllm_launch import launch_trtllm
    from verlprof.bridges.verl.env import ENABLE_ENV

    require_nsys()
    result = launch_trtllm(BRIDGED, str(tmp_path))
    assert len(result["errors"]) == 2 and all("ActorDiedError" in e or "RayActorError" in e
                                              for e in result["errors"]), result["errors"]
    selected, plain = result["servers"][0], result["servers"][1]
    for server in (selected, plain):
        assert "TRTLLM http server should run on GPU node" in server["death_cause"]
        assert server["runtime_env"]["env_vars"][ENABLE_ENV] == "1"
    executable = selected["runtime_env"]["py_executable"]
    assert executable.startswith("nsys profile ") or "/nsys profile " in executable, executable
    assert "nsys" not in plain["runtime_env"].get("py_executable", "")
    manifest = result["manifest"]
    assert not manifest["reports"]  # no server lived to open a window, and the manifest says
    [said] = [w for w in manifest["warnings"] if w.startswith("rollout_replicas replica 0")]
    assert "launch_servers raised" in said and "not profiled" in said, said


TEACHER = "+distillation.teacher_models.teacher_model.inference"


def test_bridged_teacher_replica_writes_its_generation_per_step(ray_cluster, tmp_path):
    """verl's own teacher manager makes the distillation teacher's two replicas (one GPU
    each) on the teacher's pool; its inference block's profiler selects GPU rank 1: replica 1's
    server runs under nsys and writes one report per step holding that step's requests as
    ``teacher/generate``; replica 0's never runs under a profiler."""
    from tests.helpers import require_nsys
    from tests.integration.apps.verl_cpu_teacher import REQUESTS, run_teacher
    from tests.integration.runtime_helpers import nvtx_names

    require_nsys()
    result = run_teacher([
        "global_profiler.tool=nsys", "global_profiler.steps=[1,2]",
        f"{NSYS}.worker_nsight_options.capture-range=nvtx",
        f"{NSYS}.worker_nsight_options.trace='nvtx,osrt'", f"{NSYS}.controller_nsight_options=null",
        "distillation.teacher_models.teacher_model.inference.tensor_model_parallel_size=1",
        f"{TEACHER}.profiler._target_=verl.utils.profiler.ProfilerConfig",
        f"{TEACHER}.profiler.enable=true", f"{TEACHER}.profiler.ranks=[1]"], str(tmp_path))
    manifest = result["manifest"]
    entries = [e for e in manifest["reports"] if e["group"] == "teacher_replicas"]
    assert [(e["rank"], e["steps"], e["status"]) for e in entries] == [
        (1, (1,), "ok"), (1, (2,), "ok")], manifest["reports"]
    for entry in entries:
        assert nvtx_names(str(tmp_path / entry["path"])) == {"teacher/generate": REQUESTS}
    servers = {r["replica_rank"]: r["servers"][0] for r in result["replicas"]}
    assert [s["generate_per_step"] for s in servers.values()] == [[REQUESTS] * 2] * 2
    processes = {(p["group"], p["rank"]): p for p in manifest["processes"]}
    assert list(processes) == [("teacher_replicas", 1)]
    assert processes[("teacher_replicas", 1)]["pid"] == servers[1]["pid"]
    assert processes[("teacher_replicas", 1)]["under_profiler"]
    assert not (tmp_path / ".raw" / "teacher_replicas" / "rank0").exists()  # never profiled
    assert manifest["served"]["teacher_replicas"] == {"engine": "cpu_standin",
                                                      "gpus_per_replica": 1,
                                                      "servers_per_replica": 1}
