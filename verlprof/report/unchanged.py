"""Summary files that are already what ``verlprof report`` would write are left as they are.

Running ``verlprof report`` again on a run that has not changed (to see the tables again, or
after a look at the pictures) used to draw and write the same five files again: with the
exports and the reads cached, drawing was most of the command's time on small runs. Now
:func:`summarize <verlprof.report.summary.summarize>` records, next to the files, a
fingerprint of everything they are made of and the size and modification time of each file it
wrote; the next run that computes the same fingerprint, and finds every file as it was left,
keeps them. The console output is printed in full either way.

The fingerprint covers:

* the analysed summary itself (records, step spans, windows, stragglers, missing and unreadable
  reports with their reasons, notes, warnings, the manifest, the threshold and minimum excess,
  the output directory): any change of the data or the options writes again;
* whether the pictures are wanted;
* the code that writes the files: verlprof's version and the size and modification time of
  each module of :mod:`verlprof.report` and of the modules they format with; Pillow's version
  and the font the pictures use.

A file that was deleted, rewritten or touched since, or a stamp that cannot be read, writes all
of them again. The stamp is written to a temporary name and renamed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import threading
from typing import Any, Dict, List, Optional

from verlprof.report.findings import Summary
from verlprof.report.timeline_png import FONT_FILES
from verlprof.version import __version__

STAMP_NAME = ".verlprof_summary_stamp.json"
"""File name inside ``<output_dir>/summary/``."""

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CODE_DIRS = ("report",)
_CODE_FILES = ("safe_text.py", "paths.py", "manifest.py", "records.py", "version.py")


def code_stamp(picture: bool) -> List[Any]:
    """What identifies the code that writes the files (stats only; Pillow's version when
    pictures are drawn)."""
    files = [os.path.join(_PACKAGE, name) for name in _CODE_FILES]
    for folder in _CODE_DIRS:
        with contextlib.suppress(OSError):
            files += sorted(os.path.join(_PACKAGE, folder, n)
                            for n in os.listdir(os.path.join(_PACKAGE, folder))
                            if n.endswith(".py"))
    stamp: List[Any] = [__version__]
    for path in files:
        with contextlib.suppress(OSError):
            st = os.stat(path)
            stamp.append([os.path.relpath(path, _PACKAGE), st.st_size, st.st_mtime_ns])
    if picture:  # Pillow by its version file (found, not imported: ~10 ms) and the font
        stamp.append([_pillow_version_file(), [p for p in FONT_FILES if os.path.exists(p)][:1]])
    return stamp


def picture_files() -> List[str]:
    """The files besides verlprof's own that the pictures depend on: Pillow's version file
    (when Pillow is found) and every font :mod:`~verlprof.report.timeline_png` may use (one
    that appears changes the pictures too)."""
    found = _pillow_version_file()
    return ([str(found[0])] if found else []) + list(FONT_FILES)


def _pillow_version_file() -> Optional[List[Any]]:
    """Path, size and mtime of Pillow's ``_version.py`` (None when Pillow is not found)."""
    from importlib.util import find_spec

    with contextlib.suppress(ImportError, ValueError, OSError, TypeError):
        spec = find_spec("PIL")
        if spec is not None and spec.origin:
            path = os.path.join(os.path.dirname(spec.origin), "_version.py")
            st = os.stat(path)
            return [path, st.st_size, st.st_mtime_ns]
    return None


def fingerprint(summary: Summary, picture: bool) -> str:
    """A digest of everything the summary files are made of (see the module's docstring)."""
    data = dataclasses.replace(summary, paths={}, read_seconds=0.0)
    digest = hashlib.sha256(repr(data).encode("utf-8", "backslashreplace"))
    digest.update(repr((picture, code_stamp(picture))).encode("utf-8", "backslashreplace"))
    return digest.hexdigest()


def _file_state(path: str) -> Optional[List[int]]:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def still_written(summary_dir: str, digest: str) -> Optional[Dict[str, str]]:
    """The files (name to path, in the order they were written) when the stamp in
    ``summary_dir`` has ``digest`` and each file is as it was left; else None."""
    try:
        with open(os.path.join(summary_dir, STAMP_NAME), encoding="utf-8") as handle:
            stamp = json.load(handle)
        if stamp.get("format") != 1 or stamp.get("fingerprint") != digest:
            return None
        files = stamp["files"]
        out: Dict[str, str] = {}
        for name, path, state in files:
            if os.path.dirname(path) != summary_dir or _file_state(path) != state:
                return None
            out[str(name)] = str(path)
        return out or None
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def record(summary_dir: str, digest: str, written: Dict[str, str]) -> None:
    """Remember ``written`` (name to path) as made from ``digest``; never raises."""
    files = [[name, path, _file_state(path)] for name, path in written.items()]
    if any(state is None for _, _, state in files):
        return
    tmp = os.path.join(summary_dir, f".stamp.{os.getpid()}.{threading.get_ident()}.tmp")
    with contextlib.suppress(OSError):
        try:
            with open(tmp, "w", encoding="utf-8") as handle:
                json.dump({"format": 1, "fingerprint": digest, "files": files}, handle)
            os.replace(tmp, os.path.join(summary_dir, STAMP_NAME))
        finally:
            with contextlib.suppress(OSError):
                os.remove(tmp)


def forget(summary_dir: str) -> None:
    """Drop the stamp (before the files are written again: a run that fails midway must not
    leave a stamp that vouches for half-written files)."""
    with contextlib.suppress(OSError):
        os.remove(os.path.join(summary_dir, STAMP_NAME))
