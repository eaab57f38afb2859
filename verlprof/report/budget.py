"""How much memory reading the reports may take, and so how many are read at once.

``verlprof report --memory-budget SIZE`` (or ``VERLPROF_MEMORY_BUDGET``; default 4 GiB, a
quarter of a 16 GB laptop) bounds the readers' memory together. What one reader needs:

* an nsys report: :data:`NSYS_READER_BYTES`, whatever its size. Its ``nsys export`` child stays
  near 50 MB (measured at 1-100 MB reports), and the reader aggregates inside SQLite through a
  page cache of fixed size (:data:`~verlprof.backends.nsys.gpu_sql.DEFAULT_CACHE_KIB`, main and
  temporary database), keeping only verlprof's own ranges in Python;
* a torch trace: the whole JSON is parsed, about :data:`TORCH_BYTES_PER_BYTE` times its
  uncompressed size (read from the gzip trailer). One that cannot fit the budget alone is
  refused with one line saying its size and what to do, and the other reports are read.

Readers run at once: ``min(cores, reports, budget // largest need)``, at least one.
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass
from typing import Optional

BUDGET_ENV = "VERLPROF_MEMORY_BUDGET"
DEFAULT_BUDGET = 4 << 30
NSYS_READER_BYTES = 192 << 20
"""One nsys reader: two SQLite page caches (2 x 32 MiB), the ``nsys export`` child (~55 MB)
and headroom for Python's share (its ranges, the interpreter's per-thread state)."""
TORCH_BYTES_PER_BYTE = 12
TORCH_BASE_BYTES = 64 << 20

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.I)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str, key: str = "--memory-budget") -> int:
    """``4G``, ``512M``, ``1.5GiB``, ``1073741824`` → bytes; ValueError naming ``key``."""
    found = _SIZE.match(str(text))
    if not found:
        raise ValueError(f"{key}: not a size: {text!r} (write e.g. 4G or 512M)")
    value = int(float(found.group(1)) * _UNITS[found.group(2).lower()])
    if value < 64 << 20:
        raise ValueError(f"{key}: {text} is below 64M, too little to read a report")
    return value


def budget_bytes(explicit: Optional[int] = None) -> int:
    """The budget in force: ``explicit``, else ``$VERLPROF_MEMORY_BUDGET``, else 4 GiB."""
    if explicit is not None:
        return explicit
    env = os.environ.get(BUDGET_ENV)
    return parse_size(env, BUDGET_ENV) if env else DEFAULT_BUDGET


def human(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


@dataclass(frozen=True)
class Need:
    """Memory one report's reader needs."""

    bytes: int
    refusal: Optional[str] = None
    """Set when it cannot fit the budget alone: the one-line reason."""


def need(path: str, backend: str, budget: int) -> Need:
    """What reading ``path`` takes, judged against ``budget``."""
    if backend != "torch":
        return Need(NSYS_READER_BYTES)
    raw = _uncompressed_size(path)
    bytes_ = TORCH_BASE_BYTES + TORCH_BYTES_PER_BYTE * raw
    if bytes_ <= budget:
        return Need(bytes_)
    return Need(bytes_, f"trace is {human(raw)} of JSON; parsing it takes about "
                        f"{human(bytes_)}, over the memory budget of {human(budget)}: rerun "
                        f"with --memory-budget {-(-bytes_ // (1 << 30))}G or more, or open "
                        "it in https://ui.perfetto.dev")


def jobs_for(largest_need: int, budget: int, tasks: int, cores: Optional[int] = None,
             requested: Optional[int] = None) -> int:
    """Readers at once: what was asked (else one per core), never more than fit the budget
    nor more than there are reports; at least one."""
    want = requested if requested is not None else (cores or os.cpu_count() or 1)
    fit = max(1, budget // max(1, largest_need))
    return max(1, min(want, fit, tasks))


def _uncompressed_size(path: str) -> int:
    """Bytes of JSON in a trace: the gzip trailer's size field (mod 4 GiB, so a compressed
    file larger than the field counts at its own size times 10), else the file's size."""
    try:
        size = os.path.getsize(path)
        if not path.endswith(".gz"):
            return size
        with open(path, "rb") as handle:
            handle.seek(-4, os.SEEK_END)
            (isize,) = struct.unpack("<I", handle.read(4))
        return max(isize, size) if size < (400 << 20) else max(isize, size * 10)
    except (OSError, struct.error):
        return 0
