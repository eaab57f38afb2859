"""The ctypes NVTX binding: ``libnvtx3interop.so.1`` or ``libnvToolsExt.so.1``, no package.

Used when the ``nvtx`` package is missing or too new for nsys 2022.4 (see
:mod:`verlprof.backends.nsys.nvtx` for why): the same domain calls the package makes, with an
``nvtxEventAttributes_t`` built here.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import threading
from pathlib import Path
from typing import Any, Dict, List, Optional

from verlprof.backends.nsys.nvtx_base import (
    COLOR_ARGB,
    LIB_ENV,
    MAX_REGISTERED,
    NvtxEmitter,
    cached,
)
from verlprof.records import NVTX_DOMAIN


class _Payload(ctypes.Union):
    _fields_ = [("ullValue", ctypes.c_uint64), ("llValue", ctypes.c_int64),
                ("dValue", ctypes.c_double)]


class _Message(ctypes.Union):
    _fields_ = [("ascii", ctypes.c_char_p), ("registered", ctypes.c_void_p)]


class _EventAttributes(ctypes.Structure):
    """``nvtxEventAttributes_t`` (v2 layout, 48 bytes on 64-bit Linux)."""

    _fields_ = [("version", ctypes.c_uint16), ("size", ctypes.c_uint16),
                ("category", ctypes.c_uint32), ("colorType", ctypes.c_int32),
                ("color", ctypes.c_uint32), ("payloadType", ctypes.c_int32),
                ("reserved0", ctypes.c_int32), ("payload", _Payload),
                ("messageType", ctypes.c_int32), ("message", _Message)]


_NVTX_VERSION = 3
_NVTXCOLOR_ARGB_ARGB = 1
_NVTX_MESSAGE_TYPE_ASCII = 1
_NVTX_MESSAGE_TYPE_REGISTERED = 3


def _load_library(path: str) -> Optional[ctypes.CDLL]:
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return None
    needed = ("nvtxDomainCreateA", "nvtxDomainRegisterStringA", "nvtxDomainRangeStartEx",
              "nvtxDomainRangeEnd", "nvtxDomainRangePushEx", "nvtxDomainRangePop",
              "nvtxDomainMarkEx")
    if not all(hasattr(lib, n) for n in needed):
        return None
    vp, attr_p = ctypes.c_void_p, ctypes.POINTER(_EventAttributes)
    lib.nvtxDomainCreateA.argtypes, lib.nvtxDomainCreateA.restype = [ctypes.c_char_p], vp
    lib.nvtxDomainRegisterStringA.argtypes = [vp, ctypes.c_char_p]
    lib.nvtxDomainRegisterStringA.restype = vp
    lib.nvtxDomainRangeStartEx.argtypes = [vp, attr_p]
    lib.nvtxDomainRangeStartEx.restype = ctypes.c_uint64
    lib.nvtxDomainRangeEnd.argtypes, lib.nvtxDomainRangeEnd.restype = [vp, ctypes.c_uint64], None
    lib.nvtxDomainRangePushEx.argtypes = [vp, attr_p]
    lib.nvtxDomainRangePushEx.restype = ctypes.c_int
    lib.nvtxDomainRangePop.argtypes, lib.nvtxDomainRangePop.restype = [vp], ctypes.c_int
    lib.nvtxDomainMarkEx.argtypes, lib.nvtxDomainMarkEx.restype = [vp, attr_p], None
    return lib


def nvtx_library_candidates() -> List[str]:
    """Paths (or sonames) the ctypes binding tries, in order."""
    out: List[str] = []
    explicit = os.environ.get(LIB_ENV)
    if explicit:
        out.append(explicit)
    names = ("libnvtx3interop.so.1", "libnvToolsExt.so.1")
    try:
        import importlib.util

        spec = importlib.util.find_spec("nvidia.nvtx")
    except (ImportError, ValueError):
        spec = None
    for base in (spec.submodule_search_locations or []) if spec else []:
        out.extend(str(Path(base) / "lib" / n) for n in names)
    roots = [os.environ.get(v) for v in ("CUDA_HOME", "CUDA_PATH")]
    roots += ["/usr/local/cuda"] + sorted(glob.glob("/usr/local/cuda-*"), reverse=True)
    for root in filter(None, roots):
        for sub in ("lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"):
            out.extend(str(Path(root) / sub / n) for n in names)
    for short in ("nvtx3interop", "nvToolsExt"):
        found = ctypes.util.find_library(short)
        if found:
            out.append(found)
    return list(dict.fromkeys(out))  # first occurrence of each, in order


class _CtypesEmitter(NvtxEmitter):
    """ctypes into an NVTX shared library (domain API, registered strings)."""

    backend = "ctypes"
    releases_gil = True  # ctypes drops the GIL around each foreign call

    def __init__(self, lib: ctypes.CDLL):
        self._c = lib
        self._domains: Dict[str, int] = {}
        self._attrs: Dict[tuple, Any] = {}
        self._lock = threading.Lock()

    def _domain(self, domain: str) -> int:
        return cached(self._domains, domain, self._lock,
                      lambda: self._c.nvtxDomainCreateA(domain.encode()))

    def _attr(self, name: str, domain: str):
        key = (domain, name)
        entry = self._attrs.get(key)
        if entry is None:
            d = self._domain(domain)
            a = _EventAttributes()
            a.version, a.size = _NVTX_VERSION, ctypes.sizeof(_EventAttributes)
            a.colorType, a.color = _NVTXCOLOR_ARGB_ARGB, COLOR_ARGB
            raw = name.encode()
            register = len(self._attrs) < MAX_REGISTERED
            if register:
                a.messageType = _NVTX_MESSAGE_TYPE_REGISTERED
                a.message.registered = self._c.nvtxDomainRegisterStringA(d, raw)
            else:
                a.messageType = _NVTX_MESSAGE_TYPE_ASCII
                a.message.ascii = raw
            entry = (ctypes.pointer(a), d, raw)  # raw keeps the bytes alive
            if register:
                self._attrs[key] = entry
        return entry

    def range_start(self, name: str, domain: str = NVTX_DOMAIN) -> Any:
        ptr, d, _ = self._attr(name, domain)
        return (d, self._c.nvtxDomainRangeStartEx(d, ptr))

    def range_end(self, handle: Any) -> None:
        if handle is not None:
            self._c.nvtxDomainRangeEnd(handle[0], handle[1])


def make_ctypes_emitter() -> Optional[NvtxEmitter]:
    """The first NVTX library that loads, bound; None when there is none."""
    for path in nvtx_library_candidates():
        if path.startswith("/") and not os.path.exists(path):
            continue
        lib = _load_library(path)
        if lib is not None:
            return _CtypesEmitter(lib)
    return None
