"""A second ``verlprof report`` of an unchanged run prints the summary it printed before.

With the reads cached (:mod:`verlprof.report.read_cache`) and the files kept
(:mod:`verlprof.report.unchanged`), what was left of a second run on a small set was fixed
cost: importing rich, numpy, Pillow and the readers to print the same tables again (~0.25 s,
issue 17). Now a ``verlprof report`` that succeeded keeps what it printed on stdout, as
written (colours and all), in ``summary/.verlprof_console.json``, with what that text is a
function of; the next run that finds all of it as it was prints that text and stops, before
any of those imports (:func:`replay`, called by the CLI before it builds its parser).

What the printed text is a function of, all checked by :func:`replay`:

* the command line after ``report`` (as typed, so another spelling of the same options only
  prints afresh), the working directory, the interpreter (version and environment), the core
  count and the ``VERLPROF_*`` and ``PYTHON*`` variables;
* what rich decides the output looks like: whether stdin, stdout and stderr are terminals, the
  terminal's size (when stdout is one), stdout's encoding and the variables rich reads
  (``TERM``, ``COLUMNS``, ``NO_COLOR``, ...);
* the state (type, size, modification time, inode) of the manifest, of every report it lists
  (every file inside one that is a folder), of every folder under the output directory but
  ``summary/`` and ``.raw/`` (a new report or run there changes it), of the summary files and
  their stamp, of verlprof's modules, of rich's, and of Pillow's version file and the fonts
  when pictures are drawn.

Only a run that ends well, with one run in the directory, with nothing but the progress on
stderr, and with no report unreadable (a read error may not happen twice) is kept; the last
:data:`KEEP` renderings are kept (a terminal and a pipe, say). The file is written to a
temporary name and renamed; one that cannot be read is ignored.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import threading
import time
from typing import Any, Dict, Iterable, List, Optional, Sequence, TextIO

from verlprof import paths

RECORD_NAME = ".verlprof_console.json"
"""File name inside ``<output_dir>/summary/``."""
FORMAT = 1
"""Layout of the file; another value is ignored."""
KEEP = 4
"""Renderings kept per output directory (most recent first)."""

_VALUED = frozenset({"--threshold", "--min-excess-ms", "--jobs", "--memory-budget"})
_FLAGS = frozenset({"--per-step", "--no-picture"})
_RICH_ENV = frozenset({"TERM", "COLORTERM", "COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR",
                       "TTY_COMPATIBLE", "TTY_INTERACTIVE", "JUPYTER_COLUMNS", "JUPYTER_LINES",
                       "DATABRICKS_RUNTIME_VERSION"})
"""Variables rich's Console reads (rich/console.py)."""
_PROGRESS_PREFIX = "verlprof: reading reports"
"""What :class:`~verlprof.report.progress.Progress` writes reading reports, lines or bar."""
_CLOSING = re.compile(r"verlprof: reading reports: \d+/(\d+) done in .*")
_CSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
"""A terminal control sequence (the bar's colours, cursor moves, line erases)."""
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def output_dir_of(argv: Sequence[str]) -> Optional[str]:
    """The OUTPUT_DIR of ``verlprof report`` arguments written in the plain way (``--opt
    VALUE``, no ``--run``, no ``--help``); None for anything else, which is never replayed."""
    found: List[str] = []
    it = iter(argv)
    for token in it:
        if token in _VALUED:
            if next(it, None) is None:
                return None
        elif token in _FLAGS:
            continue
        elif token.startswith("-") or not token:
            return None
        else:
            found.append(token)
    return found[0] if len(found) == 1 else None


def state(path: str) -> Optional[List[int]]:
    """What identifies a file's content and place: type, size, mtime and inode (None when
    absent)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return [st.st_mode >> 12, st.st_size, st.st_mtime_ns, st.st_ino]


def _terminal_size() -> Optional[List[int]]:
    for fd in (0, 1, 2):  # as rich looks for it
        try:
            size = os.get_terminal_size(fd)
        except (OSError, ValueError):
            continue
        return [size.columns, size.lines]
    return None


def _isatty(stream: Optional[TextIO]) -> bool:
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError):
        return False


def key(argv: Sequence[str]) -> List[Any]:
    """Everything but files that the printed text depends on (see the module's docstring)."""
    ttys = [_isatty(s) for s in (sys.stdin, sys.stdout, sys.stderr)]
    env = sorted([k, v] for k, v in os.environ.items()
                 if k in _RICH_ENV or k.startswith(("VERLPROF_", "PYTHON")))
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = None
    return [FORMAT, list(argv), cwd, sys.prefix, sys.version, os.cpu_count(), env, ttys,
            _terminal_size() if ttys[1] else None, getattr(sys.stdout, "encoding", None),
            getattr(sys.stdout, "errors", None)]


def _record_path(output_dir: str) -> str:
    return os.path.join(output_dir, paths.SUMMARY_DIR, RECORD_NAME)


def _entries(output_dir: str) -> List[Dict[str, Any]]:
    try:
        with open(_record_path(output_dir), encoding="utf-8") as handle:
            data = json.load(handle)
        if data.get("format") == FORMAT and isinstance(data.get("entries"), list):
            return [e for e in data["entries"] if isinstance(e, dict)]
    except (OSError, ValueError, AttributeError):
        pass
    return []


def replay(argv: Sequence[str]) -> Optional[int]:
    """Print what the last ``verlprof report`` with these arguments printed, when nothing it
    depends on has changed since; returns the exit status (0), or None when the report must
    run. Never raises for a missing or damaged record."""
    began = time.monotonic()
    output_dir = output_dir_of(argv)
    if output_dir is None:
        return None
    wanted = key(argv)
    for entry in _entries(output_dir):
        if entry.get("key") != wanted:
            continue
        try:
            if any(state(path) != was for path, was in entry["probes"]):
                return None
            text, reads = str(entry["text"]), entry.get("reads")
        except (KeyError, TypeError, ValueError):
            return None
        sys.stdout.write(text)
        sys.stdout.flush()
        if isinstance(reads, int) and not _isatty(sys.stderr):  # a bar leaves nothing
            sys.stderr.write(f"verlprof: reading reports: {reads}/{reads} done in "
                             f"{time.monotonic() - began:.1f} s\n")
            sys.stderr.flush()
        return 0
    return None


class Tee:
    """A text stream that writes through to ``stream`` and keeps a copy of what it wrote;
    everything else (``isatty``, ``encoding``, ``fileno``) is the stream's, so rich decides as
    it would on the stream itself."""

    def __init__(self, stream: TextIO):
        self.stream = stream
        self.parts: List[str] = []
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            self.parts.append(text)
        return self.stream.write(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def text(self) -> str:
        with self._lock:
            return "".join(self.parts)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def progress_reads(parts: Sequence[str]) -> Optional[List[Optional[int]]]:
    """``[reads]`` when what was written on stderr (``parts``) is only the reading progress,
    its lines or a terminal's bar (``reads``: the total its closing line gave; None without
    one, as after a bar, which leaves nothing), else None: a run that said more on stderr (a
    warning, even one drawn above the bar) is not replayed."""
    reads: Optional[int] = None
    for line in re.split(r"[\r\n]", _CSI.sub("", "".join(parts))):
        if not line.strip():
            continue
        if not line.startswith(_PROGRESS_PREFIX):
            return None
        match = _CLOSING.fullmatch(line)
        if match is not None:
            reads = int(match.group(1))
    return [reads]


def input_probes(output_dir: str, report_paths: Sequence[str]) -> List[List[Any]]:
    """The manifest's and the reports' states (taken before and after the run: equal, or the
    run is not kept)."""
    out: List[List[Any]] = [[os.path.join(output_dir, paths.MANIFEST_NAME),
                             state(os.path.join(output_dir, paths.MANIFEST_NAME))]]
    for report in report_paths:
        out.append([report, state(report)])
        if os.path.isdir(report):  # a report that is a folder (rocprof-sys)
            for root, dirs, files in os.walk(report):
                dirs.sort()
                out += [[os.path.join(root, n), state(os.path.join(root, n))]
                        for n in sorted(dirs + files)]
    return out


def after_probes(output_dir: str, written: Iterable[str], extra: Iterable[str]) -> List[List[Any]]:
    """The states taken once the run is done: the folders under ``output_dir`` (as
    :func:`verlprof.report.runs.unlisted_reports` walks them), the summary files and their
    stamp, verlprof's and rich's modules and ``extra`` (Pillow, fonts)."""
    out: List[List[Any]] = []
    suffixes = tuple(paths.EXTENSIONS.values())
    for root, dirs, _ in os.walk(output_dir):
        out.append([root, state(root)])
        dirs[:] = sorted(d for d in dirs if d not in (paths.RAW_DIR, paths.SUMMARY_DIR)
                         and not d.endswith(suffixes))
    files = list(written)
    files += _modules(_PACKAGE)
    rich = sys.modules.get("rich")
    if rich is not None and getattr(rich, "__file__", None):
        files += _modules(os.path.dirname(str(rich.__file__)))
    files += list(extra)
    out += [[p, state(p)] for p in files]
    return out


def _modules(folder: str) -> List[str]:
    found = []
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        found += [os.path.join(root, n) for n in sorted(names) if n.endswith(".py")]
    return found


def keep(output_dir: str, wanted: List[Any], text: str, reads: Optional[int],
         probes: List[List[Any]]) -> None:
    """Add this rendering (``wanted``: its :func:`key`, taken before the run) to
    ``output_dir``'s record (the oldest beyond :data:`KEEP` go); never raises."""
    entry = {"key": wanted, "probes": probes, "text": text, "reads": reads}
    entries = [entry] + [e for e in _entries(output_dir) if e.get("key") != wanted]
    target = _record_path(output_dir)
    tmp = f"{target}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            # dumps, not dump: json.dump streams through the pure-Python encoder (~5x slower)
            handle.write(json.dumps({"format": FORMAT, "entries": entries[:KEEP]}))
        os.replace(tmp, target)
    except (OSError, ValueError):
        with contextlib.suppress(OSError):
            os.remove(tmp)

