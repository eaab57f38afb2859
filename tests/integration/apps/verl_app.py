"""A verl trainer's driver on CPU, as verl's TaskRunner runs it, with verlprof's bridge attached.

verl 0.9.1's own config (Hydra-composed ``ppo_trainer.yaml`` from the installed package, only the
profiler keys overridden), verl's resource pools and fused worker groups
(``create_colocated_worker_cls`` + ``spawn``: actor/rollout/ref and critic in one process per
rank, the reward model in its own pool), and verl's own ``RayPPOTrainer._start_profiling`` /
``_stop_profiling`` around each step. The step calls the phases the way the trainer does. Only
the resource pools ask for no GPU (``use_gpu=False``, ``device_name="cpu"``).
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Dict, List, Sequence

import ray

GLOBAL_RANKS = 2
STEPS = 3


def compose_verl_config(overrides: Sequence[str]) -> Any:
    """verl's ``ppo_trainer`` from the installed verl, composed as verl composes it, resolved
    in place as verl's TaskRunner does."""
    from omegaconf import OmegaConf

    from verlprof.bridges.verl.launch import compose_verl_config as compose

    config = compose(overrides)
    OmegaConf.resolve(config)
    return config


@ray.remote(num_cpus=0)
class VerlTaskRunner:
    """The controller process (verl's TaskRunner); launched under nsys when the plan says."""

    def run(self, overrides: Sequence[str], topology: Any, plan: Any = None) -> Dict[str, Any]:
        from omegaconf import OmegaConf
        from verl.single_controller.ray import (
            RayClassWithInitArgs,
            RayResourcePool,
            RayWorkerGroup,
        )
        from verl.single_controller.ray.base import create_colocated_worker_cls

        from tests.integration.apps import verl_workers as w
        from verlprof.bridges.verl import attach
        from verlprof.bridges.verl.driver_side import VerlActor

        config = compose_verl_config(overrides)
        bridge = attach(config, topology, plan=plan, preflight="quick")

        def group(pool: Any, roles: Dict[str, Any]) -> Dict[str, Any]:
            fused = create_colocated_worker_cls(class_dict=roles)
            wg = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=fused, device_name="cpu")
            return {"wg": wg, **wg.spawn(prefix_set=roles.keys())}

        # verl 0.9.1's reward model has no profiler block: give it a disabled one
        rm_block = OmegaConf.create({"profiler": {
            **OmegaConf.to_container(config.critic.profiler), "enable": False, "ranks": []}})
        resource_pools = [RayResourcePool([GLOBAL_RANKS], use_gpu=False, max_colocate_count=1),
                          RayResourcePool([1], use_gpu=False, max_colocate_count=1,
                                          name_prefix="reward_pool")]
        pools = {
            "global_pool": group(resource_pools[0], {
                "actor_rollout_ref": RayClassWithInitArgs(
                    cls=ray.remote(w.ActorRolloutRefWorker), config=config.actor_rollout_ref),
                "critic": RayClassWithInitArgs(cls=ray.remote(w.CriticWorker),
                                               config=config.critic)}),
            "reward_pool": group(resource_pools[1], {
                "rm": RayClassWithInitArgs(cls=ray.remote(w.RewardModelWorker), config=rm_block)}),
        }
        actor, critic = pools["global_pool"]["actor_rollout_ref"], pools["global_pool"]["critic"]
        rm = pools["reward_pool"]["rm"]
        pids = {"actor_rollout_ref": actor.pid(), "critic": critic.pid(), "rm": rm.pid()}

        from verl.trainer.ppo.ray_trainer import RayPPOTrainer

        trainer = RayPPOTrainer.__new__(RayPPOTrainer)  # its hooks, without models to load
        trainer.config = config
        trainer.actor_rollout_wg, trainer.ref_policy_wg, trainer.critic_wg = actor, actor, critic
        trainer.use_reference_policy = trainer.use_critic = True
        steps = config.global_profiler.steps or []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for step in range(1, STEPS + 1):
                trainer.global_steps = step
                trainer._start_profiling(step in steps)
                actor.generate_sequences(step)
                actor.compute_log_prob(step)
                actor.compute_ref_log_prob(step)
                critic.infer_batch(step)
                rm.compute_rm_score(step)
                critic.train_batch(step)
                actor.update_actor(step)
                trainer._stop_profiling(step in steps)
        manifest = bridge.finish()
        status: Dict[str, List[Any]] = {}
        for name, pool in pools.items():
            status[name] = []
            for handle in pool["wg"].workers:
                try:
                    reply = ray.get(VerlActor(handle).verlprof_status.remote(), timeout=60)
                except ray.exceptions.RayActorError:  # ended at fit's end (rocprof-sys)
                    status[name].append({"ended": True})
                    continue
                status[name].append({"pid": reply.identity.pid, "configured": reply.configured,
                                     "under_profiler": reply.identity.under_profiler})
        handles: List[Any] = [h for pool in pools.values() for h in pool["wg"].workers]
        ray.wait([h.__ray_terminate__.remote() for h in handles], num_returns=len(handles),
                 timeout=60)
        problems = bridge.controller.wait_for_profilers(60)
        # placement groups outlive the actor that made them (they belong to the job): give
        # their CPUs back for the next run in this cluster
        for pool in resource_pools:
            for pg in pool.pgs or []:
                ray.util.remove_placement_group(pg)
        return {"manifest": manifest.to_dict(), "pids": pids, "status": status,
                "problems": problems}


@ray.remote(num_cpus=0)
class ProbeTaskRunner:
    """Stands in for verl's TaskRunner under verl's own ``run_ppo`` (which discards ``run``'s
    result): records what the launcher gave it in ``<save_path>/probe.json``."""

    def run(self, config: Any) -> None:
        import json

        from verlprof.bridges.verl.driver_side import active_bridge
        from verlprof.worker.identity import profiler_ancestor

        bridge = active_bridge()
        with bridge.controller.step(1), bridge.controller.range("fit"):
            pass
        probe = {"attached": bridge is not None, "plan_steps": list(bridge.plan.steps),
                 "verl_steps": config.global_profiler.steps,
                 "under_profiler": profiler_ancestor() is not None,
                 "bridge_env": os.environ.get("VERLPROF_VERL_BRIDGE")}
        with open(os.path.join(config.global_profiler.save_path, "probe.json"), "w") as handle:
            json.dump(probe, handle)
