"""Events of one torch profiler trace (``*.pt.trace.json(.gz)``, Chrome's JSON as kineto
writes it), loaded by the report's own reader code (:func:`load_trace`, :func:`base_ns`).

CPU events (``record_function`` ranges, ``ProfilerStep#<n>``, aten ops, CUDA runtime calls) go
on their thread's track; GPU events (kernels, memcpys, memsets) on one track per device and
stream, with an arrow from the runtime call that launched each (kineto's ``correlation``
argument). A trace is one JSON document: it is loaded whole, as ``verlprof report`` loads it,
so memory follows the largest single trace, not the run.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Set

from verlprof.backends.torch.read import base_ns, load_trace
from verlprof.trace.tracks import ProcessTracks

GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"})
LAUNCH_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver"})


def torch_events(path: str, tracks: ProcessTracks,
                 fallback_start_ns: Optional[int] = None) -> int:
    """Write the trace's complete events (``ph: X``) to ``tracks``; returns how many were
    read. Raises whatever the trace's loading raises (the caller marks it unreadable)."""
    data = load_trace(path)
    events: List[Dict[str, Any]] = [e for e in data["traceEvents"] if isinstance(e, dict)
                                    and e.get("ph") == "X"
                                    and isinstance(e.get("ts"), (int, float))]
    base = base_ns(data, events, fallback_start_ns)
    kernels = tracks.filters.kernels
    if not kernels:
        events = [e for e in events if e.get("cat") not in GPU_CATEGORIES | LAUNCH_CATEGORIES]
    events.sort(key=lambda e: (float(e["ts"]), -float(e.get("dur") or 0)))  # parents first
    launched: Set[Any] = {_correlation(e) for e in events if e.get("cat") in GPU_CATEGORIES}
    launched.discard(None)
    flows = tracks.ids.flow_base()
    for event in events:
        start = base + int(round(float(event["ts"]) * 1000.0))
        end = start + int(round(float(event.get("dur") or 0) * 1000.0))
        cat = str(event.get("cat") or "")
        name = str(event.get("name", ""))
        corr = _correlation(event)
        flow = flows + corr if isinstance(corr, int) and corr in launched and corr >= 0 \
            else None
        if cat in GPU_CATEGORIES:
            args = event.get("args") or {}
            track = tracks.stream(args.get("device", event.get("pid")),
                                  args.get("stream", event.get("tid")))
            tracks.range(track, name, start, end, category=cat, flow_in=flow)
        else:
            track = tracks.thread(_tid(event.get("tid")))
            tracks.range(track, name, start, end, category=cat,
                         flow_out=flow if cat in LAUNCH_CATEGORIES else None,
                         keep_short=name.startswith("ProfilerStep#"))
    return len(events)


def _correlation(event: Dict[str, Any]) -> Any:
    args = event.get("args")
    return args.get("correlation") if isinstance(args, dict) else None


def _tid(tid: Any) -> int:
    try:
        return int(tid)
    except (TypeError, ValueError):
        return 0
