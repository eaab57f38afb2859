"""``@annotate``: the wrapper behaves like the method it wraps (signature, defaults, errors),
runs the method as is while its object is not active, and hands every argument to the session
while it is (``set_active``), also for classes Ray ships by value and under other
decorators."""

import inspect

import pytest

from verlprof.worker import ProfilingWorkerMixin, annotate, set_active


class _Session:
    def __init__(self):
        self.calls = []

    def run_phase(self, role, phase, fn, owner, args, kwargs):
        self.calls.append((role, phase, args, kwargs))
        return fn(owner, *args, **kwargs)


class _Worker(ProfilingWorkerMixin):
    @annotate("actor")
    def plain(self, a, b=2, *rest, c, d=4, **extra):
        return (a, b, rest, c, d, extra)

    @annotate("actor", phase="po")
    def positional_only(self, a, /, b=[]):  # noqa: B006 - the default must be the same object
        return a, b

    @annotate("rollout")
    def generic(*args):  # no explicit self
        return args[1:]


def test_the_phase_is_the_method_name_unless_named():
    assert _Worker.plain.__verlprof_phase__ == ("actor", "plain")
    assert _Worker.positional_only.__verlprof_phase__ == ("actor", "po")
    assert _Worker.generic.__verlprof_phase__ == ("rollout", "generic")


def test_the_wrapper_keeps_signature_defaults_and_errors():
    w = _Worker()
    assert w.plain(1, c=3) == (1, 2, (), 3, 4, {})
    assert w.plain(1, 5, 6, 7, c=3, d=9, e=10) == (1, 5, (6, 7), 3, 9, {"e": 10})
    assert w.positional_only(1)[1] is _Worker.positional_only.__wrapped__.__defaults__[0]
    assert w.generic(1, 2) == (1, 2)
    assert inspect.signature(_Worker.plain) == inspect.signature(_Worker.plain.__wrapped__)
    assert _Worker.plain.__name__ == "plain" and _Worker.plain.__verlprof_phase__ == \
        ("actor", "plain")
    with pytest.raises(TypeError, match="plain"):
        w.plain(1)  # c is required
    with pytest.raises(TypeError):
        w.positional_only(a=1)


def test_the_active_path_hands_every_argument_to_the_session():
    w = _Worker()
    w._verlprof_session = session = _Session()
    set_active(w, True)
    try:
        assert w.plain(1, 5, 6, c=3, e=10) == (1, 5, (6,), 3, 4, {"e": 10})
        assert w.positional_only(7) == (7, [])
        assert w.generic(1) == (1,)
    finally:
        set_active(w, False)
    assert session.calls == [("actor", "plain", (1, 5, 6), {"c": 3, "e": 10}),
                             ("actor", "po", (7,), {}), ("rollout", "generic", (1,), {})]


def test_only_the_active_worker_of_a_process_goes_through_its_session():
    """A second worker in the same process keeps running bare while the first is active, and
    the first runs bare again once it is not."""
    active, idle = _Worker(), _Worker()
    active._verlprof_session, idle._verlprof_session = _Session(), _Session()
    set_active(active, True)
    try:
        active.plain(1, c=3)
        idle.plain(1, c=3)
        idle.generic(2)
    finally:
        set_active(active, False)
    active.plain(1, c=3)
    assert [c[1] for c in active._verlprof_session.calls] == ["plain"]
    assert idle._verlprof_session.calls == []


_SHIPPED_CHILD = """
import sys, ray.cloudpickle as cloudpickle
from verlprof.worker import set_active
shipped = cloudpickle.loads(sys.stdin.buffer.read())
class Session:
    calls = []
    def run_phase(self, role, phase, fn, owner, args, kwargs):
        self.calls.append([role, phase, list(args)])
        return fn(owner, *args, **kwargs)
worker = shipped()
worker._verlprof_session = session = Session()
set_active(worker, True)
result = worker.update_critic(3)
set_active(worker, False)
worker.update_critic(4)
print(result, session.calls)
"""


def test_a_class_shipped_by_value_goes_through_its_session_when_active():
    """Ray ships a class defined in the driver's ``__main__`` (or in a function) by value:
    the worker process rebuilds it, wrappers and all, without running ``annotate``."""
    import subprocess
    import sys

    import ray.cloudpickle as cloudpickle

    class Local(ProfilingWorkerMixin):
        @annotate("critic")
        def update_critic(self, batch):
            return batch

    child = subprocess.run([sys.executable, "-c", _SHIPPED_CHILD],
                           input=cloudpickle.dumps(Local), capture_output=True, timeout=120,
                           check=False)
    assert child.returncode == 0, child.stderr.decode()[-2000:]
    assert child.stdout.decode().split() == ["3", "[['critic',", "'update_critic',", "[3]]]"]


def test_a_decorator_over_annotate_keeps_its_own_code():
    """A decorator stacked on an annotated method (Ray puts its tracing wrappers on its
    subclass of the actor class) keeps the phase and the session's view of the call."""
    import functools

    def traced(fn):
        @functools.wraps(fn)
        def tracing(self, *args, **kwargs):
            return fn(self, *args, **kwargs)

        return tracing

    class Traced(ProfilingWorkerMixin):
        @traced
        @annotate("actor")
        def update_actor(self, batch):
            return batch

    assert Traced.update_actor.__verlprof_phase__ == ("actor", "update_actor")
    worker = Traced()
    worker._verlprof_session = session = _Session()
    set_active(worker, True)
    try:
        assert worker.update_actor(5) == 5
    finally:
        set_active(worker, False)
    assert session.calls == [("actor", "update_actor", (5,), {})]
