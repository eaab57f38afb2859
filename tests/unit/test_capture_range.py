"""Capture windows end off the caller's thread (backends/nsys/capture_range.py): a close
returns at once, the next open and collection wait for it, and order is kept. The emitter here
records calls and blocks in ``range_end`` the way nsys 2022.4 blocks (with the GIL released,
as the ctypes binding does); the real binding under real nsys is measured in
benchmarks/p5_stall.py and used by every nsys integration test."""

from __future__ import annotations

import threading
import time

import pytest

from verlprof.backends.nsys import capture_range


class BlockingEmitter:
    enabled = True
    releases_gil = True

    def __init__(self, end_s: float):
        self.end_s = end_s
        self.calls = []
        self.ended = threading.Event()

    def range_start(self, name, domain):
        self.calls.append(("start", name, domain))
        return len(self.calls)

    def range_end(self, handle):
        time.sleep(self.end_s)  # nsys stops collection inside this call
        self.calls.append(("end", handle, threading.current_thread().name))
        self.ended.set()


@pytest.fixture
def emitter(monkeypatch):
    em = BlockingEmitter(end_s=0.3)
    monkeypatch.setattr(capture_range, "_emitter", em)
    yield em
    capture_range.settle()


def test_close_returns_before_nsys_has_stopped_and_settle_waits_for_it(emitter):
    handle = capture_range.open_window()
    capture_range.close_window(handle)
    assert not emitter.ended.is_set()  # the caller did not wait the 0.3 s
    assert capture_range.settle(5.0)
    assert emitter.calls[-1] == ("end", 1, "verlprof-capture-end")


def test_the_next_window_opens_only_after_the_previous_one_ended(emitter):
    capture_range.close_window(capture_range.open_window())
    capture_range.open_window()
    kinds = [c[0] for c in emitter.calls]
    assert kinds == ["start", "end", "start"]


def test_a_binding_that_holds_the_gil_ends_on_the_callers_thread(emitter):
    emitter.releases_gil = False
    capture_range.close_window(capture_range.open_window())
    assert emitter.calls[-1] == ("end", 1, threading.current_thread().name)


def test_no_window_without_a_profiler(monkeypatch):
    class Null:
        enabled = False

    monkeypatch.setattr(capture_range, "_emitter", Null())
    assert capture_range.open_window() is None
    capture_range.close_window(None)
