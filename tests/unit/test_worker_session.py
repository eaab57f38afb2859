"""The worker session executes its plan: windows, idempotence, discrete phases (real torch
profiler, in-process, no Ray)."""

import gzip
import json
import os

import pytest

from verlprof.config.schema import ComponentConfig, ComponentsConfig, ProfilingConfig
from verlprof.config.topology import Topology
from verlprof.plan import build_plan
from verlprof.worker import ProfilingWorkerMixin, annotate

TOPO = Topology.of({"actor_rollout_ref": 1, "critic": 1}, cuda=False)


class Worker(ProfilingWorkerMixin):
    def __init__(self):
        self.calls = []

    @annotate("actor")
    def update_actor(self, x):
        self.calls.append(("update_actor", x))
        return x * 2

    @annotate("rollout")
    def generate_sequences(self, x):
        self.calls.append(("generate_sequences", x))
        return x + 1

    @annotate("actor", phase="custom_phase")
    def helper(self):
        return "h"


def make(tmp_path, steps=(1, 2), discrete=False, continuous=False):
    cfg = ProfilingConfig(steps=steps, continuous_steps=continuous, tool="torch",
                          output_dir=str(tmp_path),
                          components=ComponentsConfig(actor=ComponentConfig((0,), False,
                                                                            discrete)))
    plan = build_plan(cfg, TOPO)
    worker = Worker()
    worker.verlprof_configure(plan.process("actor_rollout_ref", 0))
    return plan, worker


def trace_names(path):
    with gzip.open(path, "rt") as handle:
        data = json.load(handle)
    return data, {e.get("name") for e in data["traceEvents"]}


def test_unconfigured_worker_runs_methods_unchanged():
    worker = Worker()
    assert worker.update_actor(3) == 6
    assert worker.verlprof_start((1,)) == "not-configured"
    assert worker.verlprof_finalize() == []
    assert worker.update_actor.__verlprof_phase__ == ("actor", "update_actor")
    assert worker.helper.__verlprof_phase__ == ("actor", "custom_phase")


def test_whole_step_windows_with_idempotent_start_stop(tmp_path):
    plan, worker = make(tmp_path)
    assert worker.verlprof_stop((1,)) == "not-started"
    assert worker.verlprof_start((1,)) == "started"
    assert worker.verlprof_start((1,)) == "already-started"
    worker.generate_sequences(1)
    worker.update_actor(2)
    assert worker.verlprof_stop((1,)) == "stopped"
    assert worker.verlprof_stop((1,)) == "not-started"
    worker.update_actor(5)  # outside any window: not recorded
    assert worker.verlprof_start((1,)) == "not-planned"  # a window opens at most once
    entries = worker.verlprof_finalize(timeout_s=5)
    assert [(e.report.steps, e.status) for e in entries] == [((1,), "ok"), ((2,), "missing")]
    assert entries[1].reason.startswith("window never opened")
    data, names = trace_names(entries[0].raw_path)
    assert {"rollout/generate_sequences", "actor/update_actor", "ProfilerStep#1"} <= names
    assert data["distributedInfo"]["rank"] == 0
    assert worker.calls == [("generate_sequences", 1), ("update_actor", 2), ("update_actor", 5)]


def test_start_without_steps_opens_the_planned_window_after_the_last_started(tmp_path):
    """What the controller sends when its mirror of the worker says so (no RPC argument)."""
    plan, worker = make(tmp_path, steps=(1, 2, 5))
    assert worker.verlprof_status().next == (1,)
    assert worker.verlprof_start() == "started"
    assert worker.verlprof_status().armed == (1,) and worker.verlprof_status().next == (2,)
    assert worker.verlprof_stop() == "stopped"
    assert worker.verlprof_start((5,)) == "started"  # a jump (resume) moves past the skipped
    assert worker.verlprof_status().next is None
    assert worker.verlprof_stop() == "stopped"
    assert worker.verlprof_start() == "not-planned"  # none left after the last
    assert worker.verlprof_start((2,)) == "started"  # the skipped one is still there
    assert worker.verlprof_status().next == (5,)
    assert worker.verlprof_start() == "not-planned"  # 5 was captured: never twice
    assert worker.verlprof_status().armed is None  # starting another stopped 2 first
    entries = worker.verlprof_finalize(timeout_s=5)
    assert [(e.report.steps, e.status) for e in entries] == [((1,), "ok"), ((5,), "ok"),
                                                            ((2,), "ok")]  # opening order


def test_discrete_mode_opens_a_window_per_planned_phase_only(tmp_path):
    plan, worker = make(tmp_path, steps=(1,), discrete=True)
    worker.update_actor(1)  # not armed: no window
    worker.verlprof_start((1,))
    worker.generate_sequences(1)  # rollout is not selected: no window
    worker.update_actor(1)
    worker.update_actor(1)  # second call in the step: the planned window is used up
    worker.verlprof_stop((1,))
    entries = worker.verlprof_finalize(timeout_s=5)
    by_phase = {e.report.phase: e for e in entries}
    assert by_phase["update_actor"].status == "ok"
    assert by_phase["compute_log_prob"].status == "missing"
    assert "compute_log_prob was not called in step 1" in by_phase["compute_log_prob"].reason
    _, names = trace_names(by_phase["update_actor"].raw_path)
    assert "actor/update_actor" in names and "rollout/generate_sequences" not in names


def test_exception_in_phase_closes_the_discrete_window(tmp_path):
    plan, worker = make(tmp_path, steps=(1,), discrete=True)

    class Boom(Worker):
        @annotate("actor")
        def update_actor(self, x):
            raise RuntimeError("boom")

    boom = Boom()
    boom.verlprof_configure(plan.process("actor_rollout_ref", 0))
    boom.verlprof_start((1,))
    with pytest.raises(RuntimeError):
        boom.update_actor(1)
    assert boom.verlprof_status().open_window is None
    entries = boom.verlprof_finalize(timeout_s=5)
    assert any(e.report.phase == "update_actor" and e.status == "ok" for e in entries)


def test_finalize_stops_an_open_window(tmp_path):
    plan, worker = make(tmp_path, steps=(1,))
    worker.verlprof_start((1,))
    worker.update_actor(1)
    entries = worker.verlprof_finalize(timeout_s=5)
    assert entries[0].status == "ok" and os.path.isfile(entries[0].raw_path)
    assert entries[0].window_end_ns >= entries[0].window_start_ns


def test_read_chunk_refuses_paths_outside_its_raw_dir(tmp_path):
    plan, worker = make(tmp_path, steps=(1,))
    with pytest.raises(PermissionError):
        worker.verlprof_read_chunk("/etc/passwd", 0, 10)
    assert worker.verlprof_discard(str(tmp_path / "nothing")) is False
