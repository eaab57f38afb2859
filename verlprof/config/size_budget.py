"""``trainer.profiler.max_total_bytes``: how many bytes of reports a run may write, as a number.

A setting is ``auto`` (the default), ``null`` (no budget), a whole number of bytes or a size as
people write one (``20GiB``, ``500M``, ``1.5TB``; ``K``/``M``/``G``/``T`` are powers of 1024,
with or without ``iB``/``B``). :func:`resolve` turns ``auto`` into bytes when the config is
loaded (the one place that looks at the disk), so that the plan, a pure function of the config,
gets a plain number: :data:`AUTO_FRACTION` of the free space of ``output_dir``'s file system.

Why a tenth: the budget counts the reports the run writes, and more comes later on the same
disk. ``verlprof report`` keeps a SQLite export next to each nsys report, about 3x its size
(3.2x on the quickstart fixture's reports, tests/docs/fixtures/quickstart_run), and the trainer
writes checkpoints and logs there while it runs. Reports at a tenth of the free space, with
their exports, stay under about half of it; a quarter would come to about all of it.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
from typing import Any, Optional, Tuple

from verlprof.config.schema import AUTO_BYTES, MaxBytes, ProfilingConfig
from verlprof.config.validate import show
from verlprof.errors import ConfigError
from verlprof.storage import FULL_BELOW_BYTES

KEY = "trainer.profiler.max_total_bytes"
"""The setting's full key (named by every message about the budget)."""

AUTO_FRACTION = 0.10
"""The share of the output file system's free space that ``auto`` allows (see above)."""

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:([kmgt])(?:i?b)?|b)?\s*$", re.I)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_setting(value: Any, key: str = KEY) -> MaxBytes:
    """The setting as given → ``"auto"``, None or bytes; one line naming ``key`` otherwise."""
    if value is None or value == AUTO_BYTES:
        return value
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    if isinstance(value, str):
        found = _SIZE.match(value)
        size = int(float(found.group(1)) * _UNITS[(found.group(2) or "").lower()]) if found else 0
        if size >= 1:
            return size
    raise ConfigError(key, f"must be a size in bytes (a whole number, or text like 20GiB or "
                           f"500M), auto or null, got {show(value)}")


def free_bytes(directory: str) -> Tuple[Optional[int], str]:
    """Free bytes of the file system that holds (or will hold) ``directory``, and the existing
    directory that was measured (``directory`` or the nearest parent that exists)."""
    path = os.path.abspath(directory)
    while not os.path.isdir(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    try:
        return shutil.disk_usage(path).free, path
    except OSError:
        return None, path


def resolve(config: ProfilingConfig) -> ProfilingConfig:
    """``config`` with ``auto`` turned into bytes (:data:`AUTO_FRACTION` of the free space
    under ``output_dir`` now) and how it was found in ``max_total_bytes_basis``."""
    if config.max_total_bytes != AUTO_BYTES:
        return config
    free, measured = free_bytes(config.output_dir)
    if free is None or free < FULL_BELOW_BYTES:  # the output directory's own check says why
        return dataclasses.replace(config, max_total_bytes=None, max_total_bytes_basis=(
            f"auto: no budget, the free space under {measured} is "
            f"{'unknown' if free is None else human_bytes(free)}"))
    budget = max(1, int(free * AUTO_FRACTION))
    return dataclasses.replace(config, max_total_bytes=budget, max_total_bytes_basis=(
        f"auto: {AUTO_FRACTION:.0%} of the {human_bytes(free)} free under {measured} when the "
        "config was loaded"))


def human_bytes(n: float) -> str:
    """``1.5 GiB``, ``300.0 KiB``, ``12 bytes``."""
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} bytes"


__all__ = ["AUTO_FRACTION", "KEY", "free_bytes", "human_bytes", "parse_setting", "resolve"]
