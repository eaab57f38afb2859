"""Worker classes written the way verl writes them, with no verlprof import.

verl's ``Worker`` and ``DistProfilerExtension``, ``@register`` for the single controller's
dispatch, and ``@DistProfiler.annotate`` on each phase, with verl 0.9.1's labels
(``actor_update``, ``ref_compute_log_prob``, ...) and its colours, ``olive`` included (the
``nvtx`` package rejects it without matplotlib). Each phase does a little real torch work.
"""

from __future__ import annotations

import os

import torch
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import (
    Dispatch,
    make_nd_compute_dataproto_dispatch_fn,
    register,
)
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.profiler import DistProfiler, DistProfilerExtension, ProfilerConfig


def _profiler(rank: int, block, prefix: str) -> DistProfiler:
    """As verl's engine workers build it: the role's ``profiler`` block and its tool config."""
    config = omega_conf_to_dataclass(block, dataclass_type=ProfilerConfig)
    tool = block.get("tool")
    tool_config = (omega_conf_to_dataclass(block.tool_config.get(tool))
                   if tool and block.get("tool_config") and block.tool_config.get(tool) is not None
                   else None)
    return DistProfiler(rank=rank, config=config, tool_config=tool_config,
                        save_file_prefix=prefix)


def _work(size: int = 48) -> float:
    a = torch.randn(size, size)
    for _ in range(3):
        a = torch.tanh(a @ a.T / size)
    return float(a.sum())


class ActorRolloutRefWorker(Worker, DistProfilerExtension):
    """Actor, rollout and ref in one worker (verl's hybrid engine)."""

    def __init__(self, config):
        Worker.__init__(self)
        torch.set_num_threads(1)
        DistProfilerExtension.__init__(
            self, _profiler(self.rank, config.actor.profiler, "actor_rollout_ref"))

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def pid(self) -> int:
        return os.getpid()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    @DistProfiler.annotate(color="green")  # labelled by its method, as verl 0.4.1 did
    def generate_sequences(self, n: int) -> float:
        return _work() + n

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    @DistProfiler.annotate(color="blue", role="actor_compute_log_prob")
    def compute_log_prob(self, n: int) -> float:
        return _work() + n

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    @DistProfiler.annotate(color="olive", role="ref_compute_log_prob")
    def compute_ref_log_prob(self, n: int) -> float:
        return _work() + n

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    @DistProfiler.annotate(color="red", role="actor_update", scheduled=True)
    def update_actor(self, n: int) -> float:
        return _work() + n


class CriticWorker(Worker, DistProfilerExtension):
    """As verl 0.9.1's critic (a ``TrainingWorker``): values come from ``infer_batch``, which
    verl does not annotate, and the update is ``train_batch``."""

    def __init__(self, config):
        Worker.__init__(self)
        torch.set_num_threads(1)
        DistProfilerExtension.__init__(self, _profiler(self.rank, config.profiler, "critic"))

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def pid(self) -> int:
        return os.getpid()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def infer_batch(self, n: int) -> float:
        return _work() + n

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    @DistProfiler.annotate(color="olive", role="train_batch")
    def train_batch(self, n: int) -> float:
        return _work() + n


class RewardModelWorker(Worker, DistProfilerExtension):
    def __init__(self, config):
        Worker.__init__(self)
        torch.set_num_threads(1)
        DistProfilerExtension.__init__(self, _profiler(self.rank, config.profiler, "rm"))

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def pid(self) -> int:
        return os.getpid()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    @DistProfiler.annotate(color="purple", role="rm_compute_score")
    def compute_rm_score(self, n: int) -> float:
        return _work() + n


class CpuActorRolloutRefWorker(Worker, DistProfilerExtension):
    """Stands in for verl 0.9.1's ``engine_workers.ActorRolloutRefWorker`` in ``RayPPOTrainer``
    (its FSDP/Megatron ``TrainingWorker`` engines need a GPU and real weights): the same
    constructor, dispatch meshes (``actor``, ``ref``), labels, and hybrid rollout adapter
    (``get_rollout_class(rollout.name)``, driven by ``update_weights`` as verl's naive sync does).
    A tiny torch policy computes per-token log-probs and takes an SGD step on CPU."""

    def __init__(self, config, role: str, distillation_config=None, **kwargs):
        Worker.__init__(self)
        torch.set_num_threads(1)
        self.config, self.role = config, role
        block = config.actor.profiler if "actor" in role else config.rollout.profiler
        DistProfilerExtension.__init__(self, _profiler(self.rank, block, role))
        self.policy = self.rollout = None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        from verl.workers.config import HFModelConfig
        from verl.workers.rollout.base import get_rollout_class

        from tests.integration.apps.cpu_standin_model import TinyLM

        model_config = omega_conf_to_dataclass(self.config.model, dataclass_type=HFModelConfig)
        self.policy = TinyLM(model_config.hf_config.vocab_size, seed=self.rank)
        self.optimizer = torch.optim.SGD(self.policy.parameters(), lr=1e-3)
        for mesh in ("actor", "ref"):
            self._register_dispatch_collect_info(mesh, dp_rank=self.rank, is_collect=True)
        rollout_config = self.config.rollout
        self.rollout = get_rollout_class(rollout_config.name, rollout_config.mode)(
            config=rollout_config, model_config=model_config, device_mesh=None)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def pid(self) -> int:
        return os.getpid()

    def _log_probs(self, data):
        input_ids = data["input_ids"]  # nested (jagged) sequences, verl's no-padding layout
        out = []
        for ids in input_ids.unbind():
            logp = torch.log_softmax(self.policy(ids), -1)
            nxt = torch.cat([ids[1:], ids[:1]])  # next token; the last is sliced off by verl
            out.append(logp.gather(-1, nxt.unsqueeze(-1)).squeeze(-1))
        return out

    def _output(self, data, log_probs, **metrics):
        from tensordict import TensorDict
        from verl.utils import tensordict_utils as tu

        offsets = data["input_ids"].offsets()
        nested = torch.nested.nested_tensor_from_jagged(torch.cat(log_probs), offsets=offsets)
        entropy = torch.nested.nested_tensor_from_jagged(
            torch.zeros_like(nested.values()), offsets=offsets)
        out = TensorDict({"log_probs": nested.detach(), "entropy": entropy},
                         batch_size=[len(log_probs)])
        tu.assign_non_tensor(out, metrics={"mfu": 0.0, **metrics})
        return out

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="ref"))
    @DistProfiler.annotate(color="olive", role="ref_compute_log_prob")
    def compute_ref_log_prob(self, data):
        with torch.no_grad():
            return self._output(data, self._log_probs(data))

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="actor"))
    @DistProfiler.annotate(color="blue", role="actor_compute_log_prob")
    def compute_log_prob(self, data):
        with torch.no_grad():
            return self._output(data, self._log_probs(data))

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="actor"))
    @DistProfiler.annotate(color="red", role="actor_update", scheduled=True)
    def update_actor(self, data):
        self.optimizer.zero_grad()
        loss = -torch.stack([lp.mean() for lp in self._log_probs(data)]).mean()
        loss.backward()
        self.optimizer.step()
        return self._output(data, [torch.zeros(len(ids)) for ids in data["input_ids"].unbind()],
                            loss=[float(loss)], grad_norm=[0.0])

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)
    async def update_weights(self, global_steps: int = None, mode: str = "auto"):
        """verl's naive (colocated, synchronous) weight sync: resume, push, resume kv."""
        await self.rollout.resume(tags=["weights"])
        await self.rollout.update_weights(
            ((name, p.detach()) for name, p in self.policy.named_parameters()),
            global_steps=global_steps)
        await self.rollout.resume(tags=["kv_cache"])

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None):
        return None
