"""Clocks shifted on purpose: the workers' clock (:func:`verlprof.worker.wall_clock.clock_ns`,
replaced here) runs ahead of the controller's; the controller measures
each offset at registration and from every window's stop answer, the manifest keeps the
tightest with its error bound, and the trace puts the workers' events back on the controller's
clock within it."""

from __future__ import annotations

import json
import os
import time

from tests.trace_reader import decode
from tests.unit.test_controller import GROUP, Sent, controller_of, plan_of, run
from verlprof.manifest import read_manifest
from verlprof.runtime.clock_sync import ClockSync
from verlprof.trace.build import write_trace
from verlprof.worker import wall_clock

SHIFT = 7_000_000_123


def test_shifted_clocks_are_measured_and_the_trace_places_events_within_the_bound(
        tmp_path, monkeypatch):
    monkeypatch.setattr(wall_clock, "clock_ns", lambda: time.time_ns() + SHIFT)
    before = time.time_ns()
    assert wall_clock.clock_ns() - before >= SHIFT
    controller, ranks, _ = controller_of(plan_of(tmp_path, [2, 3]))
    began = time.time_ns()
    run(controller, ranks, [1, 2, 3])
    ended = time.time_ns()
    controller.finalize()
    manifest = read_manifest(str(tmp_path))  # as written: the typed fields round-trip
    assert manifest.controller is not None and manifest.controller.clock_offset_ns == 0
    bounds = {}
    for p in manifest.processes:
        assert p.clock_offset_ns is not None and p.clock_error_ns is not None
        assert abs(p.clock_offset_ns - SHIFT) <= p.clock_error_ns < 10**9
        bounds[p.rank] = p.clock_error_ns
    for entry in manifest.reports:  # each report becomes a torch trace on its worker's clock
        assert entry.window_start_ns is not None and entry.window_end_ns is not None
        assert entry.window_start_ns - SHIFT >= began - bounds[entry.rank]
        dur_us = (entry.window_end_ns - entry.window_start_ns) / 1000
        with open(os.path.join(str(tmp_path), entry.path), "w") as handle:
            json.dump({"baseTimeNanoseconds": entry.window_start_ns, "traceEvents": [
                {"ph": "X", "cat": "user_annotation", "name": f"window/{entry.steps[0]}",
                 "ts": 0, "dur": dur_us, "pid": 1, "tid": 1}]}, handle)
    result = write_trace(str(tmp_path), manifest=manifest)
    assert f"±{max(bounds.values()) / 1e6:.3g} ms" in result.line()
    trace = decode(result.path)
    placed = 0
    for process in trace.processes:
        name = trace.processes[process]
        if name.startswith("controller"):
            continue
        rank = int(name.split(" rank ")[1].split(" ")[0])
        for s in trace.slices_of_process(process):
            # on the controller's clock: inside the steps the controller ran, within the bound
            assert began - bounds[rank] <= s.start <= s.end <= ended + bounds[rank]
            placed += 1
    assert placed == len(manifest.reports) == 4


class _Rpc:
    """Two answers per fan-out: a slow first reading, then a fast one."""

    failed: dict = {}

    def __init__(self):
        self.delays = [0.05, 0.0]

    def call(self, method, targets, args, **kwargs):
        time.sleep(self.delays.pop(0))
        return {t: time.time_ns() + 1000 for t in targets}, []


def test_the_tightest_reading_is_kept():
    sync, rpc = ClockSync(), _Rpc()
    sync.measure(rpc, [("g", 0)])
    slow = sync.fields(("g", 0))
    sync.measure(rpc, [("g", 0)])
    fast = sync.fields(("g", 0))
    assert slow["clock_error_ns"] >= 20_000_000 > fast["clock_error_ns"]
    assert abs(fast["clock_offset_ns"] - 1000) <= fast["clock_error_ns"]
    assert sync.fields(("g", 1)) == {"clock_offset_ns": None, "clock_error_ns": None}


class _Counted(Sent):
    """Every method sent, the clock's own calls too."""

    def __init__(self) -> None:
        super().__init__()
        self.methods: list = []

    def call(self, method, targets, args, **kwargs):
        self.methods.append(method)
        return super().call(method, targets, args, **kwargs)


def test_each_window_s_stop_answer_is_a_reading_at_no_call_of_its_own(tmp_path):
    """After registration, the clock is never asked on its own: a profiled step is a start
    and a stop fan-out (benchmarks/p2_fanout.py), and the stop's answer carries the clock."""
    rpc = _Counted()
    controller, ranks, _ = controller_of(plan_of(tmp_path, [2]), rpc=rpc)
    assert rpc.methods == ["verlprof_configure", "verlprof_clock"]
    controller.context.clocks.readings.clear()  # what follows comes from the windows alone
    run(controller, ranks, [1, 2, 3])
    assert rpc.methods[2:] == ["verlprof_start", "verlprof_stop"]
    for rank in (0, 1):
        fields = controller.context.clocks.fields((GROUP, rank))
        assert abs(fields["clock_offset_ns"]) <= fields["clock_error_ns"] < 10**9
