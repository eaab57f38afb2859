"""The file contract: where every report, the manifest and the summary live under output_dir.

This layout is public (users script against it), so every format is a constant here and every
path verlprof writes is built by a function of this module::

    <output_dir>/
      manifest.json
      controller/controller_<host>_<pid>[.<n>].nsys-rep
      step<SSSS>[-<SSSS>]/<component>/rank<R>/<name><ext>
      summary/summary.csv, summary.md, timeline.png, timeline.html, timeline_steps.png

and, hidden, what a run keeps while it runs (each named here, listed in docs/user_guide.md)::

      .raw/<group>/rank<R>/     reports as written, before collection moves them
      .verlprof.lock            which run owns the directory (verlprof.runtime.run_lock)
      .verlprof.lock.takeover   held while a stale lock is replaced
      .verlprof-reserve         room held for the manifest until the run ends (verlprof.storage)
      .verlprof-probe-<pid>     a write test, removed at once
      .manifest.*               the manifest being written, renamed at once
      .verlprof-token           the running job's capture token, owner-only (on demand)
      .verlprof-on-demand.json  where that job takes capture requests (Ray address, actor)
      <report>.part             a report being copied to its contract path

``<component>`` is the worker group for whole-step reports (``actor_rollout_ref``) and
``<role>.<phase>`` for discrete ones (``actor.update_actor``). ``<name>`` comes from the
configured filename template. Processes first write under ``.raw/`` (node-local when there is
no shared filesystem); collection moves each report to its contract path.
"""

from __future__ import annotations

import functools
import os
import re
from typing import Mapping, Optional, Sequence

MANIFEST_NAME = "manifest.json"
CONTROLLER_DIR = "controller"
CONTROLLER_OUTPUT_FORMAT = "controller_%h_%p"
"""nsys ``-o`` for the controller; nsys expands ``%h`` (host) and ``%p`` (pid)."""
SUMMARY_DIR = "summary"
RAW_DIR = ".raw"
"""Where profiled processes write before collection renames their reports."""
LOCK_NAME = ".verlprof.lock"
"""The run lock: the run that owns the output directory."""
TAKEOVER_SUFFIX = ".takeover"
"""Added to the lock's path: the marker of a process that replaces a stale lock."""
RESERVE_NAME = ".verlprof-reserve"
"""Room held for the manifest from the run's start until the manifest is written."""
PROBE_FORMAT = ".verlprof-probe-{pid}"
"""A file written and removed at once to test that the directory takes writes."""
TOKEN_NAME = ".verlprof-token"
"""The running job's capture token (mode 0600): a request must carry it
(:mod:`verlprof.runtime.request_desk`); removed when the job ends."""
ON_DEMAND_NAME = ".verlprof-on-demand.json"
"""Where the running job takes capture requests: its Ray address, namespace and actor name."""
PART_SUFFIX = ".part"
"""A report being copied to its contract path, renamed once whole."""
TRACE_NAME = "trace.pftrace"
"""``verlprof trace``'s file in :data:`SUMMARY_DIR`: the whole run as one Perfetto trace."""

STEP_DIR_FORMAT = "step{first:04d}"
STEP_RANGE_DIR_FORMAT = "step{first:04d}-{last:04d}"
RANK_DIR_FORMAT = "rank{rank}"
DISCRETE_COMPONENT_FORMAT = "{role}.{phase}"
RAW_PREFIX_FORMAT = "{group}_rank{rank}_%p"
"""nsys ``-o`` base name of a worker's raw reports: ``<group>_rank<R>_<pid>[.<n>].nsys-rep``."""

EXTENSIONS: Mapping[str, str] = {
    "nsys": ".nsys-rep",
    "torch": ".pt.trace.json.gz",
    "rocprof_sys": ".rocprof-sys",
}
"""Report suffix per backend (rocprof-sys writes a directory of that name)."""

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@functools.lru_cache(maxsize=4096)  # a plan sanitises the same few names for every report
def sanitize(name: str) -> str:
    """A single safe path segment: ``[A-Za-z0-9._-]`` only, never ``.``/``..`` or hidden."""
    return _UNSAFE.sub("_", str(name)).strip(".") or "_"


def step_text(steps: Sequence[int]) -> str:
    """``5`` for one step, ``1-2`` for a continuous window (the ``{step}`` template field)."""
    return str(steps[0]) if len(steps) == 1 else f"{steps[0]}-{steps[-1]}"


def step_dir(steps: Sequence[int]) -> str:
    """``step0005`` or, for a continuous window, ``step0001-0002``."""
    if len(steps) == 1:
        return STEP_DIR_FORMAT.format(first=steps[0])
    return STEP_RANGE_DIR_FORMAT.format(first=steps[0], last=steps[-1])


def discrete_component(role: str, phase: str) -> str:
    """Path component of a discrete report: ``actor.update_actor``."""
    return DISCRETE_COMPONENT_FORMAT.format(role=sanitize(role), phase=sanitize(phase))


def report_relpath(template: str, steps: Sequence[int], component: str, rank: int,
                   backend: str) -> str:
    """The contract path of one report relative to output_dir, ``{host}``/``{pid}`` left open.

    They are only known once the process runs; :func:`resolve_relpath` fills them in.
    """
    name = template.format(component=sanitize(component), step=step_text(steps), rank=rank,
                           host="{host}", pid="{pid}")
    return "/".join((step_dir(steps), sanitize(component), RANK_DIR_FORMAT.format(rank=rank),
                     _sanitize_keeping_fields(name) + EXTENSIONS[backend]))


def resolve_relpath(relpath: str, host: str, pid: int) -> str:
    """A planned relative path with the process's host and pid filled in (both sanitised)."""
    return relpath.replace("{host}", sanitize(host)).replace("{pid}", str(int(pid)))


def raw_dir(output_dir: str, group: str, rank: int) -> str:
    """Absolute directory a profiled process writes into before collection."""
    return os.path.join(output_dir, RAW_DIR, sanitize(group), RANK_DIR_FORMAT.format(rank=rank))


def raw_prefix(output_dir: str, group: str, rank: int) -> str:
    """nsys ``-o`` value for a worker: ``<raw_dir>/<group>_rank<R>_%p``."""
    return os.path.join(raw_dir(output_dir, group, rank), raw_name(group, rank))


def raw_name(group: str, rank: int, pid: Optional[int] = None) -> str:
    """The base name of a worker's raw reports, ``<group>_rank<R>_<pid>`` (``%p``, which nsys
    expands, without ``pid``)."""
    name = RAW_PREFIX_FORMAT.format(group=sanitize(group), rank=rank)
    return name if pid is None else name.replace("%p", str(int(pid)))


def not_a_directory(path: str) -> Optional[str]:
    """Why ``path`` cannot be read as a run's directory (``not a directory``, ``no such
    directory``); None when it is one."""
    if os.path.isdir(path):
        return None
    return "not a directory" if os.path.exists(path) else "no such directory"


def probe_path(directory: str) -> str:
    """This process's write-test file in ``directory``."""
    return os.path.join(directory, PROBE_FORMAT.format(pid=os.getpid()))


def controller_prefix(output_dir: str) -> str:
    """nsys ``-o`` value for the controller (reports land at their contract path directly)."""
    return os.path.join(output_dir, CONTROLLER_DIR, CONTROLLER_OUTPUT_FORMAT)


def inside(output_dir: str, relpath: str) -> str:
    """``output_dir/relpath``, refusing any path that would escape output_dir."""
    root = os.path.realpath(output_dir)
    full = os.path.realpath(os.path.join(root, relpath))
    if os.path.commonpath([root, full]) != root:
        raise ValueError(f"path {relpath!r} escapes the output directory {output_dir}")
    return full


def _sanitize_keeping_fields(name: str) -> str:
    if name and not name.startswith(".") and not _UNSAFE.search(
            name.replace("{host}", "").replace("{pid}", "")):
        return name  # already safe: the usual case, once per planned report
    parts = re.split(r"(\{host\}|\{pid\})", name)
    cleaned = "".join(p if p in ("{host}", "{pid}") else _UNSAFE.sub("_", p) for p in parts)
    return cleaned.lstrip(".") or "_"
