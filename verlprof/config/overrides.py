"""Dotlist overrides, parsed with Hydra's own grammar so they read exactly as verl users type them.

``trainer.profile_steps=[1,2,5]`` changes a key (it must exist), ``+new.key=value`` adds one (it
must not exist), ``++key=value`` sets one either way, ``~key`` (or ``~key=value``) deletes one.
Values follow Hydra: ``[1,2]`` is a list, ``true`` a bool, ``null`` None, ``'a b'`` a string,
``${x.y}`` an interpolation. Sweeps (``a=1,2``) are refused: a profile run is one run.

Configs with a Hydra ``defaults`` list are composed by Hydra itself (see :mod:`.loader`), which
applies the overrides; :func:`parse` still runs first so a malformed override always gets the
same one-line error naming its key.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any, List, Sequence

from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from verlprof.errors import ConfigError

_ABSENT = object()
_KEY_RE = re.compile(r"[A-Za-z0-9_.@/-]+")


@dataclass(frozen=True)
class Override:
    """One parsed override."""

    text: str
    """As given (for messages)."""
    key: str
    """The dotted key, without ``+``/``++``/``~``."""
    kind: str
    """``change``, ``add``, ``force_add`` or ``delete``."""
    value: Any
    """The parsed value (None for a bare ``~key``)."""
    has_value: bool
    """False for a bare ``~key``."""
    group: bool = False
    """A config-group override (``group@package=option`` or a group name): only meaningful
    when Hydra composes a config with a ``defaults`` list."""


def parse(overrides: Sequence[str]) -> List[Override]:
    """Parse every override; a malformed one raises ConfigError naming its key."""
    if isinstance(overrides, (str, bytes)):
        raise ConfigError("overrides", "must be a list of key=value strings, not one string")
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    parsed = []
    for text in overrides:
        if not isinstance(text, str):
            raise ConfigError("overrides", f"must be strings, got {type(text).__name__}")
        key = _key_of(text)
        if "=" not in text and not text.lstrip().startswith("~"):
            raise ConfigError(key or "overrides", f"{text!r} is not key=value")
        if not key:
            raise ConfigError("overrides", f"{text!r} has no key before '='")
        try:
            item = parser.parse_override(text)
        except (HydraException, ValueError) as err:
            raise ConfigError(key, f"cannot parse override {text!r}: {_first_line(err)}"
                              ) from None
        if item.is_sweep_override():
            raise ConfigError(key, f"{text!r} is a sweep; give one value (quote a value "
                                   "that contains a comma: key='a,b')")
        kind = ("delete" if item.is_delete() else "add" if item.is_add()
                else "force_add" if item.is_force_add() else "change")
        value = item.value()
        parsed.append(Override(text=text, key=item.key_or_group, kind=kind, value=value,
                               has_value=not (kind == "delete" and "=" not in text),
                               group=item.package is not None))
    return parsed


def apply(cfg: DictConfig, overrides: Sequence[Override]) -> None:
    """Apply parsed overrides to a plain (not composed) config, with Hydra's rules."""
    for item in overrides:
        if item.group:
            raise ConfigError(item.key, "config-group overrides (group@package=option) need a "
                                        "config with a Hydra defaults list")
        current = _select(cfg, item.key)
        try:
            if item.kind == "delete":
                _delete(cfg, item, current)
            elif item.kind == "change" and current is _ABSENT:
                raise _missing(cfg, item)
            elif item.kind == "add" and current is not _ABSENT and current is not None:
                raise ConfigError(item.key, f"already set (to {current!r}); to replace it write "
                                            f"{item.text[1:]}")
            else:
                with open_dict(cfg):
                    OmegaConf.update(cfg, item.key, item.value, merge=True, force_add=True)
        except ConfigError:
            raise
        except (OmegaConfBaseException, ValueError, TypeError, KeyError, IndexError) as err:
            raise ConfigError(item.key, f"cannot apply {item.text!r}: {_first_line(err)}"
                              ) from None


class MissingKeyError(ConfigError):
    """A change override names a key the config lacks, with no close key beside it. The
    loader decides what to suggest: ``+key`` only when the key is valid to add
    (:func:`verlprof.config.loader.load_config`)."""

    def __init__(self, key: str, message: str, override: Override | None = None):
        super().__init__(key, message)
        self.override = override

    def __reduce__(self):
        return (ConfigError, (self.key, self.message))


def _missing(cfg: DictConfig, item: Override) -> ConfigError:
    """The error for a change of a key the config lacks: a close key beside it comes first
    (a typo is likelier than a key to add); else a :class:`MissingKeyError`."""
    parent_key, _, name = item.key.rpartition(".")
    parent = cfg if not parent_key else _select(cfg, parent_key)
    if isinstance(parent, DictConfig):
        siblings = [str(k) for k in parent.keys()]  # noqa: SIM118 - keys(): see _select
        close = difflib.get_close_matches(name, siblings, n=1, cutoff=0.75)
        if close:
            suggestion = f"{parent_key}.{close[0]}" if parent_key else close[0]
            return ConfigError(item.key, f"no such key in the config; did you mean "
                                         f"{suggestion}?")
    return MissingKeyError(item.key, f"no such key in the config; to add it write "
                                     f"+{item.text}", item)


def _delete(cfg: DictConfig, item: Override, current: Any) -> None:
    if current is _ABSENT:
        raise ConfigError(item.key, "cannot delete: no such key in the config")
    if item.has_value and item.value != current:
        raise ConfigError(item.key, f"cannot delete: its value is {current!r}, not "
                                    f"{item.value!r}")
    parent_key, _, name = item.key.rpartition(".")
    parent = cfg if not parent_key else OmegaConf.select(cfg, parent_key)
    with open_dict(cfg):
        del parent[name]


def _select(cfg: DictConfig, key: str) -> Any:
    """The value at ``key`` (interpolations resolved when possible), or ``_ABSENT``."""
    parent_key, _, name = key.rpartition(".")
    try:
        parent = cfg if not parent_key else OmegaConf.select(
            cfg, parent_key, default=_ABSENT, throw_on_resolution_failure=False)
    except OmegaConfBaseException:
        return _ABSENT
    # keys(), not `in`: DictConfig.__contains__ hides keys whose value is "???" or unresolvable
    if not isinstance(parent, DictConfig) or name not in parent.keys():  # noqa: SIM118
        return _ABSENT
    try:
        return OmegaConf.select(parent, name, throw_on_resolution_failure=False)
    except OmegaConfBaseException:
        return None


def _key_of(text: str) -> str:
    """The key an override names, or "" when what precedes ``=`` does not look like one."""
    key = text.split("=", 1)[0].strip().lstrip("+~").strip()
    return key if _KEY_RE.fullmatch(key) else ""


def _first_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__
