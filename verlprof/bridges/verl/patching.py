"""Replace a method of one of verl's classes once per process, keeping the original reachable."""

from __future__ import annotations

import functools
from typing import Any, Callable

MARK = "__verlprof_bridge__"
"""Set on every function the bridge put in place of one of verl's."""


def wrap_once(cls: Any, name: str, make: Callable[[Callable], Callable]) -> bool:
    """Set ``cls.<name>`` to ``make(original)`` unless the bridge did so already. Returns
    whether it changed anything. The wrapper carries the original's name and ``__wrapped__``."""
    original = getattr(cls, name)
    if getattr(original, MARK, False):
        return False
    wrapper = functools.wraps(original)(make(original))
    setattr(wrapper, MARK, True)
    setattr(cls, name, wrapper)
    return True
