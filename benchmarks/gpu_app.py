"""Run by :mod:`benchmarks.gpu` in a process of its own: a small CUDA training loop (an MLP,
AdamW), one rank, no Ray, timed per step (``torch.cuda.synchronize`` at each step's end).

argv: ``calibrate`` prints how many micro-batches a step needs to last at least
:data:`MIN_STEP_S`; ``run STEPS MICRO PLAN OUT`` runs ``STEPS`` steps of ``MICRO``
micro-batches each. ``PLAN``: ``-`` (plain, no verlprof) or a pickled
:class:`~verlprof.plan.ProfilePlan`, which an in-process controller
(:class:`~verlprof.runtime.local_rpc.InProcessRanks`) executes on this rank as a trainer's
would: each planned window opened and closed at its steps' boundaries (nsys: launched under
the plan's argv by the parent, windows by cudaProfilerApi; torch: the torch profiler with
CUDA activity in this process), ``manifest.json`` written at the end. ``OUT``: a JSON file
with the step times. ``VERLPROF_BENCH_GPU_DEVICE=cpu`` runs the same loop on the CPU (a test
of the plumbing, no figure).
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import time

import torch
from torch import nn

from verlprof.worker import ProfilingWorkerMixin, annotate

DEVICE_ENV = "VERLPROF_BENCH_GPU_DEVICE"
GROUP = "actor_rollout_ref"
MIN_STEP_S = 0.1
WIDTH, DEPTH, BATCH = 2048, 8, 512


class CudaTrainer(ProfilingWorkerMixin):
    """One rank of a small training loop; ``update_actor`` is the step's annotated phase."""

    def __init__(self, micro: int):
        self.device = torch.device(os.environ.get(DEVICE_ENV) or "cuda")
        torch.manual_seed(0)
        layers = []
        for _ in range(DEPTH):
            layers += [nn.Linear(WIDTH, WIDTH), nn.GELU()]
        self.model = nn.Sequential(*layers).to(self.device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        self.data = torch.randn(BATCH, WIDTH, device=self.device)
        self.micro = micro

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    @annotate("actor", "update_actor")
    def update_actor(self) -> float:
        self.optimizer.zero_grad(set_to_none=True)
        for _ in range(self.micro):
            loss = self.model(self.data).square().mean()
            loss.backward()
        self.optimizer.step()
        self.sync()  # the step ends when the GPU is done, inside the phase
        return float(loss.detach())

    def timed_step(self) -> float:
        began = time.perf_counter()
        self.update_actor()
        return time.perf_counter() - began


def calibrate() -> int:
    micro = 1
    trainer = CudaTrainer(micro)
    for _ in range(3):
        trainer.timed_step()
    while True:
        trainer.micro = micro
        took = min(trainer.timed_step() for _ in range(3))
        if took >= MIN_STEP_S or micro >= 4096:
            return micro
        micro = max(micro * 2, int(micro * MIN_STEP_S / max(took, 1e-6)) + 1)


def run(steps: int, micro: int, plan_path: str, out: str) -> None:
    trainer = CudaTrainer(micro)
    times = {}
    controller = None
    if plan_path != "-":
        from verlprof.runtime.controller import ProfileController
        from verlprof.runtime.local_rpc import InProcessRanks

        with open(plan_path, "rb") as handle:
            plan = pickle.load(handle)
        controller = ProfileController(plan, rpc=InProcessRanks(), echo=False, preflight=False,
                                       handle_signals=False)
        controller.register_group(GROUP, [trainer])
    for step in range(1, steps + 1):
        if controller is None:
            times[step] = trainer.timed_step()
            continue
        with controller.step(step):
            times[step] = trainer.timed_step()
    if controller is not None:
        controller.finalize(timeout_s=300)
    with open(out, "w") as handle:
        json.dump({"times": times}, handle)


if __name__ == "__main__":
    if sys.argv[1] == "calibrate":
        print(calibrate(), flush=True)
    else:
        run(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
