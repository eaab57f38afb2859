"""What the verl launcher says when a run cannot go on, or ends with nothing profiled: one line
each, and an exit status a script can test (docs/verl.md, "Exit status").

* 2: bad input: an override Hydra refuses, a key verl's config does not have, a profiling
  setting verlprof refuses, a pool verl built that the selection cannot be planned on;
* 3: the run ended, but the plan selected ranks and no report of any of them was written.
"""

from __future__ import annotations

import difflib
import re
from typing import Any, List, Optional, Sequence

from verlprof.errors import ConfigError, ProfilingRuntimeError
from verlprof.manifest import Manifest

EXIT_BAD_INPUT = 2
EXIT_NOTHING_PROFILED = 3

_OVERRIDE = re.compile(r"Could not override '([^']+)'")
_APPEND = re.compile(r"Could not append to config\. An item is already at '([^']+)'")


def verlprof_error(err: Optional[BaseException]) -> Optional[BaseException]:
    """The verlprof error behind ``err``: the error itself, or the one Ray carried from the
    TaskRunner (``RayTaskError.cause``) or that it was raised from; None when none is ours."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        cause = getattr(err, "cause", None)  # Ray's task errors wrap (and subclass) the cause
        if isinstance(cause, BaseException):
            err = cause
            continue
        if isinstance(err, (ConfigError, ProfilingRuntimeError)):
            return err
        err = err.__cause__ or err.__context__
    return None


def hydra_error_line(err: BaseException, base_config: Any = None) -> str:
    """One line for an override Hydra refused: the key named, a close key of verl's config
    first (``did you mean ...?``), and ``+key=`` only when no key of verl's is close."""
    text = str(err).strip()
    match = _OVERRIDE.search(text)
    if match is None:
        appended = _APPEND.search(text)
        if appended is not None:
            key = appended.group(1)
            return f"{key}: verl's config already has this key; set it without '+'"
        first = text.splitlines()[0] if text else type(err).__name__
        return f"cannot compose verl's config: {first}"
    key = match.group(1)
    close = close_keys(key, base_config)
    if close:
        return f"{key}: no such key in verl's config; did you mean {' or '.join(close)}?"
    return (f"{key}: no such key in verl's config (verl would not read it); to add it anyway "
            f"write +{key}=...")


def close_keys(key: str, config: Any, limit: int = 2) -> List[str]:
    """Keys of ``config`` (a DictConfig or dict) spelled like ``key``, at the first part of
    ``key`` that ``config`` does not have (``actor_rollout_ref.actor.profile_rank`` ->
    ``actor_rollout_ref.actor.profiler``; ``actor_rollout_ref.actr.x`` ->
    ``actor_rollout_ref.actor``)."""
    parts, node = key.split("."), config
    for i, part in enumerate(parts):
        if not hasattr(node, "keys"):
            return []
        names = [str(k) for k in node]
        if part not in names:
            prefix = ".".join(parts[:i])
            found = difflib.get_close_matches(part, names, n=limit, cutoff=0.7)
            return [f"{prefix}.{name}" if prefix else name for name in found]
        node = node.get(part)
    return []


def nothing_profiled(manifest: Manifest, selected: Sequence[str]) -> Optional[str]:
    """Why a run whose plan selected ``selected`` processes holds no report of any of them
    (None when some worker report is ok, or when nothing was selected)."""
    if not selected:
        return None
    workers = [e for e in manifest.reports if e.group != "controller"]
    if any(e.status == "ok" for e in workers):
        return None
    if not workers:
        warned = next((w for w in manifest.warnings), "no worker of the plan registered")
        return (f"the plan selected {', '.join(selected)} but no report was written: "
                f"{warned}")
    reasons = list(dict.fromkeys(f"{e.status} ({e.reason})" if e.reason else e.status
                                 for e in workers))
    return (f"the plan selected {', '.join(selected)} but none of its {len(workers)} report(s) "
            f"was written: {'; '.join(reasons[:3])}")
