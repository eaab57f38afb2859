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
from verl.single_controller.base.decorator import Dispatch, register
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
