"""Refuse configs whose expanded size is out of proportion, before anything expands them.

A YAML alias bomb (seven nested levels of nine aliases: a few hundred bytes, 9^7 values once
expanded) or a dict whose entries share references the same way is tiny as written and huge
as a tree: OmegaConf, ``to_container`` and :func:`.build.to_plain`'s copy would all spend
minutes at 100% CPU on it. So every entry point measures first, counting each shared node once
per reference but computing its size only once (memoised), and refuses above
:data:`MAX_NODES` with the usual one-line :class:`ConfigError`.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Mapping

import yaml

from verlprof.errors import ConfigError

MAX_NODES = 10_000
"""Most values (keys, mappings, lists and scalars, counted as expanded) a config may hold.

verl 0.9's fully composed ``_generated_ppo_trainer.yaml`` holds about 2,100; five times that
leaves room for any real trainer config, while OmegaConf still loads it in about a second on
one core (it builds some 10,000 nodes a second). An alias bomb expands to millions.
"""

MAX_YAML_BYTES = 128 * 1024
"""Largest config file read. verl 0.9's ``_generated_ppo_trainer.yaml``, the largest trainer
config we know, is 35 KiB; composing 128 KiB (a flow list of some 65,000 values) takes about
0.3 s, so a huge file is refused before the parser spends its time on it."""

MAX_ENV_BYTES = 64 * 1024
"""Largest ``NRL_*`` variable read: a JSON object of a few nsys options is well under 1 KiB."""

# libyaml's composer is some ten times faster than the pure-Python one, where it is built
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def check_yaml_file(path: str, max_depth: int) -> None:
    """Refuse ``path`` if it is too large as a file or as the tree it expands to."""
    try:
        size = os.path.getsize(path)
    except OSError as err:
        raise ConfigError("config", f"cannot read {path}: {err.strerror or err}") from None
    if size > MAX_YAML_BYTES:
        raise ConfigError("config", f"{path} is {size} bytes; a trainer config is at most "
                                    f"{MAX_YAML_BYTES} (refused unread)")
    try:
        with open(path, "rb") as handle:
            # compose, not load: aliases stay shared nodes, so nothing is expanded here
            root = yaml.compose(handle, Loader=_Loader)
    except (yaml.YAMLError, OSError, UnicodeDecodeError, RecursionError):
        return  # not this module's concern: the loader reports unreadable YAML itself
    if root is not None:
        count = _yaml_size(root, {}, 0, max_depth)
        if count > MAX_NODES:
            raise ConfigError("config", _too_many(path, count))


def check_tree(value: Any, where: str, max_depth: int) -> None:
    """Refuse a dict/list tree (shared references counted per use) above :data:`MAX_NODES`."""
    count = _tree_size(value, {}, 0, max_depth)
    if count > MAX_NODES:
        raise ConfigError(where, _too_many("the config", count))


def _too_many(what: str, count: int) -> str:
    shown = f"more than {MAX_NODES}" if count > MAX_NODES * 10 else str(count)
    return (f"{what} expands to {shown} values (anchors/aliases or shared references counted "
            f"per use); at most {MAX_NODES} are accepted, so it is refused unexpanded")


def _yaml_size(node: yaml.Node, memo: Dict[int, int], depth: int, max_depth: int) -> int:
    if depth > max_depth:
        raise ConfigError("config", f"nested more than {max_depth} levels deep")
    known = memo.get(id(node))
    if known is not None:
        return known
    total = 1
    if isinstance(node, yaml.SequenceNode):
        for item in node.value:
            total += _yaml_size(item, memo, depth + 1, max_depth)
            if total > MAX_NODES * 10:
                break  # far enough over the bound to refuse: stop counting
    elif isinstance(node, yaml.MappingNode):
        for key, item in node.value:
            total += (_yaml_size(key, memo, depth + 1, max_depth)
                      + _yaml_size(item, memo, depth + 1, max_depth))
            if total > MAX_NODES * 10:
                break
    memo[id(node)] = total
    return total


def _tree_size(value: Any, memo: Dict[int, int], depth: int, max_depth: int) -> int:
    if depth > max_depth:  # also where a cycle ends: it never completes, so it is never memoised
        raise ConfigError("config", f"nested more than {max_depth} levels deep")
    if not isinstance(value, (Mapping, list, tuple)):
        return 1
    known = memo.get(id(value))
    if known is not None:
        return known
    items = value.values() if isinstance(value, Mapping) else value
    total = 1
    for item in items:
        total += _tree_size(item, memo, depth + 1, max_depth)
        if total > MAX_NODES * 10:
            break
    memo[id(value)] = total
    return total
