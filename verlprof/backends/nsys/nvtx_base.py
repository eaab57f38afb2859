"""The NVTX contract shared by the emitters: domain, capture range name, and the emitter base.

Kept apart from :mod:`verlprof.backends.nsys.nvtx` (which chooses an emitter) so that the
bindings (:mod:`~verlprof.backends.nsys.nvtx_ctypes`) build on it without importing the chooser.
"""

from __future__ import annotations

import threading
from typing import Any, Dict

from verlprof.records import NVTX_DOMAIN

INJECTION_ENV = "NVTX_INJECTION64_PATH"
"""Set by nsys (and other NVTX tools) in the processes they profile."""

FORCE_ENV = "VERLPROF_NVTX"
"""``0``/``off``: always the null emitter; ``1``/``on``: real even without a profiler."""

BACKEND_ENV = "VERLPROF_NVTX_BACKEND"
"""``auto`` (default), ``nvtx``, ``ctypes`` or ``torch``: which binding a real emitter uses."""

LIB_ENV = "VERLPROF_NVTX_LIB"
"""Explicit path of an NVTX shared library for the ctypes binding."""

MAX_REGISTERED = 4096
"""Distinct names registered per domain; later new names are sent as ASCII messages."""

COLOR_ARGB = 0xFF76B900
"""Colour of verlprof's ranges in the nsys timeline (NVIDIA green, ARGB)."""


def cached(cache: Dict[Any, Any], key: Any, lock: threading.Lock, make) -> Any:
    """``cache[key]``, made once under ``lock`` (emitters are shared across threads)."""
    value = cache.get(key)
    if value is None:
        with lock:
            value = cache.get(key)
            if value is None:
                value = cache[key] = make()
    return value


class NullEmitter:
    """No profiler attached: every call is a no-op returning ``None``."""

    enabled = False
    backend = "null"

    def range_start(self, name: str, domain: str = NVTX_DOMAIN) -> Any:
        return None

    def range_end(self, handle: Any) -> None:
        return None

    def __repr__(self) -> str:
        return "NullEmitter()"


class NvtxEmitter:
    """Base of the real emitters. ``range_end(None)`` is always a no-op."""

    enabled = True
    backend = "?"
    releases_gil = False
    """True when a call lets other Python threads run (ctypes): a slow range end can then be
    moved off the caller's thread (:mod:`verlprof.backends.nsys.capture_range`)."""

    def range_start(self, name: str, domain: str = NVTX_DOMAIN) -> Any:  # pragma: no cover
        raise NotImplementedError

    def range_end(self, handle: Any) -> None:  # pragma: no cover
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(backend={self.backend!r})"
