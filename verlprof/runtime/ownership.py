"""A run owns its output directory: one run id, one lock, one manifest per directory.

::

    run = claim_output(plan)          # before any worker starts; ConfigError if refused
    plan = run.plan                   # output_dir may now be <output_dir>/<run id>/
    try:
        ...                           # launch workers with plan, ProfileController(plan), steps
    finally:
        run.release()

Each run gets a run id, ``<UTC yyyymmdd-HHMMSS>-<host>-<pid>`` (sanitised), made when the run
starts: the plan stays a pure function of the config. The run takes the directory's lock
(:mod:`verlprof.runtime.run_lock`), then looks at what the directory already holds. Another
run's ``manifest.json``, or reports that no manifest lists, are handled as
``trainer.profiler.existing_run`` says:

* ``move_aside`` (default): the other run's files (its manifest, ``step*/``, ``controller/``,
  ``.raw/``, ``summary/``) move into ``<output_dir>/<its run id>/`` (renames within the
  directory: its manifest's relative paths stay true there), and this run writes into the
  directory. So the directory always holds the newest run, where ``verlprof plan`` said its
  reports would be, and every earlier run is kept beside it;
* ``refuse``: one line naming ``trainer.profiler.output_dir``, the other run (run
  id, host, when) and how to proceed; nothing started, nothing on disk touched;
* ``new_subdir``: this run writes into ``<output_dir>/<run id>/`` (its own lock, its own
  manifest); what is on disk stays as it is;
* ``reuse``: this run writes into the directory anyway (the user asked: the old manifest is
  replaced, a warning says so).

A run still going in the directory (its lock is held) is never moved or shared: ``move_aside``
and ``new_subdir`` take a subdirectory, the others refuse, naming that run's host and pid.

Where the claim is made: the demo and the verl launcher claim in the driver, before Ray
starts the controller actor, and hand the claim to it in :data:`RUN_ENV`;
:class:`~verlprof.runtime.controller.ProfileController` adopts a claim made for its output
directory (in this process or handed down) and otherwise claims itself. The lock is released
when the run ends (also on errors and Ctrl-C), when its :class:`Run` is garbage-collected, and
at interpreter exit; a crash leaves a lock that the next run takes over (same host, dead pid).
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import json
import logging
import os
import re
import socket
import weakref
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from verlprof import paths
from verlprof.errors import ConfigError
from verlprof.manifest import ReportEntry, read_manifest, write_manifest
from verlprof.plan.build import build_plan
from verlprof.plan_model import ProfilePlan
from verlprof.records import STATUS_MISSING, ExistingRun
from verlprof.runtime import run_lock
from verlprof.runtime.collect import run_manifest
from verlprof.runtime.run_lock import LockHolder
from verlprof.safe_text import one_line
from verlprof.storage import release_reserve

KEY = "trainer.profiler.output_dir"
POLICY_KEY = "trainer.profiler.existing_run"
RUN_ENV = "VERLPROF_RUN"
"""Environment variable that hands a claim to the controller process: JSON of run id and
output directory."""
_RUN_DIRS = re.compile(rf"^(step\d{{4}}(-\d{{4}})?|{paths.CONTROLLER_DIR}"
                       rf"|{re.escape(paths.RAW_DIR)})$")
"""Top-level entries of an output directory that hold a run's reports (verlprof/paths.py)."""

logger = logging.getLogger("verlprof")
_counter = itertools.count()
_HELD: List[weakref.ReferenceType] = []
"""Runs this process has claimed and not released (weak: a lost Run releases its lock)."""


def new_run_id(host: Optional[str] = None, pid: Optional[int] = None,
               now: Optional[datetime.datetime] = None) -> str:
    """``20261123-165012-node1-4242``: UTC start time, host and pid, one path segment. A second
    run started by the same process in the same second gets ``-2``, ``-3``, ..."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    base = (f"{now:%Y%m%d-%H%M%S}-{paths.sanitize(host or socket.gethostname())}-"
            f"{os.getpid() if pid is None else int(pid)}")
    n = next(_counter)
    return paths.sanitize(base if n == 0 else f"{base}-{n + 1}")


@dataclass(frozen=True)
class ExistingRunInfo:
    """What an output directory already holds of another run."""

    directory: str
    run_id: Optional[str] = None
    """That run's id (None: a manifest from before run ids, or reports without a manifest)."""
    host: str = ""
    """Host of that run's controller."""
    when: str = ""
    """When its manifest was written."""
    reports: int = 0
    """Report files it has on disk (without a manifest) or lists (with one)."""
    has_manifest: bool = True

    def describe(self) -> str:
        if not self.has_manifest:
            return (f"{self.reports} report file(s) that no manifest lists (a run that crashed "
                    "or is still writing)")
        who = f"run {self.run_id}" if self.run_id else "a run (its manifest has no run id)"
        details = ", ".join(x for x in (f"host {self.host}" if self.host else "",
                                        f"written {self.when}" if self.when else "") if x)
        return f"the manifest of {who}" + (f" ({details})" if details else "")


def existing_run(directory: str) -> Optional[ExistingRunInfo]:
    """What ``directory`` already holds of a run: its manifest, else report files that no
    manifest lists; None when it holds neither (a summary or other files alone do not count)."""
    if os.path.isfile(os.path.join(directory, paths.MANIFEST_NAME)):
        try:
            manifest = read_manifest(directory)
        except ValueError:  # unreadable, still another run's: nothing more to say of it
            return ExistingRunInfo(directory=directory)
        return ExistingRunInfo(directory=directory, run_id=manifest.run_id,
                               host=manifest.controller.host if manifest.controller else "",
                               when=manifest.created, reports=len(manifest.reports))
    try:
        count = sum(len(files) for entry in _run_dirs(directory)
                    for _, _, files in os.walk(os.path.join(directory, entry)))
    except OSError:
        return None
    if not count:
        return None
    return ExistingRunInfo(directory=directory, reports=count, has_manifest=False)


def _run_dirs(directory: str) -> List[str]:
    """The top-level directories of ``directory`` that hold a run's reports."""
    return [entry for entry in os.listdir(directory)
            if _RUN_DIRS.match(entry) and os.path.isdir(os.path.join(directory, entry))]


class Run:
    """One run's claim on its output directory. ``owner``: this process holds the lock and
    releases it (:meth:`release`, idempotent); an adopted claim releases nothing."""

    def __init__(self, plan: ProfilePlan, run_id: str, *, owner: bool,
                 notes: Tuple[str, ...] = (), requested_dir: str = "",
                 writes_manifest: bool = True):
        self.plan = plan
        self.run_id = run_id
        self.output_dir = plan.output_dir
        self.requested_dir = requested_dir or plan.output_dir
        self.owner = owner
        self.notes = notes
        """Warnings of the claim (a stale lock taken over, a subdirectory chosen), one line
        each; the controller records them in the manifest."""
        self.writes_manifest = writes_manifest
        """False for a run that profiles nothing in a directory holding another run: it
        leaves that run's manifest alone."""
        self._release = (weakref.finalize(self, _release_own, self.output_dir, run_id,
                                          os.getpid()) if owner else None)
        if owner:
            _HELD[:] = [r for r in _HELD if r() is not None]
            _HELD.append(weakref.ref(self))

    @property
    def released(self) -> bool:
        return self._release is None or not self._release.alive

    def release(self) -> None:
        """Give the directory's lock back (only the owner does; idempotent)."""
        if self._release is not None:
            self._release()

    def env(self) -> Dict[str, str]:
        """Environment for the controller process: it adopts this claim."""
        return {RUN_ENV: json.dumps({"run_id": self.run_id, "output_dir": self.output_dir,
                                     "notes": list(self.notes)})}

    def __enter__(self) -> Run:
        return self

    def __exit__(self, kind: Any, err: Any, _tb: Any) -> None:
        try:
            if err is not None and self.owner and self.writes_manifest and self.plan.enabled:
                self._record_if_nothing_was(err)
        finally:
            self.release()

    def _record_if_nothing_was(self, err: BaseException) -> None:
        """A run that ended by ``err`` before its controller wrote any manifest (an error or
        a signal during start-up, its controller process killed then) still leaves one: every
        planned report ``missing``, saying why, so that ``verlprof report`` and ``status``
        read the directory; and the room its controller held for a manifest goes, as at
        finalize."""
        if os.path.exists(os.path.join(self.output_dir, paths.MANIFEST_NAME)):
            return  # finalize's, or a running one (then verlprof collect places the rest)
        why = ((str(err) or "interrupted") if isinstance(err, KeyboardInterrupt) else  # SIGTERM
               f"{type(err).__name__}: {one_line(err, 300)}")
        note = f"the run ended before any window's report was placed ({why})"
        entries = [ReportEntry.of(r, status=STATUS_MISSING, reason=f"window never opened: {note}")
                   for r in self.plan.reports]
        try:
            write_manifest(run_manifest(self.plan, entries, {}, None, [note], self.run_id),
                           self.output_dir)
        except OSError:  # a directory that cannot be written: left as it was
            return
        release_reserve(self.output_dir)


def _release_own(directory: str, run_id: str, pid: int) -> None:
    """Release in the process that claimed: a forked child exiting through ``atexit`` must not
    take its parent's lock away."""
    if os.getpid() == pid:
        run_lock.release(directory, run_id)


def claim_output(plan: ProfilePlan, *, policy: Optional[ExistingRun] = None,
                 run_id: Optional[str] = None) -> Run:
    """Claim ``plan.output_dir`` for a new run (see the module docstring). Raises
    :class:`~verlprof.errors.ConfigError` (one line naming the key) when the directory is
    another run's or cannot be created; never deletes anything, and moves another run's files
    only into its own subdirectory (``move_aside``)."""
    policy = policy or plan.policy.existing_run
    run_id = run_id or new_run_id()
    directory = os.path.abspath(plan.output_dir)
    if not plan.enabled:
        # profiling off: nothing to own, never a refusal (training goes on), and an empty
        # manifest must not replace another run's
        return Run(plan, run_id, owner=False,
                   writes_manifest=not os.path.isdir(directory) or existing_run(directory) is None)
    me = run_lock.this_process(run_id)
    _makedirs(directory)
    holder, note = run_lock.acquire(directory, me)
    notes: Tuple[str, ...] = (note,) if note else ()
    if holder is not None:
        if policy not in ("new_subdir", "move_aside"):
            raise ConfigError(KEY, _in_use(directory, holder, run_id))
        return _into_subdir(plan, directory, run_id, me,
                            f"{directory} is in use by {holder.describe()}")
    found = existing_run(directory)
    if found is not None and policy == "move_aside":
        try:
            notes += (_move_aside(found),)
        except ConfigError:
            run_lock.release(directory, run_id)
            raise
        found = None
    if found is not None and policy != "reuse":
        run_lock.release(directory, run_id)
        if policy == "refuse":
            raise ConfigError(KEY, _holds(found, run_id))
        return _into_subdir(plan, directory, run_id, me, f"{directory} holds {found.describe()}")
    if found is not None:
        notes += (f"{POLICY_KEY}=reuse: this run writes into {directory}, which holds "
                  f"{found.describe()}; its manifest is replaced, its reports stay on disk",)
    if directory != plan.output_dir:
        plan = retarget(plan, directory)
    return _claimed(plan, run_id, notes, directory)


def adopt_or_claim(plan: ProfilePlan) -> Run:
    """The claim a controller runs under: one made for ``plan.output_dir`` by this process or
    handed down in :data:`RUN_ENV` by the driver (adopted: the driver releases it), else a new
    claim of its own."""
    directory = os.path.abspath(plan.output_dir)
    for ref in list(_HELD):
        held = ref()
        if held is not None and not held.released and held.output_dir == directory:
            return Run(plan, held.run_id, owner=False, notes=held.notes)
    try:
        handed = json.loads(os.environ.get(RUN_ENV) or "{}")
    except ValueError:
        handed = {}
    if isinstance(handed, dict) and handed.get("output_dir") == directory:
        holder = run_lock.read_lock(directory)
        if holder is not None and holder.run_id == handed.get("run_id"):
            notes = tuple(str(n) for n in handed.get("notes") or ())
            return Run(plan, holder.run_id, owner=False, notes=notes)
    return claim_output(plan)


def retarget(plan: ProfilePlan, output_dir: str) -> ProfilePlan:
    """``plan`` for ``output_dir``: ``build_plan`` again, on the config it was built from with
    that output directory (every path under it moves: launch commands, staging directories,
    the controller's reports)."""
    if plan.built_from is None:  # every plan comes from build_plan; a hand-made one cannot move
        raise ValueError("a plan not made by build_plan cannot move to another output_dir")
    inputs = plan.built_from
    return build_plan(dataclasses.replace(inputs.config, output_dir=output_dir), inputs.topology)


def _into_subdir(plan: ProfilePlan, directory: str, run_id: str, me: LockHolder,
                 why: str) -> Run:
    sub = os.path.join(directory, run_id)
    _makedirs(sub)
    holder, _ = run_lock.acquire(sub, me)
    if holder is not None:  # a run id is unique; someone made this very directory
        raise ConfigError(KEY, _in_use(sub, holder, run_id))
    note = f"{why}; this run writes into {sub}"
    return _claimed(retarget(plan, sub), run_id, (note,), directory)


def _move_aside(found: ExistingRunInfo) -> str:
    """Move the run ``found`` in its directory into ``<directory>/<its run id>/``: a rename of
    each of its top-level entries, so its manifest's relative paths hold there. One line
    saying where it went."""
    directory = found.directory
    name = paths.sanitize(found.run_id or "previous-" + (found.when or _mtime_stamp(directory)))
    target, n = os.path.join(directory, name), 1
    while os.path.lexists(target):
        n += 1
        target = os.path.join(directory, f"{name}-{n}")
    _makedirs(target)
    ours = {paths.MANIFEST_NAME, paths.SUMMARY_DIR}.intersection(os.listdir(directory))
    for entry in sorted([*ours, *_run_dirs(directory)]):
        try:
            os.rename(os.path.join(directory, entry), os.path.join(target, entry))
        except OSError as err:
            raise ConfigError(KEY, f"cannot move {os.path.join(directory, entry)} aside into "
                                   f"{target}: {err.strerror or err}; set {POLICY_KEY}=new_subdir "
                                   "to leave it where it is") from None
    who = f"run {found.run_id}" if found.run_id else "the run"
    return (f"{directory} held {found.describe()}: {who} moved to {target} "
            f"({POLICY_KEY}=move_aside); this run writes into {directory}")


def _mtime_stamp(directory: str) -> str:
    stamp = datetime.datetime.fromtimestamp(os.stat(directory).st_mtime, datetime.timezone.utc)
    return f"{stamp:%Y%m%d-%H%M%S}"


def _claimed(plan: ProfilePlan, run_id: str, notes: Tuple[str, ...], requested: str) -> Run:
    for note in notes:
        logger.warning("verlprof: %s", note)
    return Run(plan, run_id, owner=True, notes=notes, requested_dir=requested)


def _makedirs(directory: str) -> None:
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as err:
        raise ConfigError(KEY, f"{directory} cannot be created: {err.strerror or err}") \
            from None


def _in_use(directory: str, holder: LockHolder, run_id: str) -> str:
    return (f"{directory} is in use by {holder.describe()}; wait until it ends, choose another "
            f"{KEY}, or set {POLICY_KEY}=new_subdir to write this run into "
            f"{os.path.join(directory, run_id)} (if that run is gone, remove "
            f"{run_lock.lock_path(directory)})")


def _holds(found: ExistingRunInfo, run_id: str) -> str:
    return (f"{found.directory} already holds {found.describe()}; nothing was started. Set "
            f"{POLICY_KEY}=new_subdir to write this run into "
            f"{os.path.join(found.directory, run_id)}, choose another {KEY}, or set "
            f"{POLICY_KEY}=reuse to write over it")


def inspect(directory: str) -> Optional[str]:
    """For ``verlprof plan``: one line on what ``directory`` holds of another run (its lock
    or its manifest/reports), or None. Reads only."""
    directory = os.path.abspath(directory)
    holder = run_lock.read_lock(directory)
    if holder is not None and run_lock.stale_reason(holder) is None:
        return f"{directory} is in use by {holder.describe()}"
    found = existing_run(directory) if os.path.isdir(directory) else None
    return f"{directory} holds {found.describe()}" if found is not None else None
