"""The output directory's file system: is it still writable, room kept for the manifest, and
is it one file system on every node (then a report is renamed where it was written).

A disk that fills during a run must not hang it: nsys cannot create its files, and a wait for a
report that will never appear would last the whole finalize timeout. :func:`write_problem` tells
a waiter, in one phrase, that waiting is pointless. And a full disk must not cost the run its
manifest (the list of what was written): :class:`SpaceReserve` holds a little room from the
start of the run and gives it back just before the manifest is written.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from typing import Optional

from verlprof.manifest import free_space
from verlprof.paths import RESERVE_NAME, probe_path
from verlprof.records import FileStamp

FULL_BELOW_BYTES = 1 << 20
"""A file system with less free space than this counts as full: no report fits any more."""

RESERVE_PER_REPORT_BYTES = 2048
"""Room per planned report (an entry of manifest.json is well under 1 KiB)."""

RESERVE_MIN_BYTES = 1 << 20
RESERVE_MAX_BYTES = 64 << 20


def write_problem(directory: str) -> Optional[str]:
    """Why nothing more can be written under ``directory`` (full, read-only, gone), or None.

    Cheap enough to call every few seconds: one ``statvfs`` and, when that finds room, a
    one-byte probe file (a read-only remount or lost permissions show only on a write)."""
    try:
        free = shutil.disk_usage(directory).free
    except OSError as err:
        return f"{directory}: {err.strerror or err}"
    if free < FULL_BELOW_BYTES:
        return f"{directory}: {os.strerror(errno.ENOSPC)} ({free_space(directory)})"
    probe = probe_path(directory)
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, b"\0")
        finally:
            os.close(fd)
    except OSError as err:
        return f"{directory}: {err.strerror or err} ({free_space(directory)})"
    finally:
        with contextlib.suppress(OSError):
            os.unlink(probe)
    return None


def reserve_bytes(reports: int) -> int:
    """The room to hold for a manifest listing ``reports`` entries (bounded both ways)."""
    return max(RESERVE_MIN_BYTES, min(RESERVE_MAX_BYTES, reports * RESERVE_PER_REPORT_BYTES))


class SpaceReserve:
    """Room held in ``directory`` from the run's start until the manifest is written.

    Allocated for real (``posix_fallocate``, else written), so that a disk filled by the
    reports still has room for the manifest once :meth:`release` gives it back. Best effort:
    a directory that cannot hold it simply gets no reserve (preflight already judged it)."""

    def __init__(self, directory: str, nbytes: int):
        self.path = os.path.join(directory, RESERVE_NAME)
        self.held = 0
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        except OSError:
            return
        try:
            try:
                os.posix_fallocate(fd, 0, nbytes)
            except (AttributeError, OSError):
                block = b"\0" * (1 << 16)
                for _ in range(0, nbytes, len(block)):
                    os.write(fd, block)
            self.held = nbytes
        except OSError:
            self.release()
        finally:
            os.close(fd)

    def release(self) -> None:
        """Give the room back (idempotent)."""
        release_reserve(os.path.dirname(self.path))
        self.held = 0


def release_reserve(directory: str) -> None:
    """Give back the room held in ``directory``, also one a process that is gone left there
    (idempotent)."""
    with contextlib.suppress(OSError):
        os.unlink(os.path.join(directory, RESERVE_NAME))


__all__ = ["FULL_BELOW_BYTES", "RESERVE_NAME", "SpaceReserve", "release_reserve",
           "reserve_bytes", "write_problem"]


def stamp_of(path: str) -> Optional[FileStamp]:
    """``path``'s stamp on this node; None when it is not a regular file here."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return FileStamp(inode=st.st_ino, size=st.st_size, mtime_ns=st.st_mtime_ns)


def seen_here(path: str, stamp: Optional[FileStamp]) -> bool:
    """True when this node sees at ``path`` the very file another node stamped: output_dir is
    one file system on both. The nanosecond modification time with the inode tells it from a
    same-named file on a node's own disk; a client's attribute cache that lags (NFS) only
    sends the file the slow way, over Ray."""
    return stamp is not None and stamp_of(path) == stamp
