"""The worker session executes its plan: windows, idempotence, discrete phases (real torch
profiler, in-process, no Ray)."""

import gzip
import json
import os
from contextlib import nullcontext
from typing import get_args

import pytest

from verlprof.backends.base import Capture, never_opened_reports, worker_report
from verlprof.config.schema import ComponentConfig, ComponentsConfig, ProfilingConfig
from verlprof.config.topology import Topology
from verlprof.plan import build_plan
from verlprof.worker import ProfileSession, ProfilingWorkerMixin, annotate
from verlprof.worker.session import (
    ARMED,
    FINALIZED,
    IDLE,
    OPEN,
    TRANSITIONS,
    SessionEvent,
    SessionState,
)

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


def test_whole_step_windows_with_idempotent_start_stop(tmp_path):
    plan, worker = make(tmp_path)
    assert worker.verlprof_stop((1,)).outcome == "not-started"
    assert worker.verlprof_start((1,)) == "started"
    assert worker.verlprof_start((1,)) == "already-started"
    worker.generate_sequences(1)
    worker.update_actor(2)
    assert worker.verlprof_stop((1,)).outcome == "stopped"
    assert worker.verlprof_stop((1,)).outcome == "not-started"
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
    assert worker.verlprof_stop().outcome == "stopped"
    assert worker.verlprof_start((5,)) == "started"  # a jump (resume) moves past the skipped
    assert worker.verlprof_status().next is None
    assert worker.verlprof_stop().outcome == "stopped"
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


# -- the transition table, one test per row -------------------------------------------------


class LogCapture(Capture):
    """Notes what the session asks of its capture; ``fail_close`` makes the next close fail."""

    def __init__(self, plan):
        super().__init__(plan)
        self.log = []
        self.fail_close = False

    def open(self, window):
        self.log.append(("open", window.steps, window.phase))

    def close(self, window):
        self.log.append(("close", window.steps, window.phase))
        if self.fail_close:
            self.fail_close = False
            raise OSError("disk full")

    def phase(self, label):
        self.log.append(("phase", label))
        return nullcontext()

    def flush(self, never_opened):
        self.log.append(("flush", len(never_opened)))

    def collect(self, opened, never_opened, timeout_s):
        self.log.append(("collect",))
        return [worker_report(o.window, raw_path=None, status="ok") for o in opened] + \
            never_opened_reports(never_opened)


def session_of(tmp_path, mode):
    plan, _ = make(tmp_path, steps=(1, 2), discrete=mode == "discrete")
    session = ProfileSession(plan.process("actor_rollout_ref", 0), Worker())
    session.capture = LogCapture(session.plan)
    return session


def fire(session, state, event):
    """Bring ``session`` to ``state``, then apply ``event``: (its reply, what the capture was
    asked meanwhile, the state after). A discrete window is open only during a phase call."""

    def apply():
        assert session.state == state
        session.capture.log.clear()
        reply = event(session)
        return reply, list(session.capture.log), session.state

    if state == OPEN and session.plan.mode == "discrete":
        session.start((1,))
        out = []
        session.run_phase("actor", "update_actor", lambda owner: out.append(apply()),
                          session.owner, (), {})
        return out[0]
    if state in (ARMED, OPEN):
        session.start((1,))
    if state == ARMED and session.plan.mode == "whole":  # only after its window failed to close
        session.capture.fail_close = True
        with pytest.raises(OSError):
            session.stop()
    if state == FINALIZED:
        session.finalize(0)
    return apply()


def phase_event(session, role="actor", phase="update_actor"):
    return session.run_phase(role, phase, lambda owner, x: ("ran", x), session.owner, (7,), {})


MODES = ("whole", "discrete")


@pytest.mark.parametrize("mode", MODES)
def test_each_mode_has_one_row_per_state_and_event(mode):
    assert set(TRANSITIONS[mode]) == {(s, e) for s in get_args(SessionState)
                                      for e in get_args(SessionEvent)}


def test_whole_idle_start_opens_the_window(tmp_path):
    session = session_of(tmp_path, "whole")
    assert fire(session, IDLE, lambda s: s.start()) == ("started", [("open", (1,), None)], OPEN)
    assert session.armed == (1,) and session.owner._verlprof_active
    other = session_of(tmp_path, "whole")
    assert fire(other, IDLE, lambda s: s.start((7,))) == ("not-planned", [], IDLE)
    assert other.ignored == ["start of steps [7] ignored: not planned or already captured"]
    assert not other.owner._verlprof_active


def test_discrete_idle_start_arms_the_step(tmp_path):
    session = session_of(tmp_path, "discrete")
    assert fire(session, IDLE, lambda s: s.start((2,))) == ("started", [], ARMED)
    assert session.armed == (2,) and session.owner._verlprof_active


def test_whole_armed_start(tmp_path):
    """Armed without a window: whole mode, after its window failed to close."""
    session = session_of(tmp_path, "whole")
    assert fire(session, ARMED, lambda s: s.start((1,))) == ("already-started", [], ARMED)
    assert session.start((2,)) == "started" and session.capture.log == [("open", (2,), None)]


def test_discrete_armed_start(tmp_path):
    session = session_of(tmp_path, "discrete")
    assert fire(session, ARMED, lambda s: s.start((1,))) == ("already-started", [], ARMED)
    assert session.start() == "started"  # the next planned window: (2,) replaces (1,)
    assert (session.armed, session.state, session.capture.log) == ((2,), ARMED, [])
    assert session.start() == "not-planned" and session.armed == (2,)  # none left: kept


def test_whole_open_start(tmp_path):
    session = session_of(tmp_path, "whole")
    assert fire(session, OPEN, lambda s: s.start((1,))) == ("already-started", [], OPEN)
    assert fire(session_of(tmp_path, "whole"), OPEN, lambda s: s.start((2,))) == (
        "started", [("close", (1,), None), ("open", (2,), None)], OPEN)


def test_discrete_open_start(tmp_path):
    """A start while a phase's window is open (a threaded actor): another step closes it."""
    session = session_of(tmp_path, "discrete")
    assert fire(session, OPEN, lambda s: s.start((1,))) == ("already-started", [], OPEN)
    session = session_of(tmp_path, "discrete")
    assert fire(session, OPEN, lambda s: s.start((2,))) == (
        "started", [("close", (1,), "update_actor")], ARMED)
    assert session.state == ARMED and session.armed == (2,)  # the phase's end closed nothing


@pytest.mark.parametrize("mode", MODES)
def test_finalized_start_opens_nothing(tmp_path, mode):
    assert fire(session_of(tmp_path, mode), FINALIZED, lambda s: s.start((2,))) == (
        "finalized", [], FINALIZED)


@pytest.mark.parametrize("mode", MODES)
def test_idle_stop_is_a_no_op(tmp_path, mode):
    assert fire(session_of(tmp_path, mode), IDLE, lambda s: s.stop()) == ("not-started", [],
                                                                          IDLE)


@pytest.mark.parametrize("mode", MODES)
def test_armed_stop_disarms(tmp_path, mode):
    session = session_of(tmp_path, mode)
    assert fire(session, ARMED, lambda s: s.stop((2,))) == ("not-started", [], ARMED)
    assert session.stop((1,)) == "stopped" and session.capture.log == []
    assert (session.state, session.armed, session.owner._verlprof_active) == (IDLE, None, False)


def test_whole_open_stop_closes_the_window(tmp_path):
    session = session_of(tmp_path, "whole")
    assert fire(session, OPEN, lambda s: s.stop()) == ("stopped", [("close", (1,), None)], IDLE)
    assert session.opened[0].end_ns >= session.opened[0].start_ns


def test_discrete_open_stop_closes_the_phase_window_once(tmp_path):
    session = session_of(tmp_path, "discrete")
    assert fire(session, OPEN, lambda s: s.stop()) == (
        "stopped", [("close", (1,), "update_actor")], IDLE)
    assert session.capture.log == [("close", (1,), "update_actor")]  # not again at its end


@pytest.mark.parametrize("mode", MODES)
def test_finalized_stop_is_a_no_op(tmp_path, mode):
    assert fire(session_of(tmp_path, mode), FINALIZED, lambda s: s.stop()) == (
        "not-started", [], FINALIZED)


@pytest.mark.parametrize("state", [IDLE, ARMED, OPEN, FINALIZED])
def test_whole_phase_is_a_range_the_open_window_records(tmp_path, state):
    assert fire(session_of(tmp_path, "whole"), state, phase_event) == (
        ("ran", 7), [("phase", "actor/update_actor")], state)


@pytest.mark.parametrize("state", [IDLE, FINALIZED])
def test_discrete_phase_without_an_armed_step_runs_as_is(tmp_path, state):
    assert fire(session_of(tmp_path, "discrete"), state, phase_event) == (("ran", 7), [], state)


def test_discrete_armed_phase_opens_its_own_window_once(tmp_path):
    session = session_of(tmp_path, "discrete")
    assert fire(session, ARMED, phase_event) == (("ran", 7), [
        ("open", (1,), "update_actor"), ("phase", "actor/update_actor"),
        ("close", (1,), "update_actor")], ARMED)
    session.capture.log.clear()
    assert phase_event(session) == ("ran", 7)  # used up in this step
    assert phase_event(session, "rollout", "generate_sequences") == ("ran", 7)  # not selected
    assert session.capture.log == [] and len(session.opened) == 1


def test_discrete_open_phase_runs_inside_the_open_window(tmp_path):
    """A nested phase: no window and no range of its own."""
    assert fire(session_of(tmp_path, "discrete"), OPEN,
                lambda s: phase_event(s, phase="compute_log_prob")) == (("ran", 7), [], OPEN)


@pytest.mark.parametrize("mode", MODES)
def test_idle_finalize_hands_over_every_planned_window(tmp_path, mode):
    session = session_of(tmp_path, mode)
    reports, log, state = fire(session, IDLE, lambda s: s.finalize(0))
    planned = len(session.plan.windows)
    assert (log, state) == ([("flush", planned), ("collect",)], FINALIZED)
    assert [r.status for r in reports] == ["missing"] * planned


@pytest.mark.parametrize("mode", MODES)
def test_armed_finalize_disarms_first(tmp_path, mode):
    session = session_of(tmp_path, mode)
    reports, log, state = fire(session, ARMED, lambda s: s.finalize(0))
    never_opened = len(session.plan.windows) - len(session.opened)
    assert (log, state) == ([("flush", never_opened), ("collect",)], FINALIZED)
    assert session.armed is None and not session.owner._verlprof_active


def test_whole_open_finalize_closes_the_window_first(tmp_path):
    reports, log, state = fire(session_of(tmp_path, "whole"), OPEN, lambda s: s.finalize(0))
    assert (log, state) == ([("close", (1,), None), ("flush", 1), ("collect",)], FINALIZED)
    assert [(r.report.steps, r.status) for r in reports] == [((1,), "ok"), ((2,), "missing")]


def test_discrete_open_finalize_closes_the_phase_window_first(tmp_path):
    reports, log, state = fire(session_of(tmp_path, "discrete"), OPEN, lambda s: s.finalize(0))
    assert (log, state) == ([("close", (1,), "update_actor"), ("flush", 3), ("collect",)],
                            FINALIZED)
    assert [r.status for r in reports] == ["ok", "missing", "missing", "missing"]


@pytest.mark.parametrize("mode", MODES)
def test_finalized_finalize_answers_the_same_again(tmp_path, mode):
    session = session_of(tmp_path, mode)
    first = session.finalize(0)
    reports, log, state = fire(session, FINALIZED, lambda s: s.finalize(0))
    assert (reports, log, state) == (first, [], FINALIZED) and reports is not first


def test_status_answers_while_finalize_waits_for_the_reports(tmp_path):
    """session.py: finalize holds its own lock, not the session's, so that a status call (the
    controller's view of this rank) answers while the reports settle."""
    import threading

    from verlprof.records import ProcessIdentity

    session = session_of(tmp_path, "whole")
    session.start((1,))
    collecting, release = threading.Event(), threading.Event()
    capture_collect = session.capture.collect

    def slow_collect(opened, never_opened, timeout_s):
        collecting.set()
        assert release.wait(60), "the test never released the collection"
        return capture_collect(opened, never_opened, timeout_s)

    session.capture.collect = slow_collect
    finalizing = threading.Thread(target=session.finalize, args=(0,), daemon=True)
    finalizing.start()
    try:
        assert collecting.wait(60)
        answers = []
        asking = threading.Thread(target=lambda: answers.append(
            session.status(ProcessIdentity(host="h", pid=1))), daemon=True)
        asking.start()
        asking.join(30)  # a liveness bound, not a timing: under self._lock this never returns
        assert answers, "status blocked while finalize waited for the reports"
        assert answers[0].finalized and answers[0].open_window is None
    finally:
        release.set()
        finalizing.join(60)
    assert not finalizing.is_alive() and session.finalize(0)[0].status == "ok"
