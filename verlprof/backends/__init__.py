"""One folder per profiling tool; :func:`get_backend` gives the :class:`Backend` of a name.

Each ``verlprof/backends/<tool>/backend.py`` defines ``BACKEND``: planning (launch argv and
environment), preflight, the worker-side capture, the report reader and next-step hints. Heavy
parts (torch, ctypes, sqlite readers) load on first use, so listing the backends is cheap.
"""

from __future__ import annotations

from typing import Dict

from verlprof.backends.base import Backend, Capture, Launch
from verlprof.backends.nsys.backend import BACKEND as NSYS
from verlprof.backends.rocprof_sys.backend import BACKEND as ROCPROF_SYS
from verlprof.backends.torch.backend import BACKEND as TORCH

BACKENDS: Dict[str, Backend] = {b.name: b for b in (NSYS, TORCH, ROCPROF_SYS)}
"""Every backend by its ``trainer.profiler.tool`` name."""


def get_backend(name: str) -> Backend:
    """The backend called ``name`` (ValueError listing the known ones otherwise)."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}") from None


__all__ = ["BACKENDS", "Backend", "Capture", "Launch", "get_backend"]
