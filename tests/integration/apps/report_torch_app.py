"""Real torch.profiler traces for the report tests, shaped like verlprof's torch backend.

Writes, under ``OUT``: rank 0 with one window per step (steps 1 and 2), rank 1 with one
continuous window over steps 1-2 (one ``ProfilerStep#1`` marker around both, as the backend
does), each phase a ``record_function("<role>/<phase>")``; rank 1's ``actor/update_actor``
in step 2 is the planted straggler. Prints a JSON list of the windows written.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile, record_function

# long enough that a loaded 2-core machine's sleep jitter never looks like a straggler
PHASES = (("actor/compute_log_prob", 0.150), ("actor/update_actor", 0.150))
STRAGGLE_S = 0.600


def run_step(rank: int, step: int) -> None:
    for name, seconds in PHASES:
        if rank == 1 and step == 2 and name == "actor/update_actor":
            seconds = STRAGGLE_S
        with record_function(name):
            torch.ones(64, 64) @ torch.ones(64, 64)
            time.sleep(seconds)


def window(out: str, rank: int, steps: tuple) -> dict:
    name = f"actor_rollout_ref_step{'-'.join(map(str, steps))}_rank{rank}.pt.trace.json.gz"
    path = os.path.join(out, name)
    start = time.time_ns()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        prof.add_metadata_json("distributedInfo", json.dumps({"rank": rank, "world_size": 2}))
        with record_function(f"ProfilerStep#{steps[0]}"):
            for step in steps:
                run_step(rank, step)
    end = time.time_ns()
    prof.export_chrome_trace(path)
    return {"rank": rank, "steps": list(steps), "file": name, "start_ns": start,
            "end_ns": end, "pid": os.getpid(), "bytes": os.path.getsize(path)}


def main() -> None:
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for _ in range(3):  # warm up: the first matmul of a process is slow, not a straggler
        torch.ones(64, 64) @ torch.ones(64, 64)
    written = [window(out, 0, (1,)), window(out, 0, (2,)), window(out, 1, (1, 2))]
    print(json.dumps(written))


if __name__ == "__main__":
    main()
