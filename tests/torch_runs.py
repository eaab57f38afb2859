"""A small run of real-format torch traces, for the tests of a second ``verlprof report``."""

from __future__ import annotations

import gzip
import json
import os
from typing import List

from verlprof.manifest import Manifest, ReportEntry, write_manifest

T0 = 1_700_000_000_000_000_000
"""The traces' ``baseTimeNanoseconds``."""


def write_torch_trace(path, ms: float) -> None:
    """One rank's trace: ``actor/update_actor`` of ``ms``, then a 50 ms generate."""
    events = [{"ph": "X", "cat": "user_annotation", "name": n, "pid": 1, "tid": 1, "ts": s,
               "dur": d} for n, s, d in (("actor/update_actor", 0.0, ms * 1000),
                                         ("rollout/generate_sequences", 2_000_000.0, 50_000.0))]
    with gzip.open(path, "wt") as handle:
        json.dump({"baseTimeNanoseconds": T0, "traceEvents": events}, handle)


def write_torch_run(root, slow_ms: float = 900.0) -> List[str]:
    """Three torch traces of one step and their manifest under ``root`` (a ``Path``); rank 2
    is slow. Returns the report paths."""
    entries = []
    for rank, ms in ((0, 100.0), (1, 100.0), (2, slow_ms)):
        rel = f"step0001/actor_rollout_ref/rank{rank}/r{rank}.pt.trace.json.gz"
        os.makedirs(root / os.path.dirname(rel), exist_ok=True)
        write_torch_trace(root / rel, ms)
        entries.append(ReportEntry(steps=(1,), group="actor_rollout_ref", rank=rank,
                                   component="actor_rollout_ref", backend="torch", path=rel,
                                   status="ok"))
    write_manifest(Manifest(tool="torch", output_dir=str(root), step_windows=((1,),),
                            reports=tuple(entries)), str(root))
    return [str(root / e.path) for e in entries]
