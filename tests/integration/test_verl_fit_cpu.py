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
