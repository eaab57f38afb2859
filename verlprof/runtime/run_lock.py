"""The lock that makes one output directory one run's: ``<output_dir>/.verlprof.lock``.

It is created with ``O_CREAT | O_EXCL`` (atomic on local file systems and on NFSv3+, where
``O_EXCL`` is honoured by the server) and holds JSON naming its holder: run id, host, pid, the
start time, and on Linux the boot id and the process's start tick, so that a PID reused after
a reboot or by another process is not taken for the holder.

A lock is *stale* when its holder is certainly gone:

* same host, and the pid is not running (or runs another process: a different start tick, or
  another boot);
* another host, and the lock is older than :data:`OTHER_HOST_STALE_S` (this host cannot see
  that host's processes; a run that long is rare, and the message names the file to remove).

A stale lock is taken over with a warning. Two processes that find the same stale lock agree
on one winner: each must first create ``.verlprof.lock.takeover`` (``O_EXCL`` again), and it
re-reads the lock under it before removing it.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import socket
import time
from dataclasses import asdict, dataclass
from typing import Optional, Tuple

from verlprof.paths import LOCK_NAME, TAKEOVER_SUFFIX

OTHER_HOST_STALE_S = 3 * 24 * 3600.0
"""A lock held by another host is taken for stale after this long (3 days)."""
TAKEOVER_STALE_S = 60.0
"""A takeover marker left by a process that died while taking over is ignored after this."""
_UNREADABLE_GRACE_S = 10.0
"""A lock that cannot be parsed is being written (its holder writes right after creating it)
unless it is older than this."""


@dataclass(frozen=True)
class LockHolder:
    """Who holds (or held) an output directory's lock."""

    run_id: str
    host: str
    pid: int
    started: str
    """ISO-8601 UTC time the lock was taken."""
    started_s: float = 0.0
    """The same, as seconds since the epoch."""
    boot_id: str = ""
    """Linux boot id of the holder's host (empty elsewhere)."""
    proc_start: int = 0
    """The holder process's start time in clock ticks since boot (0 when unknown)."""

    def describe(self) -> str:
        """``run R (host h, pid 123, started T)``."""
        return f"run {self.run_id} (host {self.host}, pid {self.pid}, started {self.started})"


def this_process(run_id: str) -> LockHolder:
    """The holder record of the calling process for ``run_id``."""
    now = time.time()
    started = datetime.datetime.fromtimestamp(now, datetime.timezone.utc)
    return LockHolder(run_id=run_id, host=socket.gethostname(), pid=os.getpid(),
                      started=started.isoformat(timespec="seconds"), started_s=now,
                      boot_id=_boot_id(), proc_start=_proc_start(os.getpid()))


def lock_path(directory: str) -> str:
    return os.path.join(directory, LOCK_NAME)


def read_lock(directory: str) -> Optional[LockHolder]:
    """The holder named by ``directory``'s lock; None when there is none or it is unreadable."""
    try:
        with open(lock_path(directory), encoding="utf-8") as handle:
            data = json.load(handle)
        return LockHolder(run_id=str(data["run_id"]), host=str(data["host"]),
                          pid=int(data["pid"]), started=str(data.get("started", "")),
                          started_s=float(data.get("started_s", 0.0)),
                          boot_id=str(data.get("boot_id", "")),
                          proc_start=int(data.get("proc_start", 0)))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def stale_reason(holder: LockHolder, now: Optional[float] = None) -> Optional[str]:
    """Why ``holder`` is certainly gone, or None while it may still run."""
    if holder.host == socket.gethostname():
        if holder.boot_id and holder.boot_id != _boot_id():
            return f"host {holder.host} has rebooted since"
        if not _alive(holder.pid):
            return f"pid {holder.pid} is not running on {holder.host}"
        if holder.proc_start and holder.proc_start != _proc_start(holder.pid):
            return f"pid {holder.pid} on {holder.host} is another process now"
        return None
    age = (time.time() if now is None else now) - holder.started_s
    if holder.started_s and age > OTHER_HOST_STALE_S:
        return f"taken on another host {age / 3600:.0f} h ago"
    return None


def acquire(directory: str, me: LockHolder) -> Tuple[Optional[LockHolder], Optional[str]]:
    """Take ``directory``'s lock for ``me``. Returns ``(None, note)`` when taken (``note``
    says which stale lock was taken over, else None) and ``(holder, None)`` when another run
    holds it (``holder`` may be a placeholder while its JSON is still being written)."""
    path = lock_path(directory)
    reason: Optional[str]
    for _ in range(5):
        if _create(path, me):
            return None, None
        holder = read_lock(directory)
        if holder is None:
            age = _age(path)
            if age is None:
                continue  # released meanwhile: try again
            if age < _UNREADABLE_GRACE_S:
                return LockHolder(run_id="?", host="?", pid=0, started="just now"), None
            reason = "its lock file is unreadable"
        else:
            reason = stale_reason(holder)
            if reason is None:
                return holder, None
        if _take_over(directory, holder, me):
            what = holder.describe() if holder is not None else "an unknown run"
            return None, (f"took over the stale lock {path} of {what}: {reason}")
    holder = read_lock(directory)
    return holder or LockHolder(run_id="?", host="?", pid=0, started="?"), None


def release(directory: str, run_id: str) -> bool:
    """Remove ``directory``'s lock if ``run_id`` still holds it (idempotent)."""
    holder = read_lock(directory)
    if holder is None or holder.run_id != run_id:
        return False
    with contextlib.suppress(FileNotFoundError):
        os.unlink(lock_path(directory))
    return True


def _create(path: str, me: LockHolder) -> bool:
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(asdict(me), handle)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    return True


def _take_over(directory: str, seen: Optional[LockHolder], me: LockHolder) -> bool:
    """Replace the stale lock ``seen`` by ``me``, one process at a time."""
    path = lock_path(directory)
    marker = path + TAKEOVER_SUFFIX
    if not _create(marker, me):
        age = _age(marker)
        if age is None or age < TAKEOVER_STALE_S:
            return False  # another process is taking it over right now
        with contextlib.suppress(FileNotFoundError):
            os.unlink(marker)  # left by a process that died while taking over
        if not _create(marker, me):
            return False
    try:
        if read_lock(directory) != seen:  # changed since we judged it: judge again
            return False
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return _create(path, me)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(marker)


def _age(path: str) -> Optional[float]:
    try:
        return time.time() - os.stat(path).st_mtime
    except FileNotFoundError:
        return None


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def _proc_start(pid: int) -> int:
    """Field 22 of ``/proc/<pid>/stat`` (start time in ticks since boot); 0 when unknown."""
    try:
        with open(f"/proc/{int(pid)}/stat", encoding="ascii", errors="replace") as handle:
            text = handle.read()
        return int(text.rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return 0
