"""The bridge's only ways of changing verl's objects, each recorded so that :func:`undo_all`
puts back the identical original object (``uninstall()``)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Tuple, Union

MARK = "__verlprof_bridge__"
"""Set on every function the bridge put in place of one of verl's."""
ABSENT = object()
"""The original of an attribute the owner did not hold itself (inherited, or a new name)."""


@dataclass(frozen=True)
class Patch:
    """One change: ``owner.<name>`` (a module's globals: ``owner[name]``) held ``original``."""

    owner: Any
    name: str
    original: Any


_APPLIED: List[Patch] = []
"""Every change still in place in this process, oldest first."""


def _put(owner: Union[Dict[str, Any], Any], name: str, value: Any) -> None:
    if isinstance(owner, dict):
        original = owner.get(name, ABSENT)
        owner[name] = value
    else:  # the owner's own entry: an inherited method is shadowed, and unshadowed on undo
        original = owner.__code__ if name == "__code__" else vars(owner).get(name, ABSENT)
        setattr(owner, name, value)
    _APPLIED.append(Patch(owner=owner, name=name, original=original))


def wrap_once(cls: Any, name: str, make: Callable[[Callable], Callable]) -> bool:
    """Set ``cls.<name>`` to ``make(original)`` unless the bridge did so already. Returns
    whether it changed anything. The wrapper carries the original's name and ``__wrapped__``."""
    original = getattr(cls, name)
    if getattr(original, MARK, False):
        return False
    wrapper = functools.wraps(original)(make(original))
    setattr(wrapper, MARK, True)
    _put(cls, name, wrapper)
    return True


def replace_global(namespace: Dict[str, Any], name: str, value: Any) -> None:
    """Set the module global ``name`` (``namespace`` is a function's ``__globals__``)."""
    _put(namespace, name, value)


def swap_code(function: Callable, code: Any, key: str, replacement: Callable) -> None:
    """Give ``function`` (this very object) ``code``: a trampoline's that awaits
    :func:`run_rerouted` for ``key``, which runs ``replacement``. Only for a function no
    wrapper can reach: Ray's actor method executors hold the function objects of an actor
    class from the moment the worker loaded it, so a class attribute set later is never called."""
    _REROUTED[key] = replacement
    _put(function, "__code__", code)


_REROUTED: Dict[str, Callable] = {}


async def run_rerouted(key: str, args: tuple, kwargs: dict) -> Any:
    return await _REROUTED[key](*args, **kwargs)


def applied() -> Tuple[Patch, ...]:
    return tuple(_APPLIED)


def undo_all() -> int:
    """Put every original back, newest change first; how many changes were undone."""
    undone = len(_APPLIED)
    _REROUTED.clear()
    while _APPLIED:
        patch = _APPLIED.pop()
        owner, name, original = patch.owner, patch.name, patch.original
        if isinstance(owner, dict):
            owner.pop(name) if original is ABSENT else owner.__setitem__(name, original)
        elif original is ABSENT:
            delattr(owner, name)
        else:
            setattr(owner, name, original)
    return undone
