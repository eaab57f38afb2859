"""verl 0.9.1's distillation teacher with the stand-in engine, driven by verl's own
``MultiTeacherModelManager``: the teacher pool split per replica (``split_resource_pool``),
each replica's ``init_colocated`` (verl's ``CheckpointEngineWorker`` per rank beside the server
actor), verl's router. Each step sends ``REQUESTS`` requests to every replica's server, as
verl's ``LLMServerClient`` does (``server.generate.remote``), straight to each server rather
than through the load balancer, so that every replica surely gets its step's requests; with
``bridged``, verlprof's bridge is attached and each step is a ``controller.step``.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Sequence

import ray

from tests.integration.apps.verl_cpu_trainer import ENGINE_MODULE, STEPS, compose, replicas_observed
from verlprof.runtime.teardown import end_late_agents

REQUESTS = 2
"""Requests each teacher replica answers per step."""


@ray.remote(num_cpus=0)
class CpuTeacherRunner:
    def run(self, overrides: Sequence[str], save_path: str) -> Dict[str, Any]:
        import importlib

        from verl.experimental.teacher_loop.teacher_model import MultiTeacherModelManager
        from verl.single_controller.ray.base import ResourcePoolManager

        from verlprof.bridges.verl import attach

        importlib.import_module(ENGINE_MODULE)
        config = compose(["distillation.enabled=true", "distillation.nnodes=1",
                          "distillation.teacher_models.teacher_model.model_path="
                          "${actor_rollout_ref.model.path}",
                          # the checkpoint engine's plugin seam imports the engine in the
                          # teacher's workers (its model config has no external_lib)
                          "+distillation.teacher_models.teacher_model.inference."
                          "checkpoint_engine=${actor_rollout_ref.rollout.checkpoint_engine}",
                          "distillation.n_gpus_per_node=2", *overrides], save_path)
        bridge = attach(config, preflight="quick", echo=False)
        pools = ResourcePoolManager(resource_pool_spec={"teacher_pool": [2]}, mapping={},
                                    max_colocate_count=2)
        pools.create_resource_pool()
        manager = MultiTeacherModelManager(config, pools.resource_pool_dict["teacher_pool"])
        [teacher] = manager.teacher_model_managers.values()
        for step in range(1, STEPS + 1):
            ray.get([s.set_global_steps.remote(step - 1) for r in teacher.rollout_replicas
                     for s in r.servers])
            bridge.begin_step(step)
            ray.get([server.generate.remote(prompt_ids=[1, 2, 3], sampling_params={},
                                            request_id=f"{step}-{replica}-{i}")
                     for replica, server in enumerate(teacher.server_handles)
                     for i in range(REQUESTS)])
            bridge.end_step(step)
        observed = {"replicas": replicas_observed(teacher.rollout_replicas),
                    "manifest": bridge.finish().to_dict()}
        for pool in pools.resource_pool_dict.values():
            for pg in pool.pgs or []:
                ray.util.remove_placement_group(pg)
        return observed


def run_teacher(overrides: Sequence[str], save_path: str) -> Dict[str, Any]:
    """``STEPS`` steps of requests to the teacher's two replicas, the bridge attached."""
    os.makedirs(save_path, exist_ok=True)
    runner = CpuTeacherRunner.remote()
    try:
        return ray.get(runner.run.remote(list(overrides), save_path))
    finally:
        ray.kill(runner)
        # a replica's nsys finishes only once its server goes with the runner, after the
        # bridge's finish settled the profilers: the agent it now and then leaves (CI saw
        # one) is ended by the driver's last look, as verlprof's launcher does
        end_late_agents(os.path.abspath(save_path))
