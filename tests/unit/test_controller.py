"""The controller without Ray: its window logic and its bookkeeping of failed and busy ranks,
driven through :class:`~verlprof.runtime.local_rpc.InProcessRanks`.

The ranks are the real :class:`ProfilingWorkerMixin` and worker session, with a capture that
writes one small file per window (several ranks live in this one process, where torch's
profiler can run only once at a time); faults are injected at their RPCs. tests/faults/ proves
the same promises over Ray and nsys."""

from __future__ import annotations

import logging
import os
import threading
import time
from contextlib import nullcontext
from typing import Any, Dict, List, Optional, Sequence

import pytest

from verlprof.backends.base import Capture, never_opened_reports, worker_report
from verlprof.config.loader import load_config
from verlprof.config.schema import ComponentConfig, ComponentsConfig, ProfilingConfig
from verlprof.config.topology import Topology
from verlprof.errors import ProfilingRuntimeError
from verlprof.plan import build_plan
from verlprof.records import ProcessIdentity, SessionStatus
from verlprof.runtime.controller import ProfileController
from verlprof.runtime.local_rpc import InProcessRanks, OnOwnThread, RankDied
from verlprof.worker import ProfilingWorkerMixin, annotate

GROUP = "actor_rollout_ref"
TOPO = Topology.of({GROUP: 2}, cuda=False)
CONFIG = os.path.join(os.path.dirname(__file__), "..", "..", "trainer_configs",
                      "ppo_trainer.yaml")
START, STOP = ("verlprof_start",), ("verlprof_stop",)
R0, R1 = (GROUP, 0), (GROUP, 1)


class FileCapture(Capture):
    """A capture reduced to its contract: one file per window, written when it closes (named
    as nsys names raw reports), holding the window's steps and the phases run inside it."""

    def __init__(self, plan):
        super().__init__(plan)
        self.files: Dict[int, str] = {}
        self.phases: List[str] = []

    def open(self, window):
        self.phases = []

    def close(self, window):
        n = len(self.files) + 1
        path = os.path.join(self.plan.raw_dir, f"{GROUP}_rank{self.plan.rank}_{os.getpid()}.{n}")
        with open(path, "w") as handle:
            handle.write(f"{list(window.steps)} {self.phases}")
        self.files[n] = path

    def phase(self, label):
        self.phases.append(label)
        return nullcontext()

    def collect(self, opened, never_opened, timeout_s):
        return [worker_report(o.window, raw_path=self.files[n], status="ok", start_ns=o.start_ns,
                              end_ns=o.end_ns) for n, o in enumerate(opened, start=1)] + \
            never_opened_reports(never_opened)


class Rank(ProfilingWorkerMixin):
    """A hybrid actor_rollout_ref rank: the real mixin and session; it records the RPCs it
    receives, and can be made to fail one (``faults``) or to block in all (``hold``)."""

    real_capture = False

    def __init__(self, rank: int):
        self.rank = rank
        self.rpcs: List[tuple] = []
        self.faults: Dict[str, BaseException] = {}
        self.hold: Optional[threading.Event] = None

    def _receive(self, method: str, args: tuple) -> None:
        self.rpcs.append((method, *args))
        if self.hold is not None:
            assert self.hold.wait(30), "the test never released this rank"
        fault = self.faults.pop(method, None)
        if fault is not None:
            raise fault

    def verlprof_configure(self, plan):
        status = super().verlprof_configure(plan)
        if not self.real_capture:
            self._verlprof_session.capture = FileCapture(plan)
        return status

    def verlprof_start(self, *args):
        self._receive("verlprof_start", args)
        return super().verlprof_start(*args)

    def verlprof_stop(self, *args):
        self._receive("verlprof_stop", args)
        return super().verlprof_stop(*args)

    def verlprof_finalize(self, *args):
        self._receive("verlprof_finalize", args)
        return super().verlprof_finalize(*args)

    @annotate("rollout")
    def generate_sequences(self) -> int:
        return self.rank

    @annotate("actor")
    def compute_log_prob(self) -> int:
        return self.rank

    @annotate("actor")
    def update_actor(self) -> int:
        return self.rank


class Sent(InProcessRanks):
    """The in-process layer, also noting which ranks each fan-out went to."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.sent: List[tuple] = []

    def call(self, method, targets, args, **kwargs):
        if method != "verlprof_clock":  # clock readings: tests/unit/test_trace_clock.py
            self.sent.append((method, list(targets)))
        return super().call(method, targets, args, **kwargs)


def plan_of(tmp_path, steps: Sequence[int], *, continuous=False, discrete=False, ranks=(0, 1),
            place="per_window"):
    cfg = ProfilingConfig(steps=tuple(steps), continuous_steps=continuous, tool="torch",
                          output_dir=str(tmp_path), place=place, components=ComponentsConfig(
                              actor=ComponentConfig(ranks=tuple(ranks), discrete=discrete)))
    return build_plan(cfg, TOPO)


def controller_of(plan, *, rpc: Optional[InProcessRanks] = None, own_thread=(), **kwargs):
    """A controller over two in-process ranks (those in ``own_thread`` may block)."""
    rpc = rpc if rpc is not None else Sent()
    controller = ProfileController(plan, rpc=rpc, echo=False, preflight=False,
                                   handle_signals=False, **kwargs)
    ranks = [Rank(r) for r in range(2)]
    controller.register_group(GROUP, [OnOwnThread(r) if r.rank in own_thread else r
                                      for r in ranks])
    return controller, ranks, rpc


def open_windows(ranks) -> tuple:
    """The step folder of each rank's open window (None: none open)."""
    return tuple((s.open_window or "").split("/")[0] or None
                 for s in (r.verlprof_status() for r in ranks))


def run(controller, ranks, steps) -> List[tuple]:
    """Each step: every phase on every rank; returns the windows open during each step."""
    seen = []
    for step in steps:
        with controller.step(step):
            phases(ranks)
            seen.append(open_windows(ranks))
    return seen


def phases(ranks) -> None:
    """A PPO step's phases, on every rank."""
    for rank in ranks:
        rank.generate_sequences()
        rank.compute_log_prob()
        rank.update_actor()


def reports(manifest) -> List[tuple]:
    return [(e.rank, e.steps, e.status) for e in manifest.reports]


def content(manifest, entry) -> str:
    with open(os.path.join(manifest.output_dir, entry.path)) as handle:
        return handle.read()


PHASE_LIST = ["rollout/generate_sequences", "actor/compute_log_prob", "actor/update_actor"]
PHASES = str(PHASE_LIST)


# -- windows at step boundaries --------------------------------------------------------------


def test_whole_step_windows_open_and_close_at_step_boundaries(tmp_path):
    controller, ranks, _ = controller_of(plan_of(tmp_path, [2, 3]))
    assert run(controller, ranks, [1, 2, 3, 4]) == [
        (None, None), ("step0002",) * 2, ("step0003",) * 2, (None, None)]
    assert open_windows(ranks) == (None, None)
    # each worker's next window is the one meant: starts go without an argument
    assert ranks[0].rpcs == ranks[1].rpcs == [START, STOP, START, STOP]
    manifest = controller.finalize()
    assert reports(manifest) == [(r, (s,), "ok") for r in (0, 1) for s in (2, 3)]
    for entry in manifest.reports:
        assert entry.transfer == "rename" and entry.path.startswith(f"step000{entry.steps[0]}/")
        assert content(manifest, entry) == f"{list(entry.steps)} {PHASES}"
    assert os.path.isfile(tmp_path / "manifest.json")
    assert not [f for _, _, fs in os.walk(tmp_path / ".raw") for f in fs]  # all moved


def test_discrete_windows_open_per_planned_phase_of_the_armed_step(tmp_path):
    controller, ranks, _ = controller_of(plan_of(tmp_path, [2], discrete=True, ranks=(0,)))
    ranks[0].update_actor()  # before any step: no window
    with controller.step(2):
        assert ranks[0].verlprof_status().armed == (2,)
        run_phases = [ranks[0].generate_sequences(), ranks[0].update_actor(),
                      ranks[0].update_actor()]  # the second call: its window is used up
        assert run_phases == [0, 0, 0] and open_windows(ranks) == (None, None)
    run(controller, ranks, [3])  # not planned: nothing opens
    manifest = controller.finalize()
    by_phase = {e.phase: e for e in manifest.reports}
    assert sorted(by_phase) == ["compute_log_prob", "update_actor"]  # rollout not selected
    assert by_phase["update_actor"].status == "ok"
    assert content(manifest, by_phase["update_actor"]) == "[2] ['actor/update_actor']"
    assert by_phase["compute_log_prob"].status == "missing"
    assert "compute_log_prob was not called in step 2" in by_phase["compute_log_prob"].reason
    assert ranks[1].rpcs == []  # an unplanned rank is never asked


def test_a_continuous_window_spans_its_steps_and_closes_after_the_last(tmp_path):
    controller, ranks, _ = controller_of(plan_of(tmp_path, [1, 2, 3, 5], continuous=True))
    seen = run(controller, ranks, [1, 2, 3, 4, 5])
    assert [s[0] for s in seen] == ["step0001-0003"] * 3 + [None, "step0005"]
    assert ranks[0].rpcs == [START, STOP, START, STOP]
    manifest = controller.finalize()
    assert reports(manifest) == [(r, w, "ok") for r in (0, 1) for w in ((1, 2, 3), (5,))]
    assert content(manifest, manifest.reports[0]) == f"[1, 2, 3] {PHASE_LIST * 3}"


# -- repeats, backwards steps, jumps: a window opens at most once -------------------------------


def test_repeated_backwards_and_late_steps_capture_each_window_once(tmp_path):
    controller, ranks, rpc = controller_of(plan_of(tmp_path, [2, 3]))
    worker = ranks[0]
    controller.stop_all()  # stop without start: nothing happens
    assert rpc.sent == [("verlprof_configure", [R0, R1])] and \
        worker.verlprof_stop().outcome == "not-started"
    with controller.step(2):
        assert worker.verlprof_start((2,)) == "already-started"
        phases(ranks)
    assert worker.verlprof_start((2,)) == "not-planned"  # captured: never twice
    run(controller, ranks, [2, 3, 2, 3, 9])  # a retry, a resume going backwards, a late step
    assert worker.verlprof_status().opened == 2
    assert worker.rpcs == [STOP, START, ("verlprof_start", (2,)), STOP,  # the test's own
                           ("verlprof_start", (2,)), START, STOP]  # calls are recorded too
    first = controller.finalize()
    assert controller.finalize() is first  # twice: the same manifest
    sent = len(rpc.sent)
    run(controller, ranks, [3])  # after finalize: nothing, not one RPC
    assert len(rpc.sent) == sent and worker.verlprof_start((3,)) == "finalized"
    assert reports(first) == [(r, (s,), "ok") for r in (0, 1) for s in (2, 3)]
    for entry in first.reports:  # each report holds its step exactly once
        assert content(first, entry) == f"{list(entry.steps)} {PHASES}"


def test_jumps_and_backward_steps_open_exactly_the_window_meant(tmp_path):
    controller, ranks, _ = controller_of(plan_of(tmp_path, [2, 3, 5, 6]))
    assert run(controller, ranks, [1, 2, 5, 3, 4, 6, 5, 2]) == [
        (None, None), ("step0002",) * 2, ("step0005",) * 2, ("step0003",) * 2, (None, None),
        ("step0006",) * 2, (None, None), (None, None)]
    # after 2 the worker's next is 3: the jump to 5 names its window; 5 then leaves 6 next, so
    # going back to 3 names it; 3 leaves 5 next (captured), so 6 is named too
    assert ranks[0].rpcs == [START, STOP, ("verlprof_start", (5,)), STOP,
                             ("verlprof_start", (3,)), STOP, ("verlprof_start", (6,)), STOP]
    assert sorted(reports(controller.finalize())) == [
        (r, (s,), "ok") for r in (0, 1) for s in (2, 3, 5, 6)]


def test_after_an_error_the_window_is_named_until_the_rank_answers_again(tmp_path):
    controller, ranks, _ = controller_of(plan_of(tmp_path, [1, 2, 3]))
    ranks[1].faults["verlprof_start"] = RuntimeError("no capture\nthe device is gone")
    run(controller, ranks, [1, 2, 3])
    assert ranks[0].rpcs == [START, STOP] * 3
    assert ranks[1].rpcs == [START, STOP, ("verlprof_start", (2,)), STOP, START, STOP]
    manifest = controller.finalize()
    assert sorted(r for r in reports(manifest) if r[0] == 1) == [
        (1, (1,), "missing"), (1, (2,), "ok"), (1, (3,), "ok")]
    assert "actor_rollout_ref rank 1: verlprof_start failed: RuntimeError: the device is gone" \
        in manifest.warnings
    assert controller.failed_ranks == {}  # an error is not a death: the rank is still asked


# -- on_rank_failure ---------------------------------------------------------------------------


def test_raise_stops_the_other_windows_and_raises_before_the_step_runs(tmp_path):
    controller, ranks, _ = controller_of(plan_of(tmp_path, [1, 2]), on_rank_failure="raise")
    ranks[1].faults["verlprof_start"] = RankDied("SIGKILL")
    ran = []
    with pytest.raises(ProfilingRuntimeError) as info, controller.step(1):
        ran.append(1)
    assert ran == []
    assert (info.value.group, info.value.rank) == (GROUP, 1)
    assert str(info.value) == ("actor_rollout_ref rank 1: verlprof_start failed: "
                               "worker process died (RankDied: SIGKILL)")
    assert ranks[0].rpcs == [START, STOP] and open_windows(ranks) == (None, None)
    assert controller.failed_ranks == {R1: "worker process died (RankDied: SIGKILL)"}


def test_raise_at_the_end_of_the_step_when_a_stop_fails(tmp_path):
    controller, ranks, _ = controller_of(plan_of(tmp_path, [1, 2]), on_rank_failure="raise")
    ranks[0].faults["verlprof_stop"] = OSError("disk full")
    ran = []
    with pytest.raises(ProfilingRuntimeError, match=r"^actor_rollout_ref rank 0: verlprof_stop "
                       r"failed: OSError: disk full$") as info, controller.step(1):
        ran.append(1)
    assert ran == [1] and (info.value.group, info.value.rank) == (GROUP, 0)
    assert ranks[1].rpcs == [START, STOP] and ranks[1].verlprof_status().open_window is None


def test_continue_names_the_rank_and_carries_on(tmp_path):
    controller, ranks, rpc = controller_of(plan_of(tmp_path, [1, 2]))
    ranks[1].faults["verlprof_start"] = RankDied("SIGKILL")
    assert run(controller, ranks, [1, 2]) == [("step0001", None), ("step0002", None)]
    assert rpc.sent[1:] == [("verlprof_start", [R0, R1]), ("verlprof_stop", [R0]),
                            ("verlprof_start", [R0]), ("verlprof_stop", [R0])]
    assert controller.failed_ranks == {R1: "worker process died (RankDied: SIGKILL)"}


# -- busy and dead ranks -----------------------------------------------------------------------


def test_a_busy_rank_is_named_not_waited_twice_and_its_calls_arrive_in_order(tmp_path, caplog):
    controller, ranks, rpc = controller_of(plan_of(tmp_path, [1, 2]), own_thread={1},
                                           rpc_timeout_s=0.5)
    ranks[1].hold = threading.Event()
    caplog.set_level(logging.ERROR, logger="verlprof")
    began = time.monotonic()
    with controller.step(1):
        pass
    first = time.monotonic() - began
    with controller.step(2):
        pass
    second = time.monotonic() - began - first
    assert 0.5 <= first < 0.95 and second < 0.45  # only the first call was waited for
    messages = [r.getMessage().split(": ", 2)[2] for r in caplog.records]
    assert messages[0] == ("verlprof_start did not answer within 0.5s "
                           "(busy in a long call, or hung)")
    assert [m.split(" not awaited: still busy since verlprof_start ")[0] for m in messages[1:]] \
        == ["verlprof_stop", "verlprof_start", "verlprof_stop"]
    assert R1 in rpc.busy and ranks[0].rpcs == [START, STOP] * 2
    ranks[1].hold.set()
    manifest = controller.finalize()  # waits for the busy rank: its calls ran in order
    assert ranks[1].rpcs == [START, STOP, ("verlprof_start", (2,)), STOP,
                             ("verlprof_finalize", 300.0)]
    assert reports(manifest) == [(r, (s,), "ok") for r in (0, 1) for s in (1, 2)]
    assert rpc.busy == {} and controller.failed_ranks == {}
    rpc.close()


def test_a_dead_rank_is_never_asked_again_and_its_reports_are_missing_with_the_reason(tmp_path):
    controller, ranks, rpc = controller_of(plan_of(tmp_path, [1, 2, 3]))
    run(controller, ranks, [1])
    rpc.kill(R1, "SIGKILL")  # from outside, between steps: noticed at the next call
    assert run(controller, ranks, [2, 3]) == [("step0002", None), ("step0003", None)]
    manifest = controller.finalize()
    assert rpc.sent[1:] == [("verlprof_start", [R0, R1]), ("verlprof_stop", [R0, R1]),
                            ("verlprof_start", [R0, R1]), ("verlprof_stop", [R0]),
                            ("verlprof_start", [R0]), ("verlprof_stop", [R0]),
                            ("verlprof_finalize", [R0])]
    assert ranks[1].rpcs == [START, STOP]  # the dead rank ran nothing more
    why = "worker process died (RankDied: SIGKILL)"
    assert controller.failed_ranks == {R1: why}
    assert f"actor_rollout_ref rank 1: verlprof_start failed: {why}" in manifest.warnings
    dead = [e for e in manifest.reports if e.rank == 1]
    assert [(e.steps, e.status) for e in dead] == [((1,), "missing"), ((2,), "missing"),
                                                   ((3,), "missing")]
    # its step-1 report was written but never handed over: it stays, and the reason says so
    assert {e.reason for e in dead} == {
        f"{why}; 1 uncollected file(s) left in .raw/actor_rollout_ref/rank1"}
    assert [e.status for e in manifest.reports if e.rank == 0] == ["ok"] * 3


# -- exceptions and interrupts inside a step ---------------------------------------------------


@pytest.mark.parametrize("exc", [KeyboardInterrupt, ValueError])
def test_an_exception_inside_a_step_stops_what_it_started(tmp_path, exc):
    controller, ranks, _ = controller_of(plan_of(tmp_path, [1, 2]))
    with pytest.raises(exc), controller.step(1):
        ranks[0].update_actor()
        raise exc()
    assert open_windows(ranks) == (None, None) and ranks[1].rpcs == [START, STOP]
    run(controller, ranks, [1, 2])  # the retry of step 1 records nothing new
    manifest = controller.finalize()
    assert reports(manifest) == [(r, (s,), "ok") for r in (0, 1) for s in (1, 2)]
    assert content(manifest, manifest.reports[0]) == "[1] ['actor/update_actor']"


def test_ctrl_c_during_the_start_fan_out_stops_the_ranks_already_started(tmp_path):
    controller, ranks, _ = controller_of(plan_of(tmp_path, [1]))
    ranks[1].faults["verlprof_start"] = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt), controller.step(1):
        pytest.fail("the step must not run")
    assert ranks[0].rpcs == [START, STOP] and open_windows(ranks) == (None, None)


# -- the plan's run policy ---------------------------------------------------------------------


def test_the_yaml_run_policy_applies_without_arguments_and_arguments_override(tmp_path):
    loaded = load_config(CONFIG, ["trainer.profiler.on_rank_failure=raise",
                                  "trainer.profiler.rpc_timeout_s=7",
                                  "trainer.profiler.finalize_timeout_s=11",
                                  "trainer.profiler.tool=torch",
                                  f"trainer.profiler.output_dir={tmp_path}"])
    plan = build_plan(loaded.profiling, loaded.topology)
    default = ProfileController(plan, echo=False, preflight=False)  # the Ray layer: not used
    assert (default.on_rank_failure, default.rpc_timeout_s, default.finalize_timeout_s) == (
        "raise", 7, 11)
    rpc = InProcessRanks(rpc_timeout_s=1)
    controller = ProfileController(plan, echo=False, preflight=False, rpc=rpc)
    assert rpc.rpc_timeout_s == 7  # an injected layer follows the plan too
    ranks = [Rank(r) for r in range(2)]
    controller.register_group(GROUP, ranks)
    ranks[1].faults["verlprof_start"] = RankDied("SIGKILL")
    with pytest.raises(ProfilingRuntimeError) as info, controller.step(1):
        pass
    assert (info.value.group, info.value.rank) == (GROUP, 1)
    override = ProfileController(plan, echo=False, preflight=False, rpc=rpc,
                                 on_rank_failure="continue", rpc_timeout_s=3,
                                 finalize_timeout_s=9)
    assert (override.on_rank_failure, override.rpc_timeout_s, override.finalize_timeout_s,
            rpc.rpc_timeout_s) == ("continue", 3, 9, 3)
    with pytest.raises(ValueError, match="on_rank_failure must be one of continue, raise"):
        ProfileController(plan, echo=False, preflight=False, on_rank_failure="ignore")


def test_the_real_torch_capture_through_the_controller(tmp_path):
    """One run with the backend itself: a trace per window, moved to its contract path."""

    class TorchRank(Rank):
        real_capture = True

    plan = plan_of(tmp_path, [1], ranks=(0,))
    controller = ProfileController(plan, rpc=InProcessRanks(), echo=False, preflight=False,
                                   handle_signals=False)
    ranks = [TorchRank(0), TorchRank(1)]
    controller.register_group(GROUP, ranks)
    run(controller, ranks, [1])
    manifest = controller.finalize()
    (entry,) = manifest.reports
    assert (entry.status, entry.transfer) == ("ok", "rename")
    assert entry.path.endswith(".pt.trace.json.gz") and entry.bytes > 0
    assert os.path.getsize(os.path.join(str(tmp_path), entry.path)) == entry.bytes
    assert entry.bytes <= plan.size.window_bytes[0]  # the size estimate holds a real trace


# -- the controller's RPC bookkeeping, with a fake rank (moved from tests/faults) ---------------


class Recorder:
    """A stand-in rank for the controller's own bookkeeping: records the RPCs it gets and
    answers like a worker whose next window is ``next_window``."""

    def __init__(self, calls: List[tuple], next_window: Optional[tuple] = None):
        self.calls, self.next_window = calls, next_window

    def verlprof_configure(self, plan) -> SessionStatus:
        return SessionStatus(identity=ProcessIdentity(host="", pid=0), configured=True,
                             next=self.next_window)

    def verlprof_start(self, *args) -> str:
        self.calls.append(("verlprof_start", *args))
        return "started"

    def verlprof_stop(self, *args) -> str:
        self.calls.append(("verlprof_stop", *args))
        return "stopped"

    def verlprof_finalize(self, *args) -> list:
        self.calls.append(("verlprof_finalize", *args))
        return []


def recorded(tmp_path, steps, continuous=False, next_window=None):
    controller = ProfileController(
        plan_of(tmp_path, steps, continuous=continuous, ranks=(0,)), rpc=InProcessRanks(),
        echo=False, preflight=False, handle_signals=False, finalize_timeout_s=30)
    calls: List[tuple] = []
    controller.register_group(GROUP, [Recorder(calls, next_window), Recorder([])])
    return controller, calls


def test_a_step_outside_the_open_window_closes_it(tmp_path):
    """Continuous window [1-3]: a jump from step 1 to step 5 closes it first; resuming at
    step 2 (inside it) does not reopen it; a window opens only at its first step."""
    controller, calls = recorded(tmp_path, [1, 2, 3, 5], continuous=True)
    with controller.step(1):
        pass
    assert calls == [("verlprof_start", (1, 2, 3))]
    with controller.step(5):
        pass
    assert calls == [("verlprof_start", (1, 2, 3)), STOP, START, STOP]  # (5,) follows (1-3)
    calls.clear()
    for step in (2, 3, 1, 5):  # backwards after a resume: nothing reopens
        with controller.step(step):
            pass
    assert calls == []


def test_consecutive_windows_are_started_without_an_argument(tmp_path):
    """A worker whose next window is the one meant gets ``verlprof_start()`` (Ray serialises
    every argument: benchmarks/p2_fanout.py); after a jump the window is named."""
    controller, calls = recorded(tmp_path, [1, 2, 5, 6], next_window=(1,))
    for step in (1, 2, 3, 6, 5):
        with controller.step(step):
            pass
    assert calls == [START, STOP, START, STOP, ("verlprof_start", (6,)), STOP,
                     ("verlprof_start", (5,)), STOP]


def test_steps_going_backwards_inside_an_open_window(tmp_path):
    controller, calls = recorded(tmp_path, [1, 2, 3], continuous=True)
    for step in (1, 2, 1, 2, 3):  # still inside [1-3]: the window stays open until step 3
        with controller.step(step):
            pass
    assert calls == [("verlprof_start", (1, 2, 3)), STOP]


def test_exception_then_retry_of_the_same_step(tmp_path):
    controller, calls = recorded(tmp_path, [2])
    with pytest.raises(ValueError), controller.step(2):
        raise ValueError("the step failed")
    with controller.step(2):  # the retry records nothing new
        pass
    assert calls == [("verlprof_start", (2,)), STOP]
    controller.finalize()
    with controller.step(2):
        pass
    assert calls[-1] == ("verlprof_finalize", 30.0)


def test_a_replica_that_dies_mid_window_loses_only_its_own_reports(tmp_path):
    """A rollout replica (a served model's group: one rank per replica, whole-step windows)
    dies while its step-2 window is open: the training rank and the other replica complete,
    and the manifest names the replica that died and why."""
    from verlprof.config.topology import GroupTopology

    topology = Topology(groups=(GroupTopology("actor_rollout_ref", ("actor",), 1),
                                GroupTopology("rollout_replicas", ("rollout",), 2,
                                              rank_span=1, engine="stand-in")), cuda=False)
    plan = build_plan(ProfilingConfig(steps=(1, 2, 3), tool="torch", output_dir=str(tmp_path),
                                      components=ComponentsConfig(
                                          actor=ComponentConfig(ranks=(0,)),
                                          rollout=ComponentConfig(ranks=(0, 1)))), topology)
    assert [(p.group, p.rank, p.mode) for p in plan.processes] == [
        ("actor_rollout_ref", 0, "whole"), ("rollout_replicas", 0, "whole"),
        ("rollout_replicas", 1, "whole")]
    rpc = Sent()
    controller = ProfileController(plan, rpc=rpc, echo=False, preflight=False,
                                   handle_signals=False)
    trainer, replicas = Rank(0), [Rank(0), Rank(1)]
    controller.register_group("actor_rollout_ref", [trainer])
    controller.register_group("rollout_replicas", replicas)
    for step in (1, 2, 3):
        with controller.step(step):
            phases([trainer, *replicas])
            if step == 2:
                rpc.kill(("rollout_replicas", 1), "SIGKILL")  # in its open window
    manifest = controller.finalize()
    by = {(e.group, e.rank): [] for e in manifest.reports}
    for entry in manifest.reports:
        by[(entry.group, entry.rank)].append((entry.steps, entry.status))
    assert by[("actor_rollout_ref", 0)] == [((s,), "ok") for s in (1, 2, 3)]
    assert by[("rollout_replicas", 0)] == [((s,), "ok") for s in (1, 2, 3)]
    # never handed over (its step-1 report too): every entry of it missing, with the reason
    assert by[("rollout_replicas", 1)] == [((s,), "missing") for s in (1, 2, 3)]
    why = "worker process died (RankDied: SIGKILL)"
    assert {e.reason for e in manifest.reports if e.group == "rollout_replicas"
            and e.rank == 1} == {why}
    assert controller.failed_ranks == {("rollout_replicas", 1): why}
    assert any(w.startswith("rollout_replicas rank 1: ") and why in w
               for w in manifest.warnings)
    rpc.close()
