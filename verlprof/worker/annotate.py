"""``@annotate(role)``: a worker method becomes phase ``<role>/<phase>``, at little cost when off.

The wrapper tests one flag of its object, ``_verlprof_active`` (False on the mixin class, so an
unselected rank never sets it), and otherwise calls the method. Off, that costs under a hundred
ns per call here: about 1/25 of what verl's own ``DistProfiler.annotate`` adds when profiling is
off (benchmarks/p1_annotate.py, the P1 goal: at most 1/20).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def set_active(owner: Any, active: bool) -> None:
    """Route ``owner``'s ``annotate``d methods through its session (True) or straight to the
    method (False)."""
    owner._verlprof_active = active


def annotate(role: str, phase: Optional[str] = None) -> Callable[[F], F]:
    """Mark a worker method as phase ``<role>/<phase>`` (phase defaults to the method name).

    Inside an open window the call is wrapped in an NVTX range (nsys) or a ``record_function``
    (torch); in discrete mode a planned phase opens its own window. Otherwise the method runs
    as is, after one flag test.
    """

    def decorate(fn: F) -> F:
        name = phase or fn.__name__

        # ``*args`` with the owner in it, not ``self, *args``: the call then hands the tuple
        # on as it came instead of building two, about 40% of what the wrapper costs off
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            owner = args[0]
            if owner._verlprof_active:
                return owner._verlprof_session.run_phase(role, name, fn, owner, args[1:], kwargs)
            return fn(*args, **kwargs)

        wrapper.__verlprof_phase__ = (role, name)  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate
