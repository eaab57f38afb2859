"""Time bounds inside a window (trainer.profiler.window_delay_s / window_duration_s): the
keys, nsys' own delay/duration read as them, the plan and its rendering, and the worker side
(worker/timed.py) with a recording capture and with the real torch profiler. The real nsys run
is tests/faults/test_time_windows.py."""

from __future__ import annotations

import gzip
import json
import threading
import time
from contextlib import nullcontext
from pathlib import Path

import pytest
from rich.console import Console

from verlprof.backends.base import Capture, never_opened_reports, worker_report
from verlprof.config import load_config
from verlprof.config.schema import ComponentConfig, ComponentsConfig, ProfilingConfig
from verlprof.config.topology import Topology
from verlprof.errors import ConfigError
from verlprof.plan import build_plan
from verlprof.plan.render import render_plan
from verlprof.plan_model import WindowTime
from verlprof.worker import ProfilingWorkerMixin, annotate
from verlprof.worker.timed import TimedCapture

SHIPPED = str(Path(__file__).resolve().parents[2] / "trainer_configs" / "ppo_trainer.yaml")
TOPO = Topology.of({"actor_rollout_ref": 1}, cuda=False)


def _load(*overrides):
    return load_config(SHIPPED, list(overrides))


def test_nsys_delay_and_duration_are_read_as_the_window_keys_and_leave_the_argv():
    loaded = _load("+trainer.worker_nsight_options.delay=2", "+trainer.worker_nsight_options.d=5")
    prof = loaded.profiling
    assert (prof.window_delay_s, prof.window_duration_s) == (2.0, 5.0)
    assert not {"delay", "d", "duration", "y"} & set(prof.nsys.worker_options)
    plan = build_plan(prof, loaded.topology)
    argv = " ".join(a for p in plan.processes for a in p.launch_argv)
    assert "--delay" not in argv and "--duration" not in argv and " -d " not in argv
    notes = [w for w in loaded.warnings if "is applied per window as" in w]
    assert len(notes) == 2 and "trainer.profiler.window_duration_s" in notes[1]


def test_both_spellings_with_different_values_name_both_keys():
    with pytest.raises(ConfigError) as info:
        _load("trainer.profiler.window_duration_s=3", "+trainer.worker_nsight_options.duration=5")
    assert str(info.value) == ("trainer.worker_nsight_options.duration: is 5 but "
                               "trainer.profiler.window_duration_s is 3.0; set only "
                               "trainer.profiler.window_duration_s")


def test_the_controllers_nsys_delay_is_refused_in_one_line():
    with pytest.raises(ConfigError) as info:
        _load("+trainer.controller_nsight_options.delay=3")
    assert str(info.value).startswith("trainer.controller_nsight_options.delay: nsys' delay "
                                      "counts from process start")


@pytest.mark.parametrize("override,message", [
    ("trainer.profiler.window_delay_s=-1", "must be a number of seconds, 0 or more, got -1"),
    ("trainer.profiler.window_duration_s=0", "must be a positive number of seconds, got 0"),
    ("trainer.profiler.window_duration_s=soon", "must be a positive number of seconds"),
])
def test_bad_bounds_are_one_line_naming_the_key(override, message):
    with pytest.raises(ConfigError) as info:
        _load(override)
    key = override.split("=")[0]
    assert str(info.value).startswith(f"{key}: {message}") and "\n" not in str(info.value)


def test_the_plan_carries_the_bounds_to_every_process_and_shows_them():
    loaded = _load("trainer.profiler.window_delay_s=30", "trainer.profiler.window_duration_s=60")
    plan = build_plan(loaded.profiling, loaded.topology)
    assert plan.window_time == WindowTime(delay_s=30.0, duration_s=60.0)
    assert plan.processes and all(p.window_time == plan.window_time for p in plan.processes)
    console = Console(width=200, record=True)
    render_plan(plan, console)
    assert ("time bounds: each window opens 30 s into its step, closes 60 s later or at the "
            "step's end, whichever comes first") in console.export_text()


def test_rocprof_sys_refuses_time_bounds():
    with pytest.raises(ConfigError) as info:
        loaded = _load("trainer.profiler.tool=rocprof_sys", "trainer.profiler.window_delay_s=1")
        build_plan(loaded.profiling, loaded.topology)
    assert str(info.value).startswith("trainer.profiler.window_delay_s: rocprof_sys cannot")


class Recording(Capture):
    """Records open/close with the thread that ran them; any thread may drive it (like nsys)."""

    def __init__(self, plan):
        super().__init__(plan)
        self.calls = []
        self.closed = threading.Event()

    def open(self, window):
        self.calls.append(("open", threading.current_thread().name))

    def close(self, window):
        self.calls.append(("close", threading.current_thread().name))
        self.closed.set()

    def phase(self, label):
        return nullcontext()

    def collect(self, opened, never_opened, timeout_s):
        return [worker_report(o.window, raw_path=None, status="ok", start_ns=o.start_ns,
                              end_ns=o.end_ns) for o in opened] + \
            never_opened_reports(never_opened)


def _process(tmp_path, steps=(1, 2)):
    cfg = ProfilingConfig(steps=steps, tool="torch", output_dir=str(tmp_path),
                          components=ComponentsConfig(actor=ComponentConfig((0,), False)))
    return build_plan(cfg, TOPO).process("actor_rollout_ref", 0)


def test_a_window_opens_after_the_delay_and_closes_after_the_duration(tmp_path):
    process = _process(tmp_path, steps=(1,))
    inner = Recording(process)
    timed = TimedCapture(inner, WindowTime(delay_s=0.05, duration_s=0.05))
    window = process.windows[0]
    began = time.time_ns()
    timed.open(window)
    assert inner.calls == []  # not yet: the delay runs
    assert inner.closed.wait(10.0)  # the duration ended it, not the step
    timed.close(window)
    ended = time.time_ns()
    assert [c[0] for c in inner.calls] == ["open", "close"]
    assert all(thread != threading.current_thread().name for _, thread in inner.calls)
    (report,) = timed.collect([_opened(window, began)], [], 1.0)
    assert report.status == "ok"
    assert began + 50_000_000 <= report.window_start_ns < report.window_end_ns <= ended
    assert report.window_end_ns - report.window_start_ns >= 50_000_000


def test_a_step_that_ends_before_the_delay_captures_nothing_and_says_why(tmp_path):
    process = _process(tmp_path, steps=(1,))
    inner = Recording(process)
    timed = TimedCapture(inner, WindowTime(delay_s=30.0))
    window = process.windows[0]
    timed.open(window)
    timed.close(window)
    timed.flush([])
    (report,) = timed.collect([_opened(window, time.time_ns())], [], 1.0)
    assert inner.calls == [] and report.status == "missing"
    assert "before trainer.profiler.window_delay_s=30: nothing captured" in report.reason


def _opened(window, start_ns):
    from verlprof.backends.base import OpenedWindow

    return OpenedWindow(window, start_ns)


class Worker(ProfilingWorkerMixin):
    @annotate("actor")
    def compute_log_prob(self, seconds):
        time.sleep(seconds)

    @annotate("actor")
    def update_actor(self, seconds):
        time.sleep(seconds)


def test_torch_windows_close_at_the_first_phase_boundary_after_the_duration(tmp_path):
    """The torch profiler stops only on its own thread: the bound takes effect when the
    phase that outlasted it ends, so the next phase is not captured (real torch profiler)."""
    cfg = ProfilingConfig(steps=(1,), tool="torch", output_dir=str(tmp_path),
                          window_duration_s=0.05,
                          components=ComponentsConfig(actor=ComponentConfig((0,), False)))
    plan = build_plan(cfg, TOPO)
    worker = Worker()
    worker.verlprof_configure(plan.process("actor_rollout_ref", 0))
    worker.verlprof_start((1,))
    worker.compute_log_prob(0.1)  # outlasts the 0.05 s bound: the window closes at its end
    worker.update_actor(0.0)
    worker.verlprof_stop((1,))
    (report,) = worker.verlprof_finalize(30.0)
    assert report.status == "ok", report.reason
    with gzip.open(report.raw_path, "rt") as handle:
        names = {e.get("name") for e in json.load(handle)["traceEvents"]}
    assert "actor/compute_log_prob" in names and "actor/update_actor" not in names
