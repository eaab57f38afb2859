"""SignalGuard in this (main) thread, with real signals sent to this process: SIGTERM and
Ctrl-C become exceptions while installed, one is held back while shielded, the previous
handlers come back, and the signal is passed on as they would have acted on it.

A signal is sent only while the guard's own handler is installed (checked first), so that a
bug cannot end the test run."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

import pytest

from verlprof.runtime.signals import ProfilingTerminated, SignalGuard


def send(signum: int) -> None:
    """Deliver ``signum`` to this process and give Python the chance to run its handler."""
    os.kill(os.getpid(), signum)
    for _ in range(20):  # Python runs a handler between bytecodes, in the main thread
        time.sleep(0.005)


@pytest.fixture
def handlers():
    """Known handlers before each test (SIGINT: Python's own), restored after it."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def installed(guard: SignalGuard) -> None:
    assert signal.getsignal(signal.SIGTERM) == guard._handle
    assert signal.getsignal(signal.SIGINT) == guard._handle


def test_install_then_restore_puts_the_previous_handlers_back(handlers):
    guard = SignalGuard()
    assert guard.install() and guard.installed
    installed(guard)
    assert guard.install() is False  # once
    assert guard.restore() is None and not guard.installed
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_nothing_is_installed_outside_the_main_thread(handlers):
    guard, answers = SignalGuard(), []
    thread = threading.Thread(target=lambda: answers.append(guard.install()))
    thread.start()
    thread.join()
    assert answers == [False] and not guard.installed
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_an_ignored_signal_and_someone_elses_sigint_handler_are_left_alone(handlers):
    def theirs(signum, frame):
        pass

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, theirs)
    guard = SignalGuard()
    assert guard.install() is False
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    assert signal.getsignal(signal.SIGINT) is theirs


def test_sigterm_becomes_profiling_terminated_in_the_main_thread(handlers):
    guard = SignalGuard()
    guard.install()
    installed(guard)
    with pytest.raises(ProfilingTerminated, match="received SIGTERM") as info:
        send(signal.SIGTERM)
    assert info.value.signum == signal.SIGTERM and isinstance(info.value, KeyboardInterrupt)
    assert guard.restore() == signal.SIGTERM


def test_ctrl_c_becomes_keyboard_interrupt(handlers):
    guard = SignalGuard()
    guard.install()
    installed(guard)
    with pytest.raises(KeyboardInterrupt) as info:
        send(signal.SIGINT)
    assert not isinstance(info.value, ProfilingTerminated)
    assert guard.restore() == signal.SIGINT


def test_shield_holds_back_the_first_signal_and_a_second_one_aborts(handlers, caplog):
    guard = SignalGuard()
    guard.install()
    installed(guard)
    caplog.set_level(logging.WARNING, logger="verlprof")
    with guard.shield():
        send(signal.SIGINT)  # held: finalising goes on
        assert guard.received == signal.SIGINT
        with pytest.raises(ProfilingTerminated):
            send(signal.SIGTERM)
    assert [r.getMessage() for r in caplog.records] == [
        "verlprof: SIGINT received while finalising reports; finishing first (send it again "
        "to abort)"]
    assert guard.restore() == signal.SIGTERM  # SIGTERM wins over an earlier Ctrl-C


def test_pass_on_ctrl_c_raises_keyboard_interrupt(handlers):
    guard = SignalGuard()
    guard.install()
    with guard.shield():
        send(signal.SIGINT)
    assert guard.restore() == signal.SIGINT
    with pytest.raises(KeyboardInterrupt):
        guard.pass_on()
    guard.pass_on()  # once only: nothing is left to pass on


def test_pass_on_sigterm_runs_the_previous_handler_then_exits_143(handlers):
    seen = []
    signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    guard = SignalGuard()
    guard.install()
    installed(guard)
    with guard.shield():
        send(signal.SIGTERM)
    assert guard.restore() == signal.SIGTERM and seen == []  # held, not yet passed on
    with pytest.raises(SystemExit) as info:
        guard.pass_on()
    assert info.value.code == 143 and seen == [signal.SIGTERM]


def test_pass_on_sigterm_with_the_default_handler_exits_143_without_killing(handlers):
    guard = SignalGuard()
    guard.install()
    with guard.shield():
        send(signal.SIGTERM)
    guard.restore()
    with pytest.raises(SystemExit) as info:
        guard.pass_on()
    assert info.value.code == 143


def test_a_held_signal_comes_due_after_hold_s_and_then_aborts(handlers, caplog):
    guard = SignalGuard(hold_s=0.3)
    guard.install()
    installed(guard)
    caplog.set_level(logging.WARNING, logger="verlprof")
    started = time.monotonic()
    with pytest.raises(ProfilingTerminated) as info, guard.shield():
        send(signal.SIGTERM)  # held
        assert guard.received == signal.SIGTERM
        time.sleep(30)  # a finalise that never ends: the held signal wakes it
    assert time.monotonic() - started < 10
    assert guard.cut_short(info.value) == ("finalize cut short by SIGTERM, held 0.3s "
                                           "(finalize_timeout_s)")
    assert isinstance(guard.interruption(), ProfilingTerminated)
    assert "for at most 0.3s" in caplog.records[0].getMessage()
    assert guard.restore() == signal.SIGTERM


def test_a_held_signal_is_acted_on_when_finalising_ends_first(handlers):
    guard = SignalGuard(hold_s=0.3)
    guard.install()
    with guard.shield():
        send(signal.SIGINT)
    time.sleep(0.6)  # the timer was cancelled with the shield: nothing is delivered again
    assert guard.restore() == signal.SIGINT
    with pytest.raises(KeyboardInterrupt):
        guard.pass_on()


def test_cut_short_re_raises_an_interrupt_that_is_not_the_guards(handlers):
    guard = SignalGuard(hold_s=1)
    with pytest.raises(KeyboardInterrupt):
        guard.cut_short(KeyboardInterrupt())
