"""The demo's fused worker: every role of a resource pool in one process, as verl fuses them."""

from __future__ import annotations

import torch

from verlprof.demo import workers
from verlprof.demo.trainer import group_class


def test_one_class_for_the_hybrid_roles():
    assert group_class(("actor", "rollout", "ref")) is workers.ActorRolloutRefWorker


def test_a_pool_of_actor_and_critic_is_one_object_with_both_roles():
    fused = group_class(("actor", "rollout", "ref", "critic"))
    assert fused is group_class(("actor", "rollout", "ref", "critic"))  # made once
    assert issubclass(fused, workers.ActorRolloutRefWorker)
    assert issubclass(fused, workers.CriticWorker)
    worker = fused(0, {})
    prompts = torch.randint(0, workers.VOCAB, (4, 3))
    seqs = worker.generate_sequences(prompts)
    old = worker.compute_log_prob(seqs)
    returns = torch.zeros(len(seqs))
    # both roles train their own model with their own optimizer in the one object
    before = [p.detach().clone() for p in worker.value.parameters()]
    worker.update_critic(seqs, returns + 1.0)
    worker.update_actor(seqs, old, torch.ones(len(seqs)))
    assert any(not torch.equal(b, p) for b, p in zip(before, worker.value.parameters()))
    assert worker.optimizer is not worker.value_optimizer
