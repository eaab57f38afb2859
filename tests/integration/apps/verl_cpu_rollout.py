"""verl 0.9.1's generation phase with the stand-in engine in standalone and colocated modes.

``RayPPOTrainer`` 0.9.1 builds its actor replicas only in hybrid mode (``verl_cpu_trainer``).
verl reaches the other two modes elsewhere: standalone through ``LLMServerManager`` without a
worker group (v1 ``separate_async``, fully-async, ``main_generation_server``), colocated through
the served-model managers (``RewardModelManager``, ``MultiTeacherModelManager``: replicas on
``split_resource_pool`` slices, ``init_colocated``). ``run_generation`` drives the actor rollout
in either mode with verl's own classes: ``LLMServerManager`` (for colocated, a subclass whose
``_initialize_llm_servers`` does what the served-model managers do), the replicas'
``init_standalone`` / ``init_colocated`` (verl's ``CheckpointEngineWorker`` per rollout rank,
holding the stand-in's adapter), verl's load balancer, ``AgentLoopManager`` and its workers,
``CheckpointEngineManager`` sleep/wake, over batches of verl's ``RLHFDataset``. Each step runs
what ``fit``'s ``gen`` phase runs, in its order: ``llm_server_manager.start_profile()`` on a
profiled step, ``generate_sequences``, ``sleep_replicas``, ``stop_profile()``. Not run: the
training phases and the weight sync (``wake_up_replicas`` and ``set_global_steps`` stand for it:
a standalone sync needs a non-naive checkpoint engine over NCCL/NIXL).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, Dict, Literal, Sequence

import ray
from verl.workers.rollout.llm_server import LLMServerManager

from tests.integration.apps.verl_cpu_engine import CpuStandinReplica
from tests.integration.apps.verl_cpu_trainer import (
    BATCH,
    ENGINE_MODULE,
    STEPS,
    compose,
    replicas_observed,
)

Mode = Literal["standalone", "colocated"]


class RecipeStandinReplica(CpuStandinReplica):
    """The stand-in's replica as a recipe's own class: not in verl's registry (as verl's
    PD-disaggregated classes are not), set through ``LLMServerManager``'s recipe hook
    (``rollout_replica_class``, which ``__init__`` keeps when a subclass has it)."""


class ColocatedLLMServerManager(LLMServerManager):
    """Replicas colocated in ``resource_pool``, built as verl's served-model managers build them,
    of a replica class of its own (:class:`RecipeStandinReplica`)."""

    rollout_replica_class = RecipeStandinReplica

    def __init__(self, config: Any, resource_pool: Any):
        self.colocated_pool = resource_pool
        super().__init__(config, worker_group=None)

    async def _initialize_llm_servers(self, start_rank: Any = None) -> None:
        from verl.single_controller.ray.base import split_resource_pool

        rollout = self.rollout_config
        world = (rollout.tensor_model_parallel_size * rollout.data_parallel_size
                 * rollout.pipeline_model_parallel_size)
        slices = split_resource_pool(self.colocated_pool, split_size=world)
        self.rollout_replicas = [
            self.rollout_replica_class(replica_rank=rank, config=rollout,
                                       model_config=self.model_config,
                                       gpus_per_node=rollout.n_gpus_per_node)
            for rank in range(len(slices))]
        await asyncio.gather(*[replica.init_colocated(pool) for replica, pool
                               in zip(self.rollout_replicas, slices, strict=True)])
        self.server_handles = [r.server_handle for r in self.rollout_replicas]
        self.server_addresses = [r.server_address for r in self.rollout_replicas]


@ray.remote(num_cpus=0)
class CpuRolloutRunner:
    def run(self, mode: Mode, overrides: Sequence[str], save_path: str,
            bridged: bool = False, kill: Any = None) -> Dict[str, Any]:
        import importlib

        import numpy as np
        from torch.utils.data import DataLoader
        from verl import DataProto
        from verl.checkpoint_engine import CheckpointEngineManager
        from verl.experimental.agent_loop import AgentLoopManager
        from verl.single_controller.ray import RayClassWithInitArgs, RayWorkerGroup
        from verl.single_controller.ray.base import ResourcePoolManager
        from verl.trainer.ppo.utils import create_rl_dataset
        from verl.utils.config import omega_conf_to_dataclass
        from verl.utils.dataset.rl_dataset import collate_fn
        from verl.workers.config import HFModelConfig

        from tests.integration.apps import verl_workers

        importlib.import_module(ENGINE_MODULE)
        config = compose(["actor_rollout_ref.rollout.nnodes=1",
                          "actor_rollout_ref.rollout.n_gpus_per_node=1", *overrides], save_path)
        model = omega_conf_to_dataclass(config.actor_rollout_ref.model,
                                        dataclass_type=HFModelConfig)
        bridge = None
        if bridged:  # verlprof's bridge, attached as a custom driver attaches it (docs/verl.md)
            from verlprof.bridges.verl import attach

            bridge = attach(config, preflight="quick", echo=False)
        training_pids: Dict[str, Any] = {}
        pools = ResourcePoolManager(resource_pool_spec={"global_pool": [1]}, mapping={},
                                    max_colocate_count=2)
        if mode == "standalone":
            manager = LLMServerManager.create(config=config)
        else:  # a training process first, then the rollout beside it in the same bundle
            pools.create_resource_pool()
            pool = pools.resource_pool_dict["global_pool"]
            trainer = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=RayClassWithInitArgs(
                cls=ray.remote(verl_workers.ActorRolloutRefWorker),
                config=config.actor_rollout_ref), device_name="cpu", name_prefix="train")
            training_pids["global_pool"] = trainer.pid()
            manager = ColocatedLLMServerManager.create(config=config, resource_pool=pool)
        replicas = manager.get_replicas()
        agent_loop = AgentLoopManager.create(config=config, llm_client=manager.get_client())
        checkpoint = CheckpointEngineManager(
            config=omega_conf_to_dataclass(config.actor_rollout_ref.rollout.checkpoint_engine),
            actor_wg=None, replicas=replicas)
        dataset = create_rl_dataset(config.data.train_files, config.data, model.tokenizer,
                                    model.processor, is_train=True)
        profiled = set(config.global_profiler.steps or [])
        steps = 0
        observed_replicas = replicas  # all but a killed one; every one's resources freed
        for step, batch_dict in enumerate(DataLoader(dataset, batch_size=BATCH,
                                                     collate_fn=collate_fn), start=1):
            if step > STEPS:
                break
            # the weights of step - 1, as fit's update_weights(global_steps) leaves them
            ray.get([s.set_global_steps.remote(step - 1) for r in replicas for s in r.servers])
            batch = DataProto.from_single_dict(batch_dict)
            batch.non_tensor_batch["uid"] = np.array([f"{step}-{i}" for i in range(len(batch))],
                                                     dtype=object)
            batch.meta_info["global_steps"] = step
            batch = batch.repeat(repeat_times=config.actor_rollout_ref.rollout.n,
                                 interleave=True)
            if step in profiled:
                manager.start_profile()
            if bridge is not None:  # what the bridge makes of fit's _start_profiling
                bridge.begin_step(step)
            agent_loop.generate_sequences(batch)
            checkpoint.sleep_replicas()
            steps = step
            if kill is not None and kill[0] == step:  # the replica's server dies, its window open
                replica = replicas[kill[1]]
                killed = ray.get(replica.servers[0].recorded.remote())
                ray.kill(replica.servers[0])
                _wait_until_dead(replica.servers[0])  # ray.kill returns at once
                observed_replicas = [r for r in replicas if r is not replica]
            if bridge is not None:
                bridge.end_step(step)
            if kill is not None and kill[0] == step:
                break
            if step in profiled:
                manager.stop_profile()
            checkpoint.wake_up_replicas()
        observed = {"global_steps": steps, "training_pids": training_pids,
                    "replicas": replicas_observed(observed_replicas)}
        if kill is not None:
            observed["killed"] = killed
        if bridge is not None:
            observed["manifest"] = bridge.finish().to_dict()
        for replica in replicas:
            if replica.resource_pool is not None:
                for pg in replica.resource_pool.pgs or []:
                    ray.util.remove_placement_group(pg)
        for pool in pools.resource_pool_dict.values():
            for pg in pool.pgs or []:
                ray.util.remove_placement_group(pg)
        return observed


def _wait_until_dead(actor: Any, timeout_s: float = 60.0) -> None:
    """Until Ray says ``actor`` died: a call sent before that may still reach it, and then a
    window the test means to leave open at the death would be closed first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ray.get(actor.recorded.remote(), timeout=5)
        except ray.exceptions.RayActorError:
            return
        except ray.exceptions.GetTimeoutError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"the killed actor still answers after {timeout_s:g}s")


def run_generation(mode: Mode, overrides: Sequence[str], save_path: str,
                   bridged: bool = False, kill: Any = None,
                   **runner_options: Any) -> Dict[str, Any]:
    """``STEPS`` generation phases with the actor rollout in ``mode``; the dict of ``run_fit``
    (``training_pids`` holds the colocated training process; empty for standalone). With
    ``bridged``, verlprof's bridge is attached in the driver and each step is a
    ``controller.step``; the dict then holds the run's ``manifest``. ``kill``: (step, replica)
    ends that replica's server with ``ray.kill`` after the step's generation, before the step
    ends (its window open), and the run stops there (``killed``: what it recorded first).
    ``runner_options``:
    Ray's options of the driver's actor (``resources`` pins it to a node)."""
    os.makedirs(save_path, exist_ok=True)
    runner = CpuRolloutRunner.options(**runner_options).remote()
    try:
        return ray.get(runner.run.remote(mode, list(overrides), save_path, bridged, kill))
    finally:
        ray.kill(runner)
