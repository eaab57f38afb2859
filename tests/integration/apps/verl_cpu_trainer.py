"""verl 0.9.1's real ``RayPPOTrainer.init_workers()`` and ``fit()`` on CPU, with no verlprof.

``run_fit(overrides, save_path)`` starts ``CpuTaskRunner`` (a Ray actor built as verl's
``main_ppo_v0.TaskRunner``: verl's ``BaseTaskRunner`` role mapping, resource pools, datasets,
tokenizer, ``validate_config``) on verl's ``ppo_trainer.yaml`` composed by Hydra from the
installed package plus ``CPU_OVERRIDES`` and the caller's overrides, then runs verl's trainer.

Runs for real: Hydra config and ``validate_config``; ``ResourcePoolManager`` (placement
groups), ``create_colocated_worker_cls`` + ``spawn`` of the fused actor/rollout(/ref) group;
``RLHFDataset`` over a parquet and verl's dataloader; ``RewardLoopManager`` and its reward loop
workers (verl's naive reward manager with a custom ``compute_score``); ``LLMServerManager`` with
the stand-in engine's replicas (``verl_cpu_engine``, imported through verl's
``model.external_lib`` seam: ``init_hybrid`` of the actor worker group, server actors, verl's
load balancer); ``AgentLoopManager`` and its ``AgentLoopWorker``s with
``single_turn_agent`` (chat template, tokenisation, postprocessing); ``CheckpointEngineManager``
(``naive`` backend: sleep replicas, ``update_weights``); the whole ``fit`` loop: profiling hooks
(``_start_profiling`` / ``_stop_profiling``, ``llm_server_manager.start_profile`` /
``stop_profile``), GRPO advantages, ``_balance_batch``, metrics, the console logger.

Stubbed, each because it cannot run here:
- the model-holding workers: ``Role.ActorRollout(Ref)`` maps to
  ``verl_workers.CpuActorRolloutRefWorker`` (verl's engine workers build FSDP/Megatron engines
  that need a GPU and real checkpoint weights); only ``add_actor_rollout_worker`` differs from
  verl's TaskRunner. The critic is not stubbed: the default overrides pick GRPO (no critic).
- the model and tokenizer: ``verl_cpu_assets`` writes a word-level tokenizer and a tiny Llama
  config (no weights) to a local directory (nothing can be downloaded);
- the inference engine: the stand-in ``cpu_standin`` (vLLM/SGLang need a GPU);
- GPUs themselves: verl's ``ResourcePoolManager`` always asks Ray for ``GPU`` bundles and checks
  the cluster's GPU count, and verl's platform on a machine without CUDA is still ``cuda``:
  the Ray cluster declares logical GPUs (``ray.init(num_gpus=...)``, no device behind them).

Not reachable in ``RayPPOTrainer`` 0.9.1: standalone / colocated actor rollout (it asserts
``hybrid_engine`` and always calls ``LLMServerManager(worker_group=actor_rollout_wg)``, so actor
replicas are ``init_hybrid``). ``run_generation`` drives the same classes in those modes.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Sequence

import ray

ENGINE_MODULE = "tests.integration.apps.verl_cpu_engine"
ASSETS_MODULE = "tests.integration.apps.verl_cpu_assets"
BATCH = 2
STEPS = 2


def cpu_overrides(model_dir: str, data: Dict[str, str], save_path: str) -> List[str]:
    """What makes verl's default config run on CPU, tiny: one logical GPU per pool, GRPO."""
    import importlib.util

    assets = importlib.util.find_spec(ASSETS_MODULE).origin
    return [
        "trainer.use_v1=false", "trainer.device=cpu", "trainer.n_gpus_per_node=1",
        "trainer.nnodes=1", "trainer.logger=[console]", "trainer.val_before_train=false",
        "trainer.test_freq=-1", "trainer.save_freq=-1", "trainer.resume_mode=disable",
        f"trainer.total_training_steps={STEPS}", "trainer.total_epochs=1",
        f"trainer.default_local_dir={save_path}/checkpoints",
        f"data.train_files={data['train']}", f"data.val_files={data['val']}",
        f"data.train_batch_size={BATCH}", "data.val_batch_size=2",
        "data.max_prompt_length=32", "data.max_response_length=6",
        "data.dataloader_num_workers=0",
        f"actor_rollout_ref.model.path={model_dir}",
        # verl's plugin seams import the engine module where its classes are looked up:
        # HFModelConfig (training workers, servers, agent loop) and CheckpointEngineWorker
        f"actor_rollout_ref.model.external_lib={ENGINE_MODULE}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={BATCH}",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.actor.use_kl_loss=false",
        "actor_rollout_ref.rollout.name=cpu_standin",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.rollout.agent.num_workers=1",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.rollout.max_model_len=64",
        f"actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module={ENGINE_MODULE}",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
        "algorithm.adv_estimator=grpo", "algorithm.use_kl_in_reward=false",
        "reward.num_workers=1", f"reward.custom_reward_function.path={assets}",
        "reward.custom_reward_function.name=compute_score",
        f"global_profiler.save_path={save_path}",
    ]


def compose(overrides: Sequence[str], save_path: str, flags: Sequence[str] = ()) -> Any:
    """verl's ``ppo_trainer`` with the CPU overrides, then the caller's; resolved as verl's
    TaskRunner resolves it. ``flags``: Hydra's (``--config-path``, ``--config-name``...),
    read as the launcher reads ``main_ppo``'s command line."""
    from omegaconf import OmegaConf

    from tests.integration.apps import verl_cpu_assets as assets
    from verlprof.bridges.verl.command_line import compose as compose_line
    from verlprof.bridges.verl.command_line import read_command_line

    model_dir = assets.write_model_dir(os.path.join(save_path, "model"))
    data = assets.write_dataset(os.path.join(save_path, "data"), train_rows=BATCH * STEPS)
    config = compose_line(read_command_line(
        [*flags, *cpu_overrides(model_dir, data, save_path), *overrides]))
    OmegaConf.resolve(config)
    return config


HOLD_BEFORE = "hold-before-step-1"
HOLD_AFTER = "hold-after-step-1"
"""Files of these names in the save path when the fit starts hold it before step 1's
``_start_profiling`` (the step boundary) and after step 1's ``_stop_profiling``, each until
its file is gone (bounded): a test's time to ask the running job something."""


def _hold_around_step_1(trainer: Any, save_path: str) -> None:
    def held(name: str, hook: Any, before: bool) -> Any:
        import time

        path = os.path.join(save_path, name)

        def wait() -> None:
            deadline = time.monotonic() + 120
            while trainer.global_steps == 1 and os.path.exists(path) and \
                    time.monotonic() < deadline:
                time.sleep(0.1)

        def hook_held(*args: Any, **kwargs: Any) -> Any:
            if before:
                wait()
            result = hook(*args, **kwargs)
            if not before:
                wait()
            return result
        return hook_held if os.path.exists(path) else hook

    # bound methods: verl's, or the bridge's wrappers of them
    trainer._start_profiling = held(HOLD_BEFORE, trainer._start_profiling, True)
    trainer._stop_profiling = held(HOLD_AFTER, trainer._stop_profiling, False)


def observed_path(config: Any) -> str:
    """Where ``CpuTaskRunner.run`` writes what it observed: beside the run's data files."""
    return os.path.join(os.path.dirname(config.data.train_files), "observed.json")


def _base_task_runner() -> type:
    from verl.trainer.main_ppo_v0 import BaseTaskRunner

    return BaseTaskRunner


@ray.remote(num_cpus=0)
class CpuTaskRunner(_base_task_runner()):  # type: ignore[misc]
    """verl's ``main_ppo_v0.TaskRunner``, step by step, with the CPU actor worker."""

    def add_actor_rollout_worker(self, config: Any) -> tuple:
        from verl.single_controller.ray import RayWorkerGroup
        from verl.trainer.ppo.ray_trainer import Role
        from verl.trainer.ppo.utils import need_reference_policy

        from tests.integration.apps.verl_workers import CpuActorRolloutRefWorker

        role = Role.ActorRolloutRef if need_reference_policy(config) else Role.ActorRollout
        self.role_worker_mapping[role] = ray.remote(CpuActorRolloutRefWorker)
        self.mapping[role] = "global_pool"
        return CpuActorRolloutRefWorker, RayWorkerGroup

    def add_critic_worker(self, config: Any) -> None:
        from verl.trainer.ppo.utils import need_critic

        if need_critic(config):
            raise NotImplementedError("the CPU harness has no critic worker: use GRPO")

    def fit(self, overrides: Sequence[str], save_path: str) -> Dict[str, Any]:
        return self.run(compose(overrides, save_path))

    def run(self, config: Any) -> Dict[str, Any]:
        """verl's ``TaskRunner.run(config)``, so that verl's own ``run_ppo(config,
        CpuTaskRunner)`` (and a launcher wrapping it) can drive it too; ``config`` is
        ``compose``'s. What it observed is returned and written to ``observed_path(config)``
        (``run_ppo`` discards the return value)."""
        import importlib
        import json

        from verl.trainer.ppo.ray_trainer import RayPPOTrainer
        from verl.trainer.ppo.utils import (
            create_rl_dataset,
            create_rl_sampler,
            need_critic,
            need_reference_policy,
        )
        from verl.utils.config import omega_conf_to_dataclass, validate_config
        from verl.utils.dataset.rl_dataset import collate_fn
        from verl.workers.config import HFModelConfig

        importlib.import_module(ENGINE_MODULE)  # registers cpu_standin in this process
        actor_rollout_cls, group_cls = self.add_actor_rollout_worker(config)
        self.add_critic_worker(config)
        self.add_reward_model_resource_pool(config)
        self.add_teacher_model_resource_pool(config)
        validate_config(config=config, use_reference_policy=need_reference_policy(config),
                        use_critic=need_critic(config))
        model_config = omega_conf_to_dataclass(config.actor_rollout_ref.model,
                                               dataclass_type=HFModelConfig)
        tokenizer, processor = model_config.tokenizer, model_config.processor
        pools = self.init_resource_pool_mgr(config)
        train = create_rl_dataset(config.data.train_files, config.data, tokenizer, processor,
                                  is_train=True)
        val = create_rl_dataset(config.data.val_files, config.data, tokenizer, processor,
                                is_train=False)
        trainer = RayPPOTrainer(
            config=config, tokenizer=tokenizer, processor=processor,
            role_worker_mapping=self.role_worker_mapping, resource_pool_manager=pools,
            ray_worker_group_cls=group_cls, train_dataset=train, val_dataset=val,
            collate_fn=collate_fn, train_sampler=create_rl_sampler(config.data, train))
        try:
            trainer.init_workers()
            _hold_around_step_1(trainer, config.global_profiler.save_path)
            trainer.fit()
            observed = self._observed(trainer)
            with open(observed_path(config), "w") as handle:
                json.dump(observed, handle)
            return observed
        finally:
            # named servers and placement groups outlive this call: free both for a next run
            for replica in getattr(getattr(trainer, "llm_server_manager", None),
                                   "rollout_replicas", []):
                for server in replica.servers:
                    ray.kill(server)
            for pool in pools.resource_pool_dict.values():
                for pg in pool.pgs or []:
                    ray.util.remove_placement_group(pg)

    @staticmethod
    def _observed(trainer: Any) -> Dict[str, Any]:
        return {
            "global_steps": trainer.global_steps - 1,  # fit counts one past its last step
            "training_pids": {"global_pool": trainer.actor_rollout_wg.pid()},
            "replicas": replicas_observed(trainer.llm_server_manager.get_replicas()),
        }


def replicas_observed(replicas: Sequence[Any]) -> List[Dict[str, Any]]:
    """Per replica: its rank, mode, worker pids, and what each of its servers recorded."""
    observed = []
    for replica in replicas:
        pids = ray.get([w.__ray_call__.remote(lambda _: os.getpid()) for w in replica.workers])
        servers = ray.get([s.recorded.remote() for s in replica.servers])
        for server in servers:  # generation at weights k belongs to step k + 1
            steps = [c["global_steps"] + 1 for c in server["calls"] if c["method"] == "generate"]
            server["generate_per_step"] = [steps.count(step)
                                           for step in range(1, max(steps, default=0) + 1)]
        observed.append({"replica_rank": replica.replica_rank,
                         "mode": replica.rollout_mode.value, "worker_pids": pids,
                         "servers": servers})
    return observed


def run_fit(overrides: Sequence[str], save_path: str) -> Dict[str, Any]:
    """verl's ``RayPPOTrainer.fit`` on CPU for ``STEPS`` steps, in a Ray actor ended after.

    Returns ``global_steps`` (steps run), ``training_pids`` (pool -> pid per rank), and
    ``replicas``: per rollout replica ``replica_rank``, ``mode`` (hybrid), ``worker_pids`` and
    ``servers`` (per server actor: ``pid``, ``engine_pid`` (the process that generates: the
    server's own, or the engine process it spawned), ``node_rank``, ``rollout_mode``,
    ``generate_per_step`` (generate calls in steps 1, 2, ...), ``calls``: every call with its
    method, time, the weights' ``global_steps`` (step - 1 during a step's generation) and details:
    ``start_profile``'s ``kwargs``, ``generate``'s lengths and whether a trace was on,
    ``trace_written``'s ``path``)."""
    runner = CpuTaskRunner.remote()
    try:
        return ray.get(runner.fit.remote(list(overrides), save_path))
    finally:
        ray.kill(runner)  # its worker groups, servers and agent loop workers die with it
