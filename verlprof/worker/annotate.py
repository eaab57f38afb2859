"""``@annotate(role)``: a worker method becomes phase ``<role>/<phase>``, at no cost when off.

While no worker of the process has a window armed or open (always, on a rank that is not
profiled) an annotated method costs one extra Python call and nothing else: no flag test, no
lookup. Each wrapper carries two code objects over one closure, and :func:`set_active` swaps
them when the process's first window is armed and when its last one closes. The swap changes
only ``__code__``: Ray resolved the methods once, when it loaded the actor class, and keeps
those function objects.
"""

from __future__ import annotations

import functools
import threading
import types
import weakref
from typing import Any, Callable, Dict, Optional, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_ACTIVE_OWNERS: set = set()
"""``id()`` of every worker of this process with a window armed or open."""

_WRAPPERS: weakref.WeakSet[Callable] = weakref.WeakSet()
"""Every ``annotate`` wrapper of this process. Each holds two code objects for the same
closure, ``__verlprof_codes__ = (passthrough, checking)``: while no worker of the process has a
window armed or open (always, on an unselected rank) the wrappers run the passthrough, a plain
call of the method with no test at all; :func:`set_active` swaps every wrapper to the checking
code and back. Ray resolved the methods once, so the function objects must stay the same:
only their ``__code__`` changes (benchmarks/p1_annotate.py)."""
_LIVE_LOCK = threading.Lock()


def set_active(owner: Any, active: bool) -> None:
    """Route ``owner``'s ``annotate``d methods through its session (True) or straight to the
    method (False)."""
    owner._verlprof_active = active
    with _LIVE_LOCK:
        was_live = bool(_ACTIVE_OWNERS)
        if active:
            _ACTIVE_OWNERS.add(id(owner))
            adopted = _adopt(type(owner))
        else:
            _ACTIVE_OWNERS.discard(id(owner))
            adopted = []
        live = bool(_ACTIVE_OWNERS)
        for wrapper in list(_WRAPPERS) if live != was_live else adopted:
            wrapper.__code__ = wrapper.__verlprof_codes__[live]  # type: ignore[union-attr]


def _adopt(cls: type) -> list:
    """Register the wrappers of ``cls`` that this process did not decorate itself: a class
    that Ray (cloudpickle) ships by value, e.g. one defined in the driver's ``__main__``, is
    rebuilt in the worker without passing through :func:`annotate`. Returns the new ones.

    Other decorators around a wrapper (Ray's own tracing wrappers on its subclass of the actor
    class) copy its ``__dict__``, ``__verlprof_codes__`` included, with ``functools.wraps``: a
    function is ours only when its current code is one of its two codes. Their
    ``__wrapped__`` chain leads to ours."""
    found = []
    for klass in cls.__mro__:
        for value in vars(klass).values():
            for _ in range(8):  # a bounded walk down __wrapped__
                if not isinstance(value, types.FunctionType):
                    break
                if value.__code__ in getattr(value, "__verlprof_codes__", ()):
                    if value not in _WRAPPERS:
                        _WRAPPERS.add(value)
                        found.append(value)
                    break
                value = getattr(value, "__wrapped__", None)
    return found


def _register(checking: Callable, passthrough: Any) -> Callable:
    """``passthrough`` (the function object Ray will hold) with both codes, current one set."""
    passthrough.__verlprof_codes__ = (passthrough.__code__, checking.__code__)
    with _LIVE_LOCK:
        passthrough.__code__ = passthrough.__verlprof_codes__[bool(_ACTIVE_OWNERS)]
        _WRAPPERS.add(passthrough)
    return passthrough


def annotate(role: str, phase: Optional[str] = None) -> Callable[[F], F]:
    """Mark a worker method as phase ``<role>/<phase>`` (phase defaults to the method name).

    Inside an open window the call is wrapped in an NVTX range (nsys) or a ``record_function``
    (torch); in discrete mode a planned phase opens its own window. Otherwise the method runs
    as is: while no window of this process is armed or open, the only cost is this wrapper's
    call, with no test at all.
    """

    import inspect

    def generic(fn: Callable, name: str) -> Callable:
        def wrapper(self, *args, **kwargs):
            if self._verlprof_active:
                return self._verlprof_session.run_phase(role, name, fn, self, args, kwargs)
            return fn(self, *args, **kwargs)

        checking = wrapper

        def wrapper(self, *args, **kwargs):  # type: ignore[no-redef]  # noqa: F811 - the twin
            return fn(self, *args, **kwargs)
            role, name  # noqa: B018 - unreachable: keeps the checking code's free variables

        return _register(checking, wrapper)

    def exact(fn: Callable, name: str) -> Optional[Callable]:
        """A wrapper with ``fn``'s own parameters, so that the off path forwards them with a
        plain call: ``*args, **kwargs`` forwarding costs several times a bare method call on
        CPython (benchmarks/p1_annotate.py). None when ``fn``'s signature cannot be copied."""
        if not inspect.isfunction(fn):
            return None
        try:
            params = list(inspect.signature(fn, follow_wrapped=False).parameters.values())
        except (TypeError, ValueError):
            return None
        kinds = inspect.Parameter
        if not params or params[0].kind not in (kinds.POSITIONAL_ONLY,
                                                kinds.POSITIONAL_OR_KEYWORD) \
                or any(p.name.startswith("_verlprof_") for p in params):
            return None
        bare = inspect.Signature([p.replace(default=kinds.empty, annotation=kinds.empty)
                                  for p in params])
        this, rest = params[0].name, params[1:]
        positional = [p.name for p in rest if p.kind in (kinds.POSITIONAL_ONLY,
                                                         kinds.POSITIONAL_OR_KEYWORD)]
        positional += [f"*{p.name}" for p in rest if p.kind == kinds.VAR_POSITIONAL]
        keyword = [f"{p.name}={p.name}" for p in rest if p.kind == kinds.KEYWORD_ONLY]
        keyword += [f"**{p.name}" for p in rest if p.kind == kinds.VAR_KEYWORD]
        as_dict = [f"{p.name!r}: {p.name}" for p in rest if p.kind == kinds.KEYWORD_ONLY]
        as_dict += [f"**{p.name}" for p in rest if p.kind == kinds.VAR_KEYWORD]
        call = f"_verlprof_fn({', '.join([this, *positional, *keyword])})"
        source = (  # closure variables, not globals: LOAD_DEREF is the cheapest load
            "def make(_verlprof_fn, _verlprof_role, _verlprof_name):\n"
            f"    def wrapper{bare}:\n"
            f"        if {this}._verlprof_active:\n"
            f"            return {this}._verlprof_session.run_phase(_verlprof_role,"
            f" _verlprof_name, _verlprof_fn, {this}, ({''.join(a + ', ' for a in positional)}),"
            f" {{{', '.join(as_dict)}}})\n"
            f"        return {call}\n"
            "    checking = wrapper\n"
            f"    def wrapper{bare}:\n"
            f"        return {call}\n"
            "        _verlprof_role, _verlprof_name\n"  # unreachable: same free variables
            "    return checking, wrapper\n")
        scope: Dict[str, Any] = {}
        exec(compile(source, f"<verlprof.worker.annotate {fn.__qualname__}>", "exec"), scope)  # noqa: S102
        wrapper = _register(*scope["make"](fn, role, name))
        wrapper.__defaults__ = fn.__defaults__
        wrapper.__kwdefaults__ = fn.__kwdefaults__
        return wrapper

    def decorate(fn: F) -> F:
        name = phase or fn.__name__
        wrapper = functools.wraps(fn)(exact(fn, name) or generic(fn, name))
        wrapper.__verlprof_phase__ = (role, name)  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate
