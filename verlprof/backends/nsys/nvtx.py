"""NVTX adapter: ranges that nsys 2022.4 and current nsys both record, free when unprofiled.

Use :func:`get_emitter` once per call site (it is cached) and call its methods::

    em = get_emitter()
    h = em.range_start("actor/update_actor")   # domain "verlprof"
    ...
    em.range_end(h)                            # may run on another thread

    cap = capture_open()                       # opens an nsys capture window
    ...
    capture_close(cap)                         # closes it: one report per window

When is it real?
    nsys (and the other NVTX tools) load their collector through the variable
    ``NVTX_INJECTION64_PATH``, which ``nsys profile`` sets in every process it launches. No such
    variable means no tool can receive the events, so :func:`get_emitter` returns
    :class:`NullEmitter`, whose methods do nothing (a Python call that returns ``None``). The
    decision is taken at first use and cached; :func:`reset_emitter` forgets it (tests).
    ``VERLPROF_NVTX=0`` forces the null object, ``VERLPROF_NVTX=1`` forces a real emitter even
    without the variable. ``VERLPROF_NVTX_BACKEND=nvtx|ctypes|torch`` picks a binding.

Which binding, and why (checked against the real nsys 2022.4.2.1 on a GPU-less machine):
    1. ``nvtx`` package, versions < 0.2.12 (``nvtx==0.2.11`` is what verlprof pins). Its domain
       API (``nvtx.get_domain(...)``, ``Domain.get_event_attributes``, ``nvtx._lib``
       ``start_range``/``end_range``/``push_range``/``pop_range``/``mark``) records start/end,
       push/pop and marks in domain ``verlprof`` under nsys 2022.4; the exported sqlite shows a
       ``NvtxDomainCreate`` event (type 75) named ``verlprof`` and every range with that
       ``domainId``. 0.2.12+ first asks ``nvtxDomainIsEnabled()``, which nsys 2022.4 does not
       implement (the call returns 0 there), so those versions record nothing under 2022.4;
       current nsys answers it, and then 0.2.12+ works too.
    2. ctypes into ``libnvtx3interop.so.1`` (wheel ``nvidia-nvtx-cu12``: ``nvidia/nvtx/lib``,
       or a CUDA toolkit's ``lib``/``lib64``) or ``libnvToolsExt.so.1``: the same domain calls
       (``nvtxDomainCreateA``, ``nvtxDomainRegisterStringA``, ``nvtxDomainRangeStartEx``...)
       with an ``nvtxEventAttributes_t`` built here. Verified under nsys 2022.4 too (in the
       CUDA 13 library ``nvtxDomainIsEnabled`` returns 0 there, but the range calls record).
       Chosen when the package is missing or is 0.2.12+.
    3. the ``nvtx`` package 0.2.12+ (fine on current nsys), then ``torch.cuda.nvtx`` on CUDA
       builds of torch. torch has no domain API: its ranges land in the default domain, so a
       ``-p VERLPROF_CAPTURE@verlprof`` capture range does not match them (nothing else here
       uses torch).

Strings are *registered* (``nvtxDomainRegisterStringA``). nsys matches registered strings
against ``-p NAME@domain`` even without ``NSYS_NVTX_PROFILER_REGISTER_ONLY=0``; ASCII messages
match only with it (both verified). Setting it in the workers stays the documented rule: it
costs nothing and covers other emitters (torch, plain ASCII). Past :data:`MAX_REGISTERED`
distinct names new names are sent as ASCII so an unbounded set of names cannot leak memory.

Capture windows: :func:`capture_open`/:func:`capture_close` are a start/end range named
:data:`CAPTURE_RANGE` in :data:`NVTX_DOMAIN`; start/end (unlike push/pop) may end on another
thread and still gives one report per window. Observed cost under nsys 2022.4 (2 cores):
opening a window blocks the calling thread ~0.1 s, closing it ~0.7 s, closing the last window
of ``--capture-range-end=repeat:N`` ~1.2 s (nsys then imports all N reports).
"""

from __future__ import annotations

import logging
import os
import threading
from contextlib import contextmanager
from typing import Any, Dict, Iterator, Optional

from verlprof.backends.nsys.nvtx_base import (  # noqa: F401 - re-exported: the NVTX contract
    BACKEND_ENV,
    COLOR_ARGB,
    FORCE_ENV,
    INJECTION_ENV,
    LIB_ENV,
    MAX_REGISTERED,
    NullEmitter,
    NvtxEmitter,
    cached,
)
from verlprof.backends.nsys.nvtx_ctypes import make_ctypes_emitter, nvtx_library_candidates
from verlprof.records import CAPTURE_RANGE, NVTX_DOMAIN  # noqa: F401 - the NVTX contract

_LOG = logging.getLogger(__name__)


class _PackageEmitter(NvtxEmitter):
    """The ``nvtx`` PyPI package's domain API (cython, registered strings)."""

    backend = "nvtx"

    def __init__(self, nvtx_module: Any):
        self._nvtx = nvtx_module
        self._lib = nvtx_module._lib
        self._domains: Dict[str, Any] = {}
        self._attrs: Dict[tuple, Any] = {}
        self._lock = threading.Lock()

    def _domain(self, domain: str) -> Any:
        return cached(self._domains, domain, self._lock, lambda: self._nvtx.get_domain(domain))

    def _attr(self, name: str, domain: str):
        key = (domain, name)
        entry = self._attrs.get(key)
        if entry is None:
            d = self._domain(domain)
            if len(self._attrs) < MAX_REGISTERED:
                entry = (d.get_event_attributes(name, "blue"), d.handle)
                self._attrs[key] = entry
            else:  # past the bound: build without caching (nor the package's lru caches)
                msg = self._lib.RegisteredString(d.handle, name)
                entry = (self._lib.EventAttributes(msg, "blue"), d.handle)
        return entry

    def range_start(self, name: str, domain: str = NVTX_DOMAIN) -> Any:
        attr, handle = self._attr(name, domain)
        return self._lib.start_range(attr, handle)

    def range_end(self, handle: Any) -> None:
        if handle is not None:
            self._lib.end_range(handle)


class _TorchEmitter(NvtxEmitter):
    """``torch.cuda.nvtx`` (CUDA builds only). No domains: everything is in the default one."""

    backend = "torch"

    def __init__(self, torch_nvtx: Any):
        self._t = torch_nvtx

    def range_start(self, name: str, domain: str = NVTX_DOMAIN) -> Any:
        return self._t.range_start(name)

    def range_end(self, handle: Any) -> None:
        if handle is not None:
            self._t.range_end(handle)


def _package_version(nvtx_module: Any) -> tuple:
    try:
        from importlib.metadata import version

        text = version("nvtx")
    except Exception:  # noqa: BLE001 - no metadata: trust the module
        text = getattr(nvtx_module, "__version__", "0")
    return tuple(int("".join(filter(str.isdigit, p)) or 0) for p in text.split(".")[:3])


def _make_package() -> Optional[NvtxEmitter]:
    try:
        import nvtx as nvtx_module

        nvtx_module._lib.start_range  # noqa: B018 - the domain API must be there
    except (ImportError, AttributeError):
        return None
    return _PackageEmitter(nvtx_module)


def _make_torch() -> Optional[NvtxEmitter]:
    try:
        import torch

        if not hasattr(torch._C, "_nvtx"):
            return None
        return _TorchEmitter(torch.cuda.nvtx)
    except Exception:  # noqa: BLE001 - any import trouble: not available
        return None


def _package_is_old_enough() -> bool:
    try:
        import nvtx as nvtx_module
    except ImportError:
        return False
    return _package_version(nvtx_module) < (0, 2, 12)


def make_emitter(backend: str = "auto") -> NvtxEmitter:
    """A real emitter for ``backend`` (``auto``, ``nvtx``, ``ctypes``, ``torch``).

    Raises ``RuntimeError`` when the requested binding (or, for ``auto``, every binding) is
    unavailable. Does not look at the environment: :func:`get_emitter` does that.
    """
    makers = {"nvtx": _make_package, "ctypes": make_ctypes_emitter, "torch": _make_torch}
    if backend == "auto":
        order = ["nvtx", "ctypes"] if _package_is_old_enough() else ["ctypes", "nvtx"]
        order.append("torch")
    elif backend in makers:
        order = [backend]
    else:
        raise ValueError(f"{BACKEND_ENV}: unknown NVTX backend {backend!r} "
                         f"(expected auto, nvtx, ctypes or torch)")
    for name in order:
        em = makers[name]()
        if em is not None:
            return em
    raise RuntimeError(f"no NVTX binding available for backend {backend!r}: install "
                       "nvtx<0.2.12 or nvidia-nvtx-cu12")


_EMITTER: Optional[Any] = None
_EMITTER_LOCK = threading.Lock()


def profiler_attached() -> bool:
    """True when an NVTX tool (nsys) injected itself into this process."""
    return bool(os.environ.get(INJECTION_ENV))


def _choose() -> Any:
    force = os.environ.get(FORCE_ENV, "").strip().lower()
    if force in ("0", "off", "false", "no"):
        return NullEmitter()
    if not (profiler_attached() or force in ("1", "on", "true", "yes")):
        return NullEmitter()
    backend = os.environ.get(BACKEND_ENV, "auto").strip().lower() or "auto"
    try:
        return make_emitter(backend)
    except (RuntimeError, ValueError) as exc:
        _LOG.warning("verlprof: a profiler is attached but NVTX ranges are off: %s", exc)
        return NullEmitter()


def get_emitter() -> Any:
    """The process's emitter: real under a profiler, :class:`NullEmitter` otherwise (cached)."""
    global _EMITTER
    if _EMITTER is not None:
        return _EMITTER
    with _EMITTER_LOCK:
        if _EMITTER is None:
            _EMITTER = _choose()
        return _EMITTER


def reset_emitter() -> None:
    """Forget the cached emitter; the next :func:`get_emitter` decides again (tests)."""
    global _EMITTER
    with _EMITTER_LOCK:
        _EMITTER = None


def capture_open() -> Any:
    """Open an nsys capture window (range :data:`CAPTURE_RANGE` in :data:`NVTX_DOMAIN`)."""
    return get_emitter().range_start(CAPTURE_RANGE, NVTX_DOMAIN)


def capture_close(handle: Any) -> None:
    """Close the window ``handle`` from :func:`capture_open` (any thread; ``None``: no-op)."""
    if handle is not None:
        get_emitter().range_end(handle)


@contextmanager
def span(label: str, emitter: Any = None) -> Iterator[None]:
    """An NVTX range ``label`` in :data:`NVTX_DOMAIN` around the block (``emitter``: default
    the process's)."""
    emitter = emitter if emitter is not None else get_emitter()
    handle = emitter.range_start(label)
    try:
        yield
    finally:
        emitter.range_end(handle)


__all__ = ["CAPTURE_RANGE", "NVTX_DOMAIN", "NullEmitter", "NvtxEmitter", "capture_close",
           "capture_open", "get_emitter", "make_emitter", "nvtx_library_candidates",
           "profiler_attached", "reset_emitter", "span"]
