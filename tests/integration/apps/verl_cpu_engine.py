"""A stand-in rollout engine for verl 0.9.1, written as an engine author writes one (no verlprof).

Registered through verl's public ``RolloutReplicaRegistry.register("cpu_standin", loader)`` on
import. Its pieces mirror verl's vLLM backend (``vllm_rollout/vllm_async_server.py``):

- ``CpuStandinReplica`` (a ``RolloutReplica``): ``launch_servers`` starts one server Ray actor
  per replica node, pinned to the node of the replica's workers, named
  ``cpu_standin_server_<replica>_<node>`` (reward/teacher names as vLLM's); verl's own
  ``init_hybrid`` / ``init_colocated`` / ``init_standalone`` pick the workers.
- ``CpuStandinServer`` (the server actor): ``generate`` runs a tiny random torch model on CPU
  (``cpu_standin_model``), each call inside ``nvtx.annotate("generate")`` and
  ``record_function("cpu_standin.generate")``, in the server process or, with
  ``rollout.engine_kwargs.cpu_standin.spawn_engine=true``, in an engine process the server
  spawns (as vLLM's server spawns its EngineCore; the torch profiler then runs there too);
  ``wake_up`` / ``sleep`` / ``clear_kv_cache`` / ``abort_all_requests`` / ... answer as vLLM's
  do; ``start_profile(**kwargs)`` / ``stop_profile()`` follow vLLM's torch-profiler route: gated
  by verl's ``build_rollout_dist_profiler`` on the rollout's ``profiler`` block (node 0 only,
  discrete tools torch/npu only), the trace written into ``rollout_trace_dir(save_path,
  replica)`` and relocated with verl's ``relocate_rollout_traces``. It records every call.
- ``CpuStandinAdapter`` (a ``BaseRollout``, verl's "ServerAdapter"): what the training workers
  (hybrid) and verl's ``CheckpointEngineWorker`` (colocated, standalone) hold to reach the server:
  ``resume`` / ``release`` / ``update_weights`` (which sets the server's ``global_steps`` as
  vLLM's adapter does).

Not like vLLM: no HTTP server (the address is a reserved free port, used by verl only as the
load balancer's key: the OpenAI endpoint serves tool agents and reward models, not this harness).
verl 0.9.1 has no public registry for the adapter: it is added to ``_ROLLOUT_REGISTRY`` on
import. Every process that looks the engine up must import this module; verl's own plugin
seams do it: ``actor_rollout_ref.model.external_lib`` (``HFModelConfig`` imports it: training
workers, the trainer, servers, agent loop workers) and
``rollout.checkpoint_engine.custom_backend_module`` (``CheckpointEngineWorker`` imports it before
looking the adapter up).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import socket
import time
import zlib
from typing import Any, Dict, List, Optional

import ray
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.profiler.config import (
    build_vllm_profiler_args,
    relocate_rollout_traces,
    rollout_profiler_global_ranks,
    rollout_trace_dir,
)
from verl.utils.profiler.profile import build_rollout_dist_profiler
from verl.workers.config import HFModelConfig
from verl.workers.rollout import base as rollout_base
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, RolloutReplicaRegistry, TokenOutput

from tests.integration.apps.cpu_standin_model import LocalEngine, SpawnedEngine

ENGINE = "cpu_standin"


class CpuStandinServer:
    """One replica node's server actor (vLLM's ``vLLMHttpServer``)."""

    def __init__(self, config: Any, model_config: Any, rollout_mode: Any, workers: List[Any],
                 replica_rank: int, node_rank: int, gpus_per_node: int, nnodes: int,
                 cuda_visible_devices: str = "", **_: Any):
        self.config = omega_conf_to_dataclass(config)
        # a DictConfig from LLMServerManager, an HFModelConfig from the reward/teacher managers
        self.model_config = omega_conf_to_dataclass(model_config, dataclass_type=HFModelConfig)
        self.rollout_mode, self.workers = rollout_mode, workers
        self.replica_rank, self.node_rank, self.nnodes = replica_rank, node_rank, nnodes
        self.global_steps: Optional[int] = None
        self.awake, self.engine, self.engine_pid, self.port = True, None, None, 0
        # one engine thread, as an engine's loop: generation, profiler start and stop in order
        self._engine_thread = concurrent.futures.ThreadPoolExecutor(1, "cpu_standin_engine")
        self.calls: List[Dict[str, Any]] = []
        self._profiling = False
        # the rollout profiler as vLLM's server builds it: torch/npu only, ranks -> replicas
        profiler_config, tool_config = self.config.profiler, None
        if profiler_config is not None:
            if profiler_config.tool in ("torch", "npu"):
                tool_config = omega_conf_to_dataclass(
                    (profiler_config.tool_config or {}).get(profiler_config.tool))
            else:
                profiler_config = None
        self.replica_world_size = (self.config.tensor_model_parallel_size
                                   * self.config.data_parallel_size
                                   * self.config.pipeline_model_parallel_size)
        self.profiler_controller = build_rollout_dist_profiler(
            replica_rank, self.replica_world_size, config=profiler_config, tool_config=tool_config)
        self.profiler_keep_global_ranks = rollout_profiler_global_ranks(profiler_config)

    async def _on_engine(self, function: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(
            self._engine_thread, function, *args)

    def _record(self, method: str, **fields: Any) -> None:
        self.calls.append({"method": method, "time": time.time(),
                           "global_steps": self.global_steps, **fields})

    async def launch_server(self, **kwargs: Any) -> None:
        """Start the engine: a tiny random model of the config's vocabulary, in this process,
        or in a spawned engine process (``engine_kwargs.cpu_standin.spawn_engine``), as vLLM's
        server spawns its EngineCore."""
        tokenizer = self.model_config.tokenizer
        options = (self.config.engine_kwargs or {}).get(ENGINE) or {}
        engine_class = SpawnedEngine if options.get("spawn_engine") else LocalEngine
        self.engine = engine_class(self.model_config.hf_config.vocab_size, self.replica_rank,
                                   tokenizer.eos_token_id if tokenizer else None)
        self.engine_pid = await self._on_engine(self.engine.pid)
        with socket.socket() as probe:  # a unique address for verl's load balancer
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self._record("launch_server", **kwargs)

    def get_master_address(self) -> tuple:
        return ray.util.get_node_ip_address(), self.port, self.port

    def get_server_address(self) -> tuple:
        return ray.util.get_node_ip_address().strip("[]"), self.port

    def get_rollout_config(self) -> Any:
        return self.config

    async def generate(self, prompt_ids: List[int], sampling_params: Dict[str, Any],
                       request_id: str, image_data: Any = None, video_data: Any = None,
                       **kwargs: Any) -> TokenOutput:
        max_tokens = sampling_params.get("max_tokens") or self.config.response_length
        max_tokens = min(max_tokens, self.config.response_length)
        temperature = float(sampling_params.get("temperature", 1.0))
        tokens, logprobs = await self._on_engine(
            self.engine.generate, list(prompt_ids), max_tokens, temperature,
            zlib.crc32(request_id.encode()))
        self._record("generate", prompt_len=len(prompt_ids), response_len=len(tokens),
                     profiling=self._profiling)
        return TokenOutput(token_ids=tokens,
                           log_probs=logprobs if sampling_params.get("logprobs") else None,
                           stop_reason="completed", num_preempted=0,
                           extra_fields={"global_steps": self.global_steps})

    def _should_profile(self) -> bool:
        controller = self.profiler_controller
        return controller.check_enable() and controller.check_this_rank() \
            and controller.is_discrete_mode()

    async def start_profile(self, **kwargs: Any) -> None:
        self._record("start_profile", kwargs=kwargs)
        if self.node_rank != 0 or not self._should_profile():
            return
        # vLLM's route: verl's profiler args (the token window as delay/max iterations)
        tool_config = self.profiler_controller.tool_config
        args = json.loads(build_vllm_profiler_args(
            self.profiler_controller.config, tool_config, self.replica_rank,
            legacy_env=False).get("profiler_config", "{}"))
        contents = getattr(tool_config, "contents", None) or []
        await self._on_engine(self.engine.start_profile, list(contents),
                              int(args.get("delay_iterations", 0)),
                              int(args.get("max_iterations", 0)))
        self._profiling = True

    async def stop_profile(self) -> None:
        self._record("stop_profile")
        if self.node_rank != 0 or not self._profiling:
            return
        self._profiling = False
        directory = rollout_trace_dir(self.profiler_controller.config, self.replica_rank)
        path = await self._on_engine(self.engine.stop_profile, directory)
        if path:  # nothing when the token window began after the step's last iteration
            self._record("trace_written", path=path)
        relocate_rollout_traces(self.profiler_controller.config, self.replica_rank,
                                self.replica_world_size, self.profiler_keep_global_ranks)

    async def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps
        self._record("set_global_steps")

    async def wake_up(self, tags: Optional[List[str]] = None) -> None:
        self.awake = True
        self._record("wake_up", tags=tags)

    async def sleep(self) -> None:
        self.awake = False
        self._record("sleep")

    async def clear_kv_cache(self) -> None:
        self._record("clear_kv_cache")

    async def release_kv_cache(self) -> None:
        self._record("release_kv_cache")

    async def resume_kv_cache(self) -> None:
        self._record("resume_kv_cache")

    async def wait_for_requests_to_drain(self) -> None:
        self._record("wait_for_requests_to_drain")

    async def abort_all_requests(self, reset_prefix_cache: bool = True,
                                 reject_request: bool = False) -> Dict[str, Any]:
        self._record("abort_all_requests", reject_request=reject_request)
        return {"aborted": 0}

    async def resume_generation(self) -> None:
        self._record("resume_generation")

    async def abort_request(self, request_id: str, reset_prefix_cache: bool = True) -> Dict:
        self._record("abort_request", request_id=request_id)
        return {"aborted": False}

    def recorded(self) -> Dict[str, Any]:
        """What a test asserts on: this process, its replica and node, every call made."""
        return {"pid": os.getpid(), "engine_pid": self.engine_pid,
                "replica_rank": self.replica_rank,
                "node_rank": self.node_rank, "rollout_mode": str(self.rollout_mode.value),
                "calls": list(self.calls)}


def server_name(replica: RolloutReplica, node_rank: int) -> str:
    kind = "_reward" if replica.is_reward_model else "_teacher" if replica.is_teacher_model else ""
    return f"{ENGINE}_server{kind}_{replica.replica_rank}_{node_rank}{replica.name_suffix}"


class CpuStandinReplica(RolloutReplica):
    """A replica of the stand-in engine (vLLM's ``vLLMReplica``)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        # num_cpus=0: the replica's bundles hold the workers; the server only answers calls
        self.server_class = ray.remote(num_cpus=0)(CpuStandinServer)

    async def launch_servers(self) -> None:
        assert len(self.workers) == self.world_size, (len(self.workers), self.world_size)
        node_ids = await asyncio.gather(*[
            worker.__ray_call__.remote(lambda _: ray.get_runtime_context().get_node_id())
            for worker in self.workers])
        for node_rank in range(self.nnodes):
            node_id = node_ids[node_rank * self.gpus_per_replica_node]
            server = self.server_class.options(
                scheduling_strategy=ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
                    node_id=node_id, soft=False),
                name=server_name(self, node_rank), max_concurrency=self.max_concurrency,
            ).remote(config=self.config, model_config=self.model_config,
                     rollout_mode=self.rollout_mode, workers=self.workers[
                         node_rank * self.gpus_per_replica_node:
                         (node_rank + 1) * self.gpus_per_replica_node],
                     replica_rank=self.replica_rank, node_rank=node_rank,
                     gpus_per_node=self.gpus_per_replica_node, nnodes=self.nnodes)
            self.servers.append(server)
        await asyncio.gather(*[server.launch_server.remote() for server in self.servers])
        address, port = await self.servers[0].get_server_address.remote()
        self._server_handle, self._server_address = self.servers[0], f"{address}:{port}"


class CpuStandinAdapter(BaseRollout):
    """What a worker holds to reach its replica's server (vLLM's ``ServerAdapter``); it finds
    the server by name, as an actor-rollout replica's (not a reward or teacher model's)."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any = None,
                 replica_rank: int = -1, **kwargs: Any):
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", 0))
        world = (self.config.tensor_model_parallel_size * self.config.data_parallel_size
                 * self.config.pipeline_model_parallel_size)
        self.replica_rank = rank // world if replica_rank == -1 else replica_rank
        self.is_leader_rank = rank % world == 0
        self.weights_received = 0

    def _server(self) -> Any:
        return ray.get_actor(f"{ENGINE}_server_{self.replica_rank}_0")

    async def resume(self, tags: List[str]) -> None:
        if self.is_leader_rank:
            await self._server().wake_up.remote(tags=tags)

    async def release(self) -> None:
        if self.is_leader_rank:
            await self._server().sleep.remote()

    async def update_weights(self, weights: Any, wire_format: str = "named_tensors",
                             **kwargs: Any) -> None:
        self.weights_received += sum(1 for _ in weights)
        if self.is_leader_rank and kwargs.get("global_steps") is not None:
            await self._server().set_global_steps.remote(kwargs["global_steps"])


def _load() -> type:
    return CpuStandinReplica


RolloutReplicaRegistry.register(ENGINE, _load)
rollout_base._ROLLOUT_REGISTRY[(ENGINE, "async")] = f"{__name__}.CpuStandinAdapter"
