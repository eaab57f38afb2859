"""The demo's worker classes: small but real torch work in each annotated phase.

They use verlprof exactly as a verl worker would: mix in :class:`ProfilingWorkerMixin` and
decorate the phase methods with :func:`annotate`. Nothing here knows whether it is profiled.
"""

from __future__ import annotations

import time
from typing import Dict, Optional

import torch
from torch import nn

from verlprof.worker import ProfilingWorkerMixin, annotate

VOCAB = 64
HIDDEN = 64


def _policy() -> nn.Module:
    return nn.Sequential(nn.Embedding(VOCAB, HIDDEN), nn.Linear(HIDDEN, HIDDEN), nn.Tanh(),
                         nn.Linear(HIDDEN, VOCAB))


class DemoWorker(ProfilingWorkerMixin):
    """Common set-up: one CPU thread per process, a seeded model, an optional planted delay."""

    def __init__(self, rank: int, delays: Optional[Dict[str, float]] = None, seed: int = 0):
        torch.set_num_threads(1)
        torch.manual_seed(seed + rank)
        self.rank = rank
        self.delays = dict(delays or {})

    def _delay(self, phase: str) -> None:
        """A planted straggler: this rank sleeps this long in this phase (demo config)."""
        seconds = self.delays.get(phase)
        if seconds:
            time.sleep(seconds)

    def ready(self) -> int:
        return self.rank


class ActorRolloutRefWorker(DemoWorker):
    """The hybrid engine: actor, rollout and ref share one process per rank."""

    def __init__(self, rank: int, delays: Optional[Dict[str, float]] = None, seed: int = 0,
                 gen_len: int = 24):
        super().__init__(rank, delays, seed)
        self.policy = _policy()
        self.ref = _policy()
        self.ref.load_state_dict(self.policy.state_dict())
        self.optimizer = torch.optim.AdamW(self.policy.parameters(), lr=1e-3)
        self.gen_len = gen_len

    @annotate("rollout")
    def generate_sequences(self, prompts: torch.Tensor) -> torch.Tensor:
        self._delay("generate_sequences")
        seqs = prompts
        with torch.no_grad():
            for _ in range(self.gen_len):
                logits = self.policy(seqs)[:, -1]
                nxt = torch.multinomial(torch.softmax(logits, -1), 1)
                seqs = torch.cat([seqs, nxt], dim=1)
        return seqs

    def _log_prob(self, model: nn.Module, seqs: torch.Tensor) -> torch.Tensor:
        logits = model(seqs[:, :-1])
        return torch.log_softmax(logits, -1).gather(-1, seqs[:, 1:, None]).squeeze(-1)

    @annotate("actor")
    def compute_log_prob(self, seqs: torch.Tensor) -> torch.Tensor:
        self._delay("compute_log_prob")
        with torch.no_grad():
            return self._log_prob(self.policy, seqs)

    @annotate("ref")
    def compute_ref_log_prob(self, seqs: torch.Tensor) -> torch.Tensor:
        self._delay("compute_ref_log_prob")
        with torch.no_grad():
            return self._log_prob(self.ref, seqs)

    @annotate("actor")
    def update_actor(self, seqs: torch.Tensor, old_log_prob: torch.Tensor,
                     advantages: torch.Tensor) -> float:
        self._delay("update_actor")
        for _ in range(2):  # two PPO epochs over the micro-batch
            log_prob = self._log_prob(self.policy, seqs)
            ratio = torch.exp(log_prob - old_log_prob)
            clipped = torch.clamp(ratio, 0.8, 1.2)
            loss = -torch.min(ratio * advantages[:, None], clipped * advantages[:, None]).mean()
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
        return float(loss.detach())  # detached: torch warns on a scalar taken from a graph


class CriticWorker(DemoWorker):
    def __init__(self, rank: int, delays: Optional[Dict[str, float]] = None, seed: int = 0):
        super().__init__(rank, delays, seed)
        self.value = nn.Sequential(nn.Embedding(VOCAB, HIDDEN), nn.Linear(HIDDEN, 1))
        # its own name: the critic may share a process (and an object) with the actor
        self.value_optimizer = torch.optim.AdamW(self.value.parameters(), lr=1e-3)

    @annotate("critic")
    def compute_values(self, seqs: torch.Tensor) -> torch.Tensor:
        self._delay("compute_values")
        with torch.no_grad():
            return self.value(seqs).squeeze(-1).mean(-1)

    @annotate("critic")
    def update_critic(self, seqs: torch.Tensor, returns: torch.Tensor) -> float:
        self._delay("update_critic")
        for _ in range(2):
            loss = ((self.value(seqs).squeeze(-1).mean(-1) - returns) ** 2).mean()
            self.value_optimizer.zero_grad()
            loss.backward()
            self.value_optimizer.step()
        return float(loss.detach())  # detached: torch warns on a scalar taken from a graph


class RewardModelWorker(DemoWorker):
    def __init__(self, rank: int, delays: Optional[Dict[str, float]] = None, seed: int = 0):
        super().__init__(rank, delays, seed)
        self.scorer = nn.Sequential(nn.Embedding(VOCAB, HIDDEN), nn.Linear(HIDDEN, 1))

    @annotate("rm")
    def compute_rm_score(self, seqs: torch.Tensor) -> torch.Tensor:
        self._delay("compute_rm_score")
        with torch.no_grad():
            return torch.sigmoid(self.scorer(seqs).squeeze(-1).mean(-1))
