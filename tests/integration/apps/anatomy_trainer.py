"""A test trainer for "where the step went" (verlprof/report/anatomy.py): the demo's trainer
and workers with three delays planted, each in a step of its own, so that one run shows each
row react to its cause (tests/integration/test_report_anatomy.py).

Unlike the demo, each phase opens its controller range before the calls are sent, as verl's
``marked_timer`` wraps the worker group call: the dispatch (serialising the arguments, Ray
sending them) is then inside the controller's phase, where the anatomy splits it out.

* step :data:`DRIVER_SLEEP_STEP`: the driver sleeps :data:`DRIVER_SLEEP_S` between
  ``compute_log_prob`` and the next phase (driver work grows);
* step :data:`PAYLOAD_STEP`: ``compute_ref_log_prob`` gets an extra :data:`PAYLOAD_BYTES`
  argument that the worker ignores (its dispatch grows, its compute does not);
* a slowed rank comes from the demo's own ``demo.faults`` (sleep in one phase of one step),
  set by the test.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional

import ray
import torch

from verlprof.demo import trainer as demo_trainer
from verlprof.demo import workers
from verlprof.demo.settings import DemoSettings
from verlprof.plan_model import ProfilePlan
from verlprof.worker import annotate, process_identity

DRIVER_SLEEP_STEP = 3
DRIVER_SLEEP_S = 0.08
PAYLOAD_STEP = 4
PAYLOAD_BYTES = 50 * 2**20


class PayloadWorker(workers.ActorRolloutRefWorker):
    """The demo's hybrid worker, whose ``compute_ref_log_prob`` takes (and ignores) a
    payload."""

    @annotate("ref")
    def compute_ref_log_prob(self, seqs: torch.Tensor,
                             payload: Optional[torch.Tensor] = None) -> torch.Tensor:
        self._delay("compute_ref_log_prob")
        with torch.no_grad():
            return self._log_prob(self.ref, seqs)


class AnatomyTrainer(demo_trainer.PPOTrainer):
    """The demo's step loop; each call inside its controller range, delays planted."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.payload = torch.ones(PAYLOAD_BYTES // 4, dtype=torch.float32)  # made up front
        self.now = 0

    def _step(self, step: int) -> Dict[str, float]:
        self.now = step
        return super()._step(step)

    def _call(self, role: str, method: str, *tensors: torch.Tensor) -> List[Any]:
        _, live = self._role(role)
        extra = ({"payload": self.payload}
                 if method == "compute_ref_log_prob" and self.now == PAYLOAD_STEP else {})
        with self.controller.range(method):
            chunks = [torch.tensor_split(t, len(live)) for t in tensors]
            refs = [getattr(actor, method).remote(*(c[i] for c in chunks), **extra)
                    for i, (_, actor) in enumerate(live)]
            out = ray.get(refs)
        if method == "compute_log_prob" and self.now == DRIVER_SLEEP_STEP:
            time.sleep(DRIVER_SLEEP_S)  # driver-side, between two phases
        return out


@ray.remote(num_cpus=0)
class AnatomyTaskRunner:
    """The demo TaskRunner's interface around :class:`AnatomyTrainer`."""

    def identity(self) -> Any:
        return process_identity()

    def run(self, settings: DemoSettings, plan: ProfilePlan,
            preflight: Any = True) -> Dict[str, Any]:
        for role in ("actor", "rollout", "ref"):  # in this process only
            demo_trainer.ROLE_CLASSES[role] = PayloadWorker
        return AnatomyTrainer(settings, plan, preflight=preflight).fit()
