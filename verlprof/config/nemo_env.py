"""NeMo RL's profiling environment variables, read into the same model as the YAML layouts.

Precedence: **the environment wins over the YAML.** When NeMo RL's variables are set, they
decide the tool, the steps and which roles are profiled (every rank of a matched role, whole
windows, no discrete mode), and the YAML's ``profile_steps`` / rank selection are replaced (a
warning says so). Everything the variables do not express still comes from the YAML: output
directory (except ``NRL_TORCH_PROFILE_DIR``), file names, nsys trigger and flags, controller
options, timeouts. The YAML is validated either way.

nsys (tool ``nsys``)
    ``NRL_NSYS_WORKER_PATTERNS="*policy*, *vllm*"``: comma-separated fnmatch patterns,
    whitespace stripped, empty ones ignored, matched (case-sensitively) against worker names
    ``<group>_worker`` (``actor_rollout_ref_worker``, ``critic_worker``, ``rm_worker``; without
    the hybrid engine ``actor_worker``, ``rollout_worker``, ``ref_worker``) and role names
    (``actor``, ``rollout``, ``ref``, ``critic``, ``rm``). A worker name selects all its roles.
    ``NRL_NSYS_PROFILE_STEP_RANGE="3:5"``: START inclusive, STOP exclusive, 1-indexed → steps
    3 and 4, captured as one window (NeMo RL starts once and stops when the step leaves the
    range). Both variables or neither. ``NRL_NSYS_EXTRA_OPTIONS``: a JSON object merged over
    the worker options.
torch (tool ``torch``)
    ``NRL_TORCH_PROFILE_STEP_RANGE`` and ``NRL_TORCH_PROFILE_WORKER_PATTERNS`` (same rules),
    ``NRL_TORCH_PROFILE_DIR`` (the output directory).

A variable set to an empty (or all-blank) string counts as unset. Setting variables of both
families is an error: each selects a different tool.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from typing import Dict, List, Mapping, Optional, Tuple

from verlprof.config import guard
from verlprof.config import validate as v
from verlprof.config.draft import Draft, RoleDraft
from verlprof.config.options import merge_options
from verlprof.config.topology import Topology
from verlprof.errors import ConfigError

NSYS_PATTERNS = "NRL_NSYS_WORKER_PATTERNS"
NSYS_RANGE = "NRL_NSYS_PROFILE_STEP_RANGE"
NSYS_EXTRA = "NRL_NSYS_EXTRA_OPTIONS"
TORCH_PATTERNS = "NRL_TORCH_PROFILE_WORKER_PATTERNS"
TORCH_RANGE = "NRL_TORCH_PROFILE_STEP_RANGE"
TORCH_DIR = "NRL_TORCH_PROFILE_DIR"

NSYS_VARS: Tuple[str, ...] = (NSYS_PATTERNS, NSYS_RANGE, NSYS_EXTRA)
TORCH_VARS: Tuple[str, ...] = (TORCH_PATTERNS, TORCH_RANGE, TORCH_DIR)

MAX_RANGE_STEPS = 100_000
"""A longer step range is refused: it is a typo, and it would build a huge step tuple."""

_INT_RE = re.compile(r"-?[0-9]+")


def parse_patterns(value: str, var: str) -> Tuple[str, ...]:
    """``"*policy*, *vllm*"`` → ``("*policy*", "*vllm*")``; at least one pattern required."""
    patterns = tuple(p.strip() for p in value.split(",") if p.strip())
    if not patterns:
        raise ConfigError(var, f"contains no pattern: {value!r}")
    return patterns


def parse_step_range(value: str, var: str) -> Tuple[int, ...]:
    """``"3:5"`` → ``(3, 4)``: START inclusive, STOP exclusive, both 1-indexed."""
    text = value.strip()
    if text.count(":") != 1:
        raise ConfigError(var, f"must be START:STOP (START inclusive, STOP exclusive, "
                               f"1-indexed), e.g. 3:5; got {value!r}")
    parts = [p.strip() for p in text.split(":")]
    for part in parts:
        if not _INT_RE.fullmatch(part):
            raise ConfigError(var, f"START and STOP must be integers; got {value!r}")
    start, stop = (int(p) for p in parts)
    for number in (start, stop):
        if number < 1:
            raise ConfigError(var, f"steps are 1-indexed, so {number} is not a step; "
                                   f"got {value!r}")
    if stop <= start:
        raise ConfigError(var, f"empty range {value!r}: STOP is exclusive and must be greater "
                               "than START")
    if stop - start > MAX_RANGE_STEPS:
        raise ConfigError(var, f"range {value!r} spans more than {MAX_RANGE_STEPS} steps")
    return tuple(range(start, stop))


def parse_extra_options(value: str, var: str) -> Dict[str, object]:
    """A JSON object of nsys options, validated like YAML options."""
    if len(value) > guard.MAX_ENV_BYTES:  # refused unparsed: a few options fit in far less
        raise ConfigError(var, f"is {len(value)} characters long; at most "
                               f"{guard.MAX_ENV_BYTES} are read")
    try:
        parsed = json.loads(value)
    except (ValueError, RecursionError) as err:  # RecursionError: JSON nested too deep
        msg = getattr(err, "msg", str(err))
        raise ConfigError(var, f"not valid JSON ({msg}); expected an object like "
                               '{"trace": "cuda,nvtx"}') from None
    if not isinstance(parsed, dict):
        raise ConfigError(var, f"must be a JSON object like {{\"trace\": \"cuda,nvtx\"}}, "
                               f"got {type(parsed).__name__}")
    guard.check_tree(parsed, var, 64)  # nesting as deep as a config's, values as many
    return v.options(parsed, var)


def worker_names(topology: Topology) -> Dict[str, Tuple[str, ...]]:
    """Every name a pattern can match → the roles it selects."""
    names: Dict[str, Tuple[str, ...]] = {}
    for group in topology.groups:
        names[group.worker_name] = group.roles
    for group in topology.groups:
        for role in group.roles:
            names.setdefault(role, (role,))
    return names


def apply(draft: Draft, env: Mapping[str, str], topology: Topology) -> None:
    """Overwrite ``draft`` with what NeMo RL's variables say, if any are set."""
    nsys_set = [name for name in NSYS_VARS if _get(env, name) is not None]
    torch_set = [name for name in TORCH_VARS if _get(env, name) is not None]
    if nsys_set and torch_set:
        raise ConfigError(nsys_set[0], f"set together with {torch_set[0]}: the nsys and torch "
                                       "variables choose different tools; set one family only")
    if nsys_set:
        _apply_family(draft, env, topology, "nsys", NSYS_PATTERNS, NSYS_RANGE, NSYS_EXTRA)
    elif torch_set:
        _apply_family(draft, env, topology, "torch", TORCH_PATTERNS, TORCH_RANGE, TORCH_DIR)


def _apply_family(draft: Draft, env: Mapping[str, str], topology: Topology, tool: str,
                  patterns_var: str, range_var: str, extra_var: str) -> None:
    patterns_value, range_value = _get(env, patterns_var), _get(env, range_var)
    extra_value = _get(env, extra_var)
    if patterns_value is None and range_value is None:
        draft.warn(f"{extra_var} is set but {patterns_var} and {range_var} are not, so it is "
                   "ignored")
        return
    if patterns_value is None or range_value is None:
        missing, given = ((patterns_var, range_var) if patterns_value is None
                          else (range_var, patterns_var))
        raise ConfigError(missing, f"must be set together with {given} (both or neither)")
    patterns = parse_patterns(patterns_value, patterns_var)
    steps = parse_step_range(range_value, range_var)
    extra = None
    if extra_value is not None:
        if tool == "nsys":
            extra = parse_extra_options(extra_value, extra_var)
        else:
            directory = v.text(extra_value, extra_var)
            draft.set(output_dir=os.path.abspath(os.path.expanduser(directory)))

    if draft.steps_given or any(r.selects_any for r in draft.roles.values()):
        draft.warn(f"{range_var} and {patterns_var} replace {draft.steps_key} and the per-role "
                   "rank selection of the config (the environment wins over the YAML)")
    selected = _match(patterns, worker_names(topology), patterns_var, draft)
    # NeMo RL starts the capture when the range begins and stops it when the range ends.
    draft.set(source="nemo_env", tool=tool, enabled=True, steps=steps, continuous_steps=True)
    draft.steps_key, draft.steps_given, draft.continuous_key = range_var, True, range_var
    for role in draft.roles:
        draft.roles[role] = RoleDraft(all_ranks=role in selected, ranks_key=patterns_var,
                                      all_ranks_key=patterns_var, discrete_key=patterns_var)
    if extra is not None:
        # checked against the flags here so that a clash names this variable, not the YAML
        v.options(extra, extra_var, draft.config.nsys.worker_flags, draft.worker_flags_key)
        draft.worker_options = merge_options(draft.worker_options or {}, extra)


def _match(patterns: Tuple[str, ...], names: Dict[str, Tuple[str, ...]], var: str,
           draft: Draft) -> List[str]:
    selected: List[str] = []
    for pattern in patterns:
        hits = [name for name in names if fnmatch.fnmatchcase(name, pattern)]
        if not hits:
            draft.warn(f"{var}: pattern {pattern!r} matches no worker (names: "
                       f"{', '.join(names)})")
        for name in hits:
            selected += [role for role in names[name] if role not in selected]
    return selected


def _get(env: Mapping[str, str], name: str) -> Optional[str]:
    """The variable's value, or None when unset or blank."""
    value = env.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigError(name, f"must be a string, got {type(value).__name__}")
    return value if value.strip() else None
