"""Value checks shared by every layout: each raises :class:`ConfigError` naming the FULL key.

Every reader in :mod:`verlprof.config` passes the key it read a value from, so that an error
says ``actor_rollout_ref.actor.profile_ranks[1]: rank 0 listed twice`` and not "bad rank".
Messages are one line: the CLI prints them as they are, without a traceback.

Most checks are about one value at a time; :func:`check_draft` runs last, for the rule that
spans keys (continuous windows vs discrete roles) and for the warnings about settings that are
silently meaningless. Checks that need the topology (ranks below world sizes, colocated roles
that disagree on ``discrete``) belong to :mod:`verlprof.plan.build`, which has the topology.

Inputs can be anything YAML (or a hypothesis test) produces, so no check may assume a type
before testing it: membership tests use tuples (lists and dicts are unhashable), keys are
rendered by :func:`child` (one printable line whatever they are), and bool is rejected
wherever an int is expected.
"""

from __future__ import annotations

import difflib
import keyword
import math
import re
import string
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Sequence, Tuple

from verlprof.config.options import validate_options
from verlprof.config.schema import ROLES
from verlprof.errors import ConfigError

if TYPE_CHECKING:  # draft imports nothing from here, but keep the import graph one-way
    from verlprof.config.draft import Draft

TEMPLATE_FIELDS: Tuple[str, ...] = ("component", "step", "rank", "host", "pid")
"""Fields a ``filename_template`` may use."""

TEMPLATE_REQUIRED: Tuple[str, ...] = ("component", "step", "rank")
"""Fields a ``filename_template`` must use, or reports of different processes collide."""

_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OPTION_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


def child(prefix: str, name: Any) -> str:
    """``prefix.name`` (or ``name`` at the top level), printable on one line whatever ``name``
    is: a key with control characters is shown as its repr, a non-string key ``str()``-ed."""
    shown = name if isinstance(name, str) and name.isprintable() else (
        repr(name) if isinstance(name, str) else str(name))
    return f"{prefix}.{shown}" if prefix else shown


def is_int(value: Any) -> bool:
    """True for a real int; YAML's ``true`` is a bool, and a bool is not a step or a rank."""
    return isinstance(value, int) and not isinstance(value, bool)


def positive_int(value: Any, key: str, when: str = "") -> int:
    """``value`` when it is an int of at least 1, else one line naming ``key`` (``when``: the
    setting that asks for it, said in the line)."""
    if not is_int(value) or value < 1:
        raise ConfigError(key, f"must be a positive int{' when ' + when if when else ''}, got "
                               f"{show(value)}")
    return value


def mapping(value: Any, key: str) -> Dict[Any, Any]:
    """A mapping as a dict; ``null`` is an empty one."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(key, f"must be a mapping, got {type(value).__name__}")
    return dict(value)


def known_keys(block: Mapping[Any, Any], allowed: Sequence[str], prefix: str,
               hints: Optional[Mapping[str, str]] = None) -> None:
    """Reject keys of ``block`` not in ``allowed``, with a did-you-mean.

    ``hints`` maps a known-but-misplaced key to an explanation (e.g. a key of another layout).
    """
    for name in block:
        if isinstance(name, str) and name in allowed:
            continue
        unknown(name, allowed, prefix, hints)


def unknown(name: Any, allowed: Sequence[str], prefix: str,
            hints: Optional[Mapping[str, str]] = None) -> None:
    """Raise the unknown-key error for ``prefix.name``."""
    if hints and isinstance(name, str) and name in hints:
        raise ConfigError(child(prefix, name), f"unknown key here; {hints[name]}")
    close = difflib.get_close_matches(str(name), list(allowed), n=1, cutoff=0.6)
    if close:
        raise ConfigError(child(prefix, name), f"unknown key; did you mean {close[0]}?")
    raise ConfigError(child(prefix, name), f"unknown key; valid keys: {', '.join(allowed)}")


def boolean(value: Any, key: str, default: bool = False) -> bool:
    """A YAML boolean; ``null`` means the default. Strings like ``"true"`` are refused."""
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigError(key, f"must be true or false, got {show(value)}")
    return value


def optional_boolean(value: Any, key: str) -> Optional[bool]:
    """A boolean or ``null`` (kept as None: "decide at run time")."""
    return None if value is None else boolean(value, key)


def text(value: Any, key: str, *, default: Optional[str] = None) -> str:
    """A non-empty single-line string; ``null`` gives ``default`` (an error when None)."""
    if value is None and default is not None:
        return default
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(key, f"must be a non-empty string, got {show(value)}")
    if any(c in value for c in "\x00\n\r"):
        raise ConfigError(key, "must be one line without NUL characters")
    return encodable(value, key)


def encodable(value: str, key: str) -> str:
    """Refuse lone surrogates: such a string cannot become a path, an argv slot or a log line."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(key, f"must be valid text, got {show(value)}") from None
    return value


def choice(value: Any, key: str, valid: Sequence[str], *, default: Optional[str] = None) -> str:
    """One of ``valid``; ``null`` gives ``default`` (an error when None); the error lists them."""
    if value is None and default is not None:
        return default
    if not isinstance(value, str) or value not in valid:
        raise ConfigError(key, f"must be one of {', '.join(valid)}; got {show(value)}")
    return value


def steps(value: Any, key: str) -> Tuple[int, ...]:
    """Training steps to profile: a list of unique positive ints, returned sorted.

    ``null`` and ``[]`` mean "profiling off". Steps are 1-indexed like the trainer's global
    step, so 0 is an error (it would never be reached).
    """
    items = _sequence(value, key, "a list of step numbers, e.g. [1, 2, 5]")
    seen: Dict[int, int] = {}
    for i, item in enumerate(items):
        item_key = f"{key}[{i}]"
        if not is_int(item):
            raise ConfigError(item_key, f"steps are positive integers, got {show(item)}")
        if item < 1:
            raise ConfigError(item_key, f"steps are 1-indexed (the trainer's global step), "
                                        f"got {item}")
        if item in seen:
            raise ConfigError(item_key, f"step {item} listed twice")
        seen[item] = i
    return tuple(sorted(seen))


def ranks(value: Any, key: str) -> Tuple[int, ...]:
    """Ranks of a worker group: unique non-negative ints, order kept; ``null``/``[]``: none."""
    items = _sequence(value, key, "a list of ranks, e.g. [0, 1]")
    out = []
    for i, item in enumerate(items):
        item_key = f"{key}[{i}]"
        if not is_int(item):
            raise ConfigError(item_key, f"ranks are non-negative integers, got {show(item)}")
        if item < 0:
            raise ConfigError(item_key, f"ranks are non-negative, got {item}")
        if item in out:
            raise ConfigError(item_key, f"rank {item} listed twice")
        out.append(item)
    return tuple(out)


def positive_number(value: Any, key: str, default: float) -> float:
    """A positive finite number of seconds; ``null`` is the default."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(key, f"must be a positive number of seconds, got {show(value)}")
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(key, f"must be a positive number of seconds, got {value}")
    return float(value)


def seconds_at_least_zero(value: Any, key: str, default: float) -> float:
    """A finite number of seconds, 0 or more; ``null`` is the default."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value < 0:
        raise ConfigError(key, f"must be a number of seconds, 0 or more, got {show(value)}")
    return float(value)


def filename_template(value: Any, key: str, default: str) -> str:
    """A report base name: only the known fields, each required one present, no path parts.

    ``{component}``, ``{step}`` and ``{rank}`` are required because without them reports of
    different processes or windows would overwrite each other; ``/`` and ``..`` are refused
    because the template names a file inside a directory that verlprof chooses.
    """
    if value is None:
        return default
    template = text(value, key)
    if "/" in template or "\\" in template or ".." in template:
        raise ConfigError(key, "is a file name: no '/', '\\' or '..'")
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as err:  # unbalanced braces
        raise ConfigError(key, f"not a valid template: {err}") from None
    used = set()
    for _, field_name, spec, conversion in parsed:
        if field_name is None:
            continue
        if field_name not in TEMPLATE_FIELDS:
            raise ConfigError(key, f"unknown field {{{field_name}}}; fields: "
                                   + ", ".join(f"{{{f}}}" for f in TEMPLATE_FIELDS))
        if spec or conversion:
            raise ConfigError(key, f"field {{{field_name}}} takes no format spec or conversion")
        used.add(field_name)
    missing = [f for f in TEMPLATE_REQUIRED if f not in used]
    if missing:
        raise ConfigError(key, "must contain " + ", ".join(f"{{{f}}}" for f in missing)
                          + " (or reports of different processes collide)")
    return template


def phases(value: Any, key: str) -> Dict[str, Tuple[str, ...]]:
    """``{role: [method names]}``: roles from :data:`ROLES`, names valid Python identifiers."""
    out: Dict[str, Tuple[str, ...]] = {}
    for role, names in mapping(value, key).items():
        role_key = child(key, role)
        if not isinstance(role, str) or role not in ROLES:
            raise ConfigError(role_key, f"unknown role; roles: {', '.join(ROLES)}")
        if names is None:  # null: keep verlprof's defaults for this role
            continue
        items = _sequence(names, role_key, "a list of method names")
        seen = []
        for i, name in enumerate(items):
            if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
                raise ConfigError(f"{role_key}[{i}]", f"not a method name: {show(name)}")
            if name in seen:
                raise ConfigError(f"{role_key}[{i}]", f"phase {name} listed twice")
            seen.append(name)
        out[role] = tuple(seen)
    return out


def options(value: Any, key: str, flags: Sequence[str] = (),
            flags_key: Optional[str] = None) -> Dict[str, Any]:
    """Tool options (``{trace: "cuda,nvtx"}``), checked by
    :func:`verlprof.config.options.validate_options`."""
    opts = mapping(value, key)
    for name, value in opts.items():  # names become argv: only plain option names
        if not isinstance(name, str) or not _OPTION_RE.fullmatch(name):
            raise ConfigError(child(key, name), "option names are letters, digits, '-' and '_'")
        if isinstance(value, str):
            encodable(value, child(key, name))
            if "\x00" in value:
                raise ConfigError(child(key, name), "must not contain NUL characters")
    validate_options(opts, flags, key, flags_key)
    return opts


def flags(value: Any, key: str) -> Tuple[str, ...]:
    """Bare tool flags: a list of names (checked together with the options they go with)."""
    items = _sequence(value, key, "a list of flag names")
    for i, item in enumerate(items):
        if not isinstance(item, str) or not _OPTION_RE.fullmatch(item.lstrip("-")):
            raise ConfigError(f"{key}[{i}]", f"not a flag name: {show(item)}")
    return tuple(items)


def environment(value: Any, key: str) -> Dict[str, str]:
    """Extra environment variables: names like ``ROCPROFSYS_X``, scalar values as strings."""
    out = {}
    for name, item in mapping(value, key).items():
        item_key = child(key, name)
        if not isinstance(name, str) or not _ENV_NAME_RE.fullmatch(name):
            raise ConfigError(item_key, "not an environment variable name")
        if item is None or not isinstance(item, (str, int, float, bool)):
            raise ConfigError(item_key, f"must be a string or number, got {show(item)}")
        out[name] = ("true" if item else "false") if isinstance(item, bool) else str(item)
        if "\x00" in out[name]:
            raise ConfigError(item_key, "must not contain NUL characters")
        encodable(out[name], item_key)
    return out


def _sequence(value: Any, key: str, what: str) -> Sequence[Any]:
    if value is None:
        return ()
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise ConfigError(key, f"must be {what}, got {show(value)}")
    return value


def show(value: Any) -> str:
    """A short one-line rendering of a bad value for messages."""
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return shown.replace("\n", "\\n")


def check_draft(draft: Draft) -> None:
    """The rules that span keys, run once the layout and the environment are applied.

    Raises for continuous windows with discrete roles; records the warnings for settings that
    are silently meaningless (ranks without steps, steps without ranks, steps while disabled).
    """
    roles = draft.roles.values()
    # continuous windows span several steps; discrete mode opens one per phase call: not both
    discrete = next((r for r in roles if r.discrete), None)
    if draft.config.continuous_steps and discrete is not None:
        raise ConfigError(draft.continuous_key, f"cannot be true while {discrete.discrete_key} "
                                                "is true (discrete mode opens one window per "
                                                "phase call)")
    if not draft.config.steps:
        state = "empty" if draft.steps_given else "null"
        for role in roles:
            if role.selects_any:
                draft.warn(f"{draft.steps_key} is {state}, so {role.selection_key} selects "
                           "nothing")
        return
    if not draft.config.enabled:
        draft.warn(f"{draft.disabled_reason}, so {draft.steps_key} profiles nothing")
    elif not any(role.selects_any for role in roles) \
            and not any(t.selects_any for t in draft.config.teachers.values()):
        key = draft.roles["actor"].ranks_key
        hint = f"e.g. set {key}: [0]" if "." in key else f"no worker matches {key}"
        draft.warn(f"{draft.steps_key} is set but no role selects a rank ({hint}), so no "
                   "worker is profiled")
