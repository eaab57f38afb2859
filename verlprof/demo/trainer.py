"""A PPO-shaped trainer on Ray, profiled with verlprof exactly as a verl user would do it.

It runs inside a Ray actor (like verl's TaskRunner), so that when controller options are set
the controller process itself is launched under nsys. Each step calls, on every rank of the
owning group: rollout ``generate_sequences``, actor ``compute_log_prob``, ref
``compute_ref_log_prob``, critic ``compute_values``, rm ``compute_rm_score``, critic
``update_critic``, actor ``update_actor``.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Mapping, Optional

import ray
import torch

from verlprof.controller import ProfileController
from verlprof.demo import workers
from verlprof.launch import worker_options
from verlprof.plan import ProfilePlan

GROUP_CLASSES = {
    "actor_rollout_ref": workers.ActorRolloutRefWorker,
    "actor": workers.ActorRolloutRefWorker,
    "rollout": workers.ActorRolloutRefWorker,
    "ref": workers.ActorRolloutRefWorker,
    "critic": workers.CriticWorker,
    "rm": workers.RewardModelWorker,
}


def _delays(config: Mapping[str, Any], group: str, rank: int) -> Dict[str, float]:
    """Planted stragglers from ``demo.stragglers: [{group, rank, phase, seconds}]``."""
    out: Dict[str, float] = {}
    for item in (config.get("demo") or {}).get("stragglers") or []:
        if item.get("group") == group and int(item.get("rank", -1)) == rank:
            out[str(item["phase"])] = float(item.get("seconds", 0.2))
    return out


class PPOTrainer:
    """Creates the worker groups (wrapping only planned ranks) and runs the step loop."""

    def __init__(self, config: Mapping[str, Any], plan: ProfilePlan):
        self.config = config
        self.plan = plan
        trainer = config.get("trainer") or {}
        self.total_steps = int(trainer.get("total_training_steps", 3))
        self.batch_size = int((config.get("data") or {}).get("batch_size", 8))
        profiler = (trainer.get("profiler") or {})
        self.controller = ProfileController(
            plan, rpc_timeout_s=float(profiler.get("rpc_timeout_s", 120.0)),
            finalize_timeout_s=float(profiler.get("finalize_timeout_s", 300.0)))
        self.groups: Dict[str, List[Any]] = {}
        placement = (config.get("demo") or {}).get("worker_resources") or {}
        for group in plan.groups:
            cls = ray.remote(num_cpus=0)(GROUP_CLASSES[group.name])
            extra = {"resources": dict(placement[group.name])} if group.name in placement else {}
            self.groups[group.name] = [
                cls.options(**worker_options(plan, group.name, rank), **extra).remote(
                    rank, _delays(config, group.name, rank))
                for rank in range(group.world_size)]
        ray.get([w.ready.remote() for ws in self.groups.values() for w in ws])
        for name, actors in self.groups.items():
            self.controller.register_group(name, actors)

    def _role(self, role: str) -> Optional[List[Any]]:
        """The actors hosting ``role``: the hybrid group for actor/rollout/ref when it exists."""
        if role in ("actor", "rollout", "ref") and "actor_rollout_ref" in self.groups:
            return self.groups["actor_rollout_ref"]
        return self.groups.get(role)

    def _call(self, role: str, method: str, *per_rank_args: List[Any]) -> List[Any]:
        """``method`` on every rank of the role's group, rank r getting the r-th chunk."""
        actors = self._role(role)
        with self.controller.range(method):
            return ray.get([getattr(a, method).remote(*(arg[r] for arg in per_rank_args))
                            for r, a in enumerate(actors)])

    def _split(self, role: str, tensor: torch.Tensor) -> List[torch.Tensor]:
        return list(torch.tensor_split(tensor, len(self._role(role))))

    def _step(self, step: int) -> Dict[str, float]:
        prompts = torch.randint(0, workers.VOCAB, (self.batch_size, 4),
                                generator=torch.Generator().manual_seed(step))
        seqs = torch.cat(self._call("rollout", "generate_sequences",
                                    self._split("rollout", prompts)))
        old_lp = torch.cat(self._call("actor", "compute_log_prob", self._split("actor", seqs)))
        ref_lp = torch.cat(self._call("ref", "compute_ref_log_prob", self._split("ref", seqs)))
        values = (torch.cat(self._call("critic", "compute_values", self._split("critic", seqs)))
                  if "critic" in self.groups else torch.zeros(len(seqs)))
        scores = (torch.cat(self._call("rm", "compute_rm_score", self._split("rm", seqs)))
                  if "rm" in self.groups else (seqs[:, -1] % 2).float())
        kl = (old_lp - ref_lp).mean(-1)
        returns = scores - 0.01 * kl
        advantages = returns - values
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-6)
        metrics = {}
        if "critic" in self.groups:
            losses = self._call("critic", "update_critic", self._split("critic", seqs),
                                self._split("critic", returns))
            metrics["critic_loss"] = sum(losses) / len(losses)
        losses = self._call("actor", "update_actor", self._split("actor", seqs),
                            self._split("actor", old_lp), self._split("actor", advantages))
        metrics["actor_loss"] = sum(losses) / len(losses)
        metrics["score"] = float(scores.mean())
        return metrics

    def fit(self) -> Dict[str, Any]:
        """Run every step; whatever happens, finalize the profiles (the manifest is written)."""
        history = []
        with self.controller:
            for step in range(1, self.total_steps + 1):
                started = time.perf_counter()
                with self.controller.step(step):
                    metrics = self._step(step)
                metrics["step_s"] = time.perf_counter() - started
                history.append(metrics)
        manifest = self.controller.finalize()
        processes = self.worker_identities()
        self.shutdown_workers()
        return {"manifest": manifest.to_dict(), "history": history, "processes": processes,
                "controller": {"host": self.controller.host, "pid": self.controller.pid}}

    def worker_identities(self) -> List[Dict[str, Any]]:
        """Every worker's host, pid and whether a profiler wraps it (selected or not)."""
        refs = {(g, r): a.profile_status.remote() for g, ws in self.groups.items()
                for r, a in enumerate(ws)}
        return [dict(ray.get(ref), group=g, rank=r) for (g, r), ref in refs.items()]

    def shutdown_workers(self, timeout_s: float = 60.0) -> None:
        """Let workers exit normally so each nsys finishes cleanly before Ray tears down."""
        actors = [a for ws in self.groups.values() for a in ws]
        refs = [a.__ray_terminate__.remote() for a in actors]
        ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        for problem in self.controller.wait_for_profilers(timeout_s):
            print(f"verlprof: {problem}")


@ray.remote(num_cpus=0)
class TaskRunner:
    """The controller process (verl's TaskRunner): launched under nsys when planned."""

    def run(self, config: Dict[str, Any], plan: Dict[str, Any]) -> Dict[str, Any]:
        return PPOTrainer(config, ProfilePlan.from_dict(plan)).fit()
