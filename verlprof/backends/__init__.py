"""One folder per profiling tool; :func:`get_backend` gives the :class:`Backend` of a name.

Each ``verlprof/backends/<tool>/backend.py`` defines ``BACKEND``: preflight, the worker-side
capture, the report reader and next-step hints (the launch argv is the planner's:
:mod:`verlprof.plan.tool_launch`). Heavy parts (torch, ctypes, sqlite readers) load on first
use, so listing the backends is cheap.

A backend's module is imported the first time it is asked for (:func:`get_backend`), and
``BACKENDS``, ``Backend`` and ``Capture`` when first named: ``verlprof report``
imports :mod:`verlprof.backends.reading` (which runs this file) and reads nsys reports only, so
it never pays for the plan, the config schema or the other tools' modules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Dict

if TYPE_CHECKING:
    from verlprof.backends.base import Backend, Capture

_MODULES: Dict[str, str] = {
    "nsys": "verlprof.backends.nsys.backend",
    "torch": "verlprof.backends.torch.backend",
    "rocprof_sys": "verlprof.backends.rocprof_sys.backend",
}
"""Every backend's module by its ``trainer.profiler.tool`` name (each defines ``BACKEND``)."""


def get_backend(name: str) -> Backend:
    """The backend called ``name`` (ValueError listing the known ones otherwise)."""
    module = _MODULES.get(name)
    if module is None:
        raise ValueError(f"unknown backend {name!r}; known: {', '.join(_MODULES)}")
    return importlib.import_module(module).BACKEND


def __getattr__(attr: str) -> Any:
    """``BACKENDS`` (every backend by name, all imported) and the base types, on first use."""
    if attr == "BACKENDS":
        return {name: get_backend(name) for name in _MODULES}
    if attr in ("Backend", "Capture"):
        from verlprof.backends import base

        return getattr(base, attr)
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


__all__ = ["BACKENDS", "Backend", "Capture", "get_backend"]
