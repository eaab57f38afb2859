"""Run by :mod:`benchmarks.on_demand`: the demo's ``actor_rollout_ref`` phase work, one rank,
no Ray, timed per step. ``argv``: steps, then optionally a pickled
:class:`~verlprof.plan_model.ProcessPlan` (an armed rank's: installed as the controller
would, so each phase is an NVTX range like in a real armed rank; without it the rank is
unprofiled, as in a run with nothing armed). Prints ``step <wall ns> <CPU ns>`` per step: the
CPU time is the whole process's (every thread, nsys' injected ones included) from the end of
the previous step to the end of this one."""

from __future__ import annotations

import pickle
import sys
import time

import torch

from verlprof.demo import workers

STEPS = int(sys.argv[1])
BATCH = 8

worker = workers.ActorRolloutRefWorker(0)
if len(sys.argv) > 2:
    with open(sys.argv[2], "rb") as handle:
        worker.verlprof_configure(pickle.load(handle))
cpu = time.process_time_ns()
for step in range(1, STEPS + 1):
    prompts = torch.randint(0, workers.VOCAB, (BATCH, 4),
                            generator=torch.Generator().manual_seed(step))
    t0 = time.perf_counter_ns()
    seqs = worker.generate_sequences(prompts)
    old = worker.compute_log_prob(seqs)
    worker.compute_ref_log_prob(seqs)
    worker.update_actor(seqs, old, torch.randn(BATCH))
    wall, cpu_before, cpu = time.perf_counter_ns() - t0, cpu, time.process_time_ns()
    print(f"step {wall} {cpu - cpu_before}", flush=True)
if worker._verlprof_session is not None:
    worker._verlprof_session.finalize(timeout_s=5)
