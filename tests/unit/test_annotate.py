"""``@annotate``: the wrapper behaves like the method it wraps (signature, defaults, errors),
costs no test while no window of the process is live (the passthrough code, benchmarks P1), and
hands every argument to the session while one is (the checking code, swapped by
``set_active``), also for classes Ray ships by value and under other decorators."""

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
    def generic(*args):  # no explicit self: falls back to the generic wrapper
        return args[1:]


def test_the_phase_is_the_method_name_unless_named():
    assert _Worker.plain.__verlprof_phase__ == ("actor", "plain")
    assert _Worker.positional_only.__verlprof_phase__ == ("actor", "po")
    assert _Worker.generic.__verlprof_phase__ == ("rollout", "generic")


def test_exact_wrapper_keeps_signature_defaults_and_errors():
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


def test_exact_wrapper_active_path_hands_every_argument_to_the_session():
    w = _Worker()
    w._verlprof_session = session = _Session()
    set_active(w, True)
    try:
        assert w.plain(1, 5, 6, c=3, e=10) == (1, 5, (6,), 3, 4, {"e": 10})
        assert w.positional_only(7) == (7, [])
        assert w.generic(1) == (1,)
    finally:
        set_active(w, False)
    assert session.calls == [("actor", "plain", (1, 5, 6), {"c": 3, "d": 4, "e": 10}),
                             ("actor", "po", (7, []), {}), ("rollout", "generic", (1,), {})]


def test_only_the_active_worker_of_a_process_goes_through_its_session():
    """While some window is live every wrapper runs its checking code, which still looks at its
    own object's flag: a second worker in the same process keeps running bare. Once the last
    window closes every wrapper is back to the passthrough code, with no test at all."""
    active, idle = _Worker(), _Worker()
    active._verlprof_session, idle._verlprof_session = _Session(), _Session()
    passthrough, checking = _Worker.plain.__verlprof_codes__
    assert _Worker.plain.__code__ is passthrough and _Worker.generic.__code__ is \
        _Worker.generic.__verlprof_codes__[0]
    set_active(active, True)
    try:
        assert _Worker.plain.__code__ is checking
        active.plain(1, c=3)
        idle.plain(1, c=3)
        idle.generic(2)
    finally:
        set_active(active, False)
    active.plain(1, c=3)
    assert [c[1] for c in active._verlprof_session.calls] == ["plain"]
    assert idle._verlprof_session.calls == []
    assert _Worker.plain.__code__ is passthrough


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
print(result, session.calls, shipped.update_critic.__code__ is
      shipped.update_critic.__verlprof_codes__[0])
"""


def test_a_class_shipped_by_value_is_adopted_when_its_worker_becomes_active():
    """Ray ships a class defined in the driver's ``__main__`` (or in a function) by value:
    the worker process rebuilds it without running ``annotate``, so ``set_active`` finds its
    wrappers on the class and swaps them too."""
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
    assert child.stdout.decode().split() == ["3", "[['critic',", "'update_critic',", "[3]]]",
                                             "True"]


def test_a_decorator_over_annotate_keeps_its_own_code():
    """A decorator stacked on an annotated method (Ray puts its tracing wrappers on its
    subclass of the actor class) copies the wrapper's ``__dict__``: only annotate's own wrapper,
    found down ``__wrapped__``, changes code."""
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

    outer_code = Traced.update_actor.__code__
    assert hasattr(Traced.update_actor, "__verlprof_codes__")  # copied by functools.wraps
    worker = Traced()
    worker._verlprof_session = session = _Session()
    set_active(worker, True)
    try:
        assert worker.update_actor(5) == 5
        assert Traced.update_actor.__code__ is outer_code
    finally:
        set_active(worker, False)
    assert session.calls == [("actor", "update_actor", (5,), {})]
