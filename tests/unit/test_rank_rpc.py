"""The controller's RPC layer: one line per error, and the in-process ranks
(:mod:`verlprof.runtime.local_rpc`) with the semantics of the Ray one: answers, errors, dead
ranks never run again, busy ranks not waited for twice and their calls run in order."""

from __future__ import annotations

import threading
import time

from ray.exceptions import ActorDiedError, RayActorError, RayTaskError

from verlprof.runtime.local_rpc import InProcessRanks, OnOwnThread, RankDied
from verlprof.runtime.rank_rpc import describe_error

A, B, C = ("critic", 0), ("critic", 1), ("critic", 2)

# -- describe_error -----------------------------------------------------------------------------


def test_describe_error_keeps_the_last_line_named_by_its_type():
    assert describe_error(ValueError("bad\n  context\n\nthe real reason  ")) == \
        "ValueError: the real reason"
    assert describe_error(OSError("OSError: already named")) == "OSError: already named"
    assert describe_error(KeyError()) == "KeyError"
    assert describe_error(RuntimeError("a   b\tc")) == "RuntimeError: a   b\tc"


def test_describe_error_clips_a_long_line():
    line = describe_error(RuntimeError("x" * 1000))
    assert len(line) == 300 and line.endswith("...") and "\n" not in line


def test_describe_error_unwraps_a_ray_task_error_to_its_cause():
    err = RayTaskError("verlprof_stop", "Traceback (most recent call last):\n  File ...\n"
                       "OSError: [Errno 28] No space left on device",
                       OSError(28, "No space left on device"))
    assert describe_error(err) == "OSError: [Errno 28] No space left on device"


def test_describe_error_says_a_dead_worker_died_in_one_line():
    err = RayActorError(error_msg="The actor died unexpectedly before finishing this task.\n"
                        "\tclass_name: LightWorker\n\tWorker exit type: SYSTEM_ERROR\n"
                        "\tWorker exit detail: The leased worker has unrecoverable failure. "
                        "Worker is requested to be destroyed.")
    assert describe_error(err) == ("worker process died (RayActorError: SYSTEM_ERROR, "
                                   "The leased worker has unrecoverable failure.)")
    assert describe_error(ActorDiedError()) == "worker process died (ActorDiedError)"


# -- InProcessRanks ---------------------------------------------------------------------------


class Fake:
    """A rank: ``echo`` answers, ``boom`` raises over several lines, ``die`` dies, ``wait``
    blocks until ``gate`` is set; every call is noted in ``seen``."""

    def __init__(self, name: str):
        self.name, self.seen = name, []
        self.gate = threading.Event()

    def echo(self, value):
        self.seen.append(("echo", value))
        return (self.name, value)

    def boom(self):
        self.seen.append(("boom",))
        raise ValueError("first line\nlast line")

    def die(self):
        self.seen.append(("die",))
        raise RankDied("SIGKILL")

    def wait(self):
        self.seen.append(("wait",))
        assert self.gate.wait(30)
        return "done"


def ranks(*threaded, timeout=0.3):
    rpc = InProcessRanks(rpc_timeout_s=timeout)
    fakes = {t: Fake(f"{t[0]}{t[1]}") for t in (A, B, C)}
    rpc.actors.update({t: OnOwnThread(f) if t in threaded else f for t, f in fakes.items()})
    return rpc, fakes


def test_answers_and_errors_one_line_each_naming_the_call():
    rpc, fakes = ranks()
    fakes[B].echo = lambda value: fakes[B].boom()
    answers, errors = rpc.call("echo", [A, B], lambda t: (t[1] * 10,))
    assert answers == {A: ("critic0", 0)}
    assert errors == [(B, "echo failed: ValueError: last line")]
    assert rpc.failed == {} and rpc.call("echo", [], lambda t: ()) == ({}, [])


def test_a_method_the_rank_lacks_cannot_be_sent():
    rpc, _ = ranks()
    answers, errors = rpc.call("verlprof_nothing", [A], lambda t: ())
    assert answers == {} and errors[0][0] == A
    assert errors[0][1].startswith("verlprof_nothing could not be sent: AttributeError: ")


def test_a_rank_that_dies_is_remembered_and_never_runs_again():
    rpc, fakes = ranks()
    _, errors = rpc.call("die", [A, B], lambda t: ())
    why = "worker process died (RankDied: SIGKILL)"
    assert errors == [(A, f"die failed: {why}"), (B, f"die failed: {why}")]
    assert rpc.failed == {A: why, B: why}
    answers, errors = rpc.call("echo", [A, C], lambda t: (1,))
    assert answers == {C: ("critic2", 1)} and errors == [(A, f"echo failed: {why}")]
    assert fakes[A].seen == [("die",)]


def test_kill_is_noticed_at_the_next_call():
    rpc, fakes = ranks()
    rpc.kill(B, "OOM killer")
    assert rpc.failed == {}  # nobody knows yet
    answers, errors = rpc.call("echo", [A, B], lambda t: (1,))
    assert list(answers) == [A]
    assert errors == [(B, "echo failed: worker process died (RankDied: OOM killer)")]
    assert rpc.failed == {B: "worker process died (RankDied: OOM killer)"}
    assert fakes[B].seen == []


def test_a_busy_rank_is_not_waited_twice_and_its_calls_run_in_order():
    rpc, fakes = ranks(B, timeout=0.3)
    fakes[A].gate.set()  # A answers at once (inline); B blocks on its own thread
    began = time.monotonic()
    answers, errors = rpc.call("wait", [A, B], lambda t: ())
    assert time.monotonic() - began >= 0.3 and answers == {A: "done"}
    assert errors == [(B, "wait did not answer within 0.3s (busy in a long call, or hung)")]
    began = time.monotonic()
    answers, errors = rpc.call("echo", [A, B], lambda t: (2,))
    assert time.monotonic() - began < 0.25  # not waited for again
    assert answers == {A: ("critic0", 2)} and len(errors) == 1
    assert errors[0][1].startswith("echo not awaited: still busy since wait ")
    assert fakes[B].seen == [("wait",)]  # queued behind the call it is busy with
    fakes[B].gate.set()
    for _ in range(100):  # the queued call runs once the rank is free
        if len(fakes[B].seen) == 2:
            break
        time.sleep(0.02)
    assert fakes[B].seen == [("wait",), ("echo", 2)]
    answers, errors = rpc.call("echo", [B], lambda t: (3,))  # answered: no longer busy
    assert answers == {B: ("critic1", 3)} and errors == [] and rpc.busy == {}
    rpc.close()


def test_wait_busy_waits_for_a_busy_rank_and_its_queue():
    rpc, fakes = ranks(A, timeout=0.2)
    rpc.call("wait", [A], lambda t: ())
    assert A in rpc.busy
    threading.Timer(0.3, fakes[A].gate.set).start()
    answers, errors = rpc.call("echo", [A], lambda t: (5,), timeout_s=10, wait_busy=True)
    assert answers == {A: ("critic0", 5)} and errors == [] and rpc.busy == {}
    rpc.close()


def test_a_busy_rank_that_dies_is_noted_when_it_is_reaped():
    rpc, fakes = ranks(A, timeout=0.2)
    fakes[A].wait = lambda: (fakes[A].gate.wait(30), fakes[A].die())
    rpc.call("wait", [A], lambda t: ())
    rpc.call("echo", [A], lambda t: (1,))  # queued behind: it must not run on a dead rank
    last = rpc.busy[A][1]
    fakes[A].gate.set()
    assert last.exception(timeout=10) is not None  # the dead rank's queued call failed
    rpc.reap_busy()
    assert rpc.failed == {A: "worker process died (RankDied: SIGKILL)"} and rpc.busy == {}
    assert fakes[A].seen == [("die",)]
    rpc.close()


def test_inline_ranks_need_no_thread_per_call(monkeypatch):
    """The benchmark drives thousands of fake ranks through this layer: no thread is started
    for them (counted at ``Thread.start``: other tests' threads may end meanwhile)."""
    rpc = InProcessRanks()
    fakes = {("g", r): Fake(str(r)) for r in range(2000)}
    rpc.actors.update(fakes)
    started = []
    start = threading.Thread.start
    monkeypatch.setattr(threading.Thread, "start",
                        lambda self: (started.append(self), start(self))[1])
    answers, errors = rpc.call("echo", list(fakes), lambda t: (t[1],))
    monkeypatch.undo()
    assert started == [] and errors == []
    assert [answers[("g", r)] for r in range(2000)] == [(str(r), r) for r in range(2000)]
