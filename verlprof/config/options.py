"""Tool options to argv: pure functions, no shell anywhere.

Rendering rule (shared by nsys and rocprof-sys): a one-character key becomes two argv slots
(``t: cuda,nvtx`` → ``-t cuda,nvtx``), a longer key one slot (``capture-range: nvtx`` →
``--capture-range=nvtx``), a flag ``--flag``. Booleans are lower-cased (``true``/``false``),
``None`` means "leave the tool's default" and renders nothing. Values are never parsed by a
shell: whatever they contain stays inside its own argv slot.
"""

from __future__ import annotations

import math
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from verlprof.errors import ConfigError

_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")

TIME_WINDOW_KEYS = ("delay", "duration", "y", "d")
"""nsys time-window options (seconds); must be non-negative numbers."""

SHORT_TO_LONG = {"t": "trace", "o": "output", "c": "capture-range", "p": "nvtx-capture",
                 "s": "sample", "y": "delay", "d": "duration", "f": "force-overwrite",
                 "x": "stop-on-exit", "b": "backtrace", "w": "show-output"}
"""nsys' one-letter aliases, so that ``t`` and ``trace`` are recognised as the same option."""


def canonical_key(key: str) -> str:
    """The long name of an nsys option (``t`` → ``trace``); other keys unchanged."""
    return SHORT_TO_LONG.get(key, key)


def render_value(value: Any) -> str:
    """An option value as nsys expects it: booleans lower-cased, numbers plain."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def validate_options(options: Optional[Mapping[str, Any]], flags: Optional[Sequence[str]],
                     key: str, flags_key: Optional[str] = None) -> None:
    """Raise :class:`ConfigError` naming the full key for any option that cannot render safely.

    Checks: a mapping of scalar values, option names made of ``[A-Za-z0-9_-]``, ``o`` and
    ``output`` not both given (nor any other short/long pair), non-negative numbers for the
    time-window options, flags that are names and do not repeat an option.
    """
    flags_key = flags_key or f"{key}.flags"
    if options is None:
        options = {}
    if not isinstance(options, Mapping):
        raise ConfigError(key, f"must be a mapping of option: value, got {type(options).__name__}")
    seen: Dict[str, str] = {}
    for name, value in options.items():
        full = f"{key}.{name}"
        if not isinstance(name, str) or not _KEY_RE.fullmatch(name):
            raise ConfigError(full, "option names are letters, digits, '-' and '_' only")
        if value is not None and not isinstance(value, (str, int, float, bool)):
            raise ConfigError(full, "must be a string, number or boolean, got "
                                    f"{type(value).__name__}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(full, f"must be a finite number, got {value}")
        long_name = canonical_key(name)
        if long_name in seen:
            raise ConfigError(full, f"given twice (also as {key}.{seen[long_name]})")
        seen[long_name] = name
        if name in TIME_WINDOW_KEYS and value is not None:
            number = _as_number(value)
            if number is None or number < 0:
                raise ConfigError(full, f"must be a non-negative number of seconds, got {value!r}")
    if flags is None:
        return
    if isinstance(flags, (str, bytes)) or not isinstance(flags, Sequence):
        raise ConfigError(flags_key, "must be a list of flag names")
    for i, flag in enumerate(flags):
        if not isinstance(flag, str) or not _KEY_RE.fullmatch(flag.lstrip("-")):
            raise ConfigError(f"{flags_key}[{i}]", f"not a flag name: {flag!r}")
        name = flag.lstrip("-")
        if canonical_key(name) in seen:
            raise ConfigError(f"{flags_key}[{i}]", f"--{name} is also set as option "
                                                    f"{key}.{seen[canonical_key(name)]}")


def render_options(options: Optional[Mapping[str, Any]], flags: Sequence[str] = (),
                   key: str = "options") -> List[str]:
    """Validate, then render ``options`` and ``flags`` to argv (order of the mapping kept)."""
    validate_options(options, flags, key)
    argv: List[str] = []
    for name, value in (options or {}).items():
        if value is None:
            continue
        if len(name) == 1:
            argv += [f"-{name}", render_value(value)]
        else:
            argv.append(f"--{name}={render_value(value)}")
    argv += [f"--{flag.lstrip('-')}" for flag in flags]
    return argv


def merge_options(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict:
    """``base`` with ``override`` on top, where ``t`` and ``trace`` count as the same key."""
    merged = dict(base)
    for name, value in override.items():
        for existing in [k for k in merged if canonical_key(k) == canonical_key(name)]:
            del merged[existing]
        merged[name] = value
    return merged


def pop_option(options: dict, name: str) -> Tuple[Optional[str], Any]:
    """Remove option ``name`` (by long or short spelling); return (key as given, value)."""
    for key in list(options):
        if canonical_key(key) == canonical_key(name):
            return key, options.pop(key)
    return None, None


def _as_number(value: Any) -> Optional[float]:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(str(value))
    except ValueError:
        return None
