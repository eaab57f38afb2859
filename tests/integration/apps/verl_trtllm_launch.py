"""verl 0.9.1's TRT-LLM replicas launching their servers with verlprof's bridge attached.

``TRTLLMReplica.launch_servers`` names its module's ``TRTLLMHttpServer`` directly (no
``server_class``). Its servers cannot run here: ``TRTLLMHttpServer.__init__`` asserts CUDA (and
TensorRT-LLM does not install on CPU). What runs for real is everything up to that point:
verl's registry hands out its replica class, the replicas of a two-GPU pool (logical GPUs)
launch concurrently, and Ray starts each server's process with the options verl gave it,
through verlprof's seam. ``launch_trtllm`` returns, per server, the ``runtime_env`` Ray
started it with and why it died, and the run's manifest.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Dict, Sequence

import ray

from tests.integration.apps.verl_cpu_trainer import compose

REPLICAS = 2


@ray.remote(num_cpus=0)
class TrtllmLaunchRunner:
    def run(self, overrides: Sequence[str], save_path: str) -> Dict[str, Any]:
        from verl.single_controller.ray.base import ResourcePoolManager
        from verl.workers.rollout.replica import RolloutMode, RolloutReplicaRegistry

        from verlprof.bridges.verl import attach

        config = compose(["actor_rollout_ref.rollout.name=trtllm",
                          f"trainer.n_gpus_per_node={REPLICAS}", *overrides], save_path)
        bridge = attach(config, preflight="quick", echo=False)
        pools = ResourcePoolManager(resource_pool_spec={"global_pool": [REPLICAS]}, mapping={},
                                    max_colocate_count=1)
        pools.create_resource_pool()
        pool = pools.resource_pool_dict["global_pool"]
        pool.get_placement_groups(device_name="cuda")  # the hybrid workers' would, first
        replica_class = RolloutReplicaRegistry.get("trtllm")
        replicas = [replica_class(replica_rank=rank, config=config.actor_rollout_ref.rollout,
                                  model_config=config.actor_rollout_ref.model,
                                  gpus_per_node=REPLICAS) for rank in range(REPLICAS)]
        for replica in replicas:  # what init_hybrid_colocated sets before launch_servers
            replica.rollout_mode, replica.resource_pool = RolloutMode.HYBRID, pool

        async def launch() -> list:
            return await asyncio.gather(*[r.launch_servers() for r in replicas],
                                        return_exceptions=True)

        errors = asyncio.run(launch())
        actors = _actor_table()
        servers = {}
        for rank in range(REPLICAS):
            actor = actors.get(f"trtllm_server_{rank}")
            servers[rank] = actor and {
                "runtime_env": json.loads(actor.serialized_runtime_env or "{}"),
                "death_cause": str(actor.death_cause)}
        manifest = bridge.finish().to_dict()
        for pg in pool.pgs or []:
            ray.util.remove_placement_group(pg)
        return {"errors": [repr(e) for e in errors], "servers": servers, "manifest": manifest}


def _actor_table() -> Dict[str, Any]:
    """Ray's actor table (GCS), by name: the runtime env each actor was created with (the
    state API says the same, through the dashboard, which the tests' cluster does not run)."""
    from ray._private.state import state
    from ray.core.generated import gcs_pb2

    rows = state._connect_and_get_accessor().get_actor_table(None, None)
    actors = [gcs_pb2.ActorTableData.FromString(row) for row in rows]
    return {actor.name: actor for actor in actors if actor.name}


def launch_trtllm(overrides: Sequence[str], save_path: str) -> Dict[str, Any]:
    runner = TrtllmLaunchRunner.remote()
    try:
        return ray.get(runner.run.remote(list(overrides), save_path))
    finally:
        ray.kill(runner)
