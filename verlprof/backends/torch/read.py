"""Read a torch.profiler Chrome trace (``*.pt.trace.json.gz``) into a :class:`ReportData`.

Phase ranges are ``record_function("<role>/<phase>")`` events (``ph: "X"``, category
``user_annotation``), step marks are ``ProfilerStep#<n>``. Chrome-trace times are µs; torch
2.x writes them relative to a top-level ``baseTimeNanoseconds`` (wall clock, ns since the
epoch), so ``absolute_ns = baseTimeNanoseconds + ts * 1000``. Older traces without it used
epoch µs directly. GPU kernels (category ``kernel``) and memcpys (``gpu_memcpy``) are
attributed to the phase whose CPU range launched them (via the ``correlation`` argument of the
``cuda_runtime`` launch event).
"""

from __future__ import annotations

import gzip
import json
import re
import time
from typing import Any, Dict, List, Optional, Tuple

from verlprof.backends.reading import RawRange, ReportData, StepMark, attribute

_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_CPU_CATEGORIES = ("user_annotation", "cpu_op", None)
_QUOTED_NAME = re.compile(r'^(\s*"name": )"(.*)"(,?)$', re.M)
"""A ``"name"`` line as torch's Chrome-trace writer (kineto) prints it, one key per line. It
writes the name between quotes without escaping a ``"`` in it (a ``record_function`` label
with a quote made the whole trace invalid JSON); it turns ``\\`` into ``/`` and drops line
breaks, so the line's text is the name itself and can be quoted again."""
_EPOCH_US = 1e15
"""Timestamps above this (2001-09 in µs) are epoch µs already (traces without a base time)."""


def read_torch_trace(path: str, index: int = 0,
                     fallback_start_ns: Optional[int] = None) -> ReportData:
    """Read one trace; every failure becomes ``ReportData(error=...)``, never an exception."""
    began = time.monotonic()
    try:
        data = load_trace(path)
        ranges, marks, window = _parse(data, fallback_start_ns)
    except Exception as err:  # noqa: BLE001 - any failure makes the report unreadable
        return ReportData(index=index, error=_one_line(err), seconds=time.monotonic() - began)
    return ReportData(index=index, ranges=tuple(ranges), marks=tuple(marks), window=window,
                      seconds=time.monotonic() - began)


def load_trace(path: str) -> Dict[str, Any]:
    """The trace's JSON object (``traceEvents`` a list), a kineto name with a bad quote
    repaired; raises on anything else (``verlprof trace`` reads every event)."""
    opener = gzip.open if path.endswith(".gz") else open
    # errors="replace": a range name that is not UTF-8 must not make the whole trace unreadable
    with opener(path, "rt", encoding="utf-8", errors="replace") as handle:
        text = handle.read()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        repaired = _QUOTED_NAME.sub(_requote, text)
        if repaired == text:
            raise
        data = json.loads(repaired)
    if isinstance(data, list):  # bare event array, also valid Chrome trace JSON
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise ValueError("not a Chrome trace (no traceEvents list)")
    return data


def _requote(match: re.Match[str]) -> str:
    """The name line quoted again, unless it is valid JSON already (escapes kept as they are)."""
    try:
        json.loads(f'"{match.group(2)}"')
        return match.group(0)
    except json.JSONDecodeError:
        return f"{match.group(1)}{json.dumps(match.group(2), ensure_ascii=False)}{match.group(3)}"


def _parse(data: Dict[str, Any], fallback_start_ns: Optional[int]
           ) -> Tuple[List[RawRange], List[StepMark], Optional[Tuple[int, int]]]:
    events = [e for e in data["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"
              and isinstance(e.get("ts"), (int, float))]
    base = base_ns(data, events, fallback_start_ns)

    def ns(us: float) -> int:
        return base + int(round(float(us) * 1000.0))

    phases: List[Tuple[str, int, int]] = []
    marks: List[StepMark] = []
    launches: Dict[Any, int] = {}
    kernels: List[Tuple[Any, int, int]] = []
    copies: List[Tuple[Any, int, int]] = []
    gpu_seen = False
    lo: Optional[int] = None
    hi: Optional[int] = None
    for event in events:
        start = ns(event["ts"])
        end = start + int(round(float(event.get("dur", 0)) * 1000.0))
        lo = start if lo is None else min(lo, start)
        hi = end if hi is None else max(hi, end)
        name = str(event.get("name", ""))
        cat = event.get("cat")
        args = event.get("args") or {}
        if cat == "kernel":
            gpu_seen = True
            kernels.append((args.get("correlation"), start, end - start))
        elif cat == "gpu_memcpy":
            gpu_seen = True
            copies.append((args.get("correlation"), start, end - start))
        elif cat == "cuda_runtime":
            if "correlation" in args:
                launches[args["correlation"]] = start
        elif cat in _CPU_CATEGORIES:
            step = _STEP.match(name)
            if step:
                marks.append(StepMark(int(step.group(1)), start, end))
            elif "/" in name and cat != "cpu_op":
                phases.append((name, start, end))

    def refs(items: List[Tuple[Any, int, int]]) -> Optional[List[Tuple[int, int]]]:
        if not gpu_seen:
            return None
        return [(launches.get(corr, start), dur) for corr, start, dur in items]

    spans = [(s, e) for _, s, e in phases]
    kern = attribute(spans, refs(kernels))
    mem = attribute(spans, refs(copies))
    ranges = [RawRange(name, s, e, kernel_ns=k[0], kernel_count=k[1], memcpy_ns=m[0])
              for (name, s, e), k, m in zip(phases, kern, mem)]
    window = (lo, hi) if lo is not None and hi is not None else None
    return ranges, marks, window


def base_ns(data: Dict[str, Any], events: List[Dict[str, Any]],
            fallback_start_ns: Optional[int]) -> int:
    """Wall clock (ns since the epoch) of the trace's time 0 (see the module's doc)."""
    base = data.get("baseTimeNanoseconds")
    if isinstance(base, (int, float)) and base > 0:
        return int(base)
    if not events:
        return 0
    first = min(float(e["ts"]) for e in events)
    if first >= _EPOCH_US:
        return 0
    if fallback_start_ns is not None:  # align the trace's first event with the window start
        return int(fallback_start_ns) - int(round(first * 1000.0))
    return 0


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    detail = text[0] if text else ""
    return f"{type(err).__name__}: {detail}" if detail else type(err).__name__
