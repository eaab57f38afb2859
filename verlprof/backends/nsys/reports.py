"""Waiting for nsys reports to be finalised: judged by the files, never the exit code.

How a report is written
    While a window is open the CLI writes ``$TMPDIR/nsys-report-XXXX.qdstrm`` (``/tmp`` by
    default; ``NSYS_AGENT_TMP_DIR``). When the window closes (``-c nvtx``: the range ends) the
    qdstrm is complete; the agent then runs ``QdstrmImporter --input-file <qdstrm>
    --output-file <out>.nsys-rep``, which creates the ``.nsys-rep`` at size 0, fills it in
    place (no rename) within ~0.1 s, and the qdstrm is deleted. With ``--capture-range-end=
    repeat:N`` nsys 2022.4 imports *all* N reports only once the N-th window closes (or at
    application exit when fewer windows happened, or with plain ``repeat``): a report does not
    appear when its own window closes. :func:`wait_for_reports` therefore judges a report final
    when it is non-empty, its size and mtime did not change between two polls, no process holds
    it open, no ``QdstrmImporter`` names it as output, and no ``.qdstrm``/``.tmp`` sibling with
    its stem exists.
"""

from __future__ import annotations

import glob
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Set, Union

from verlprof.backends.nsys.procs import _pids, open_files
from verlprof.storage import write_problem

STALL_S = 3.0
"""After this long with no report file changing, the wait asks whether the directory can still
be written at all (a full disk: nsys cannot create its file, and waiting on is pointless)."""

PathLike = Union[str, "os.PathLike[str]"]


# ------------------------------------------------------------------------- waiting for files


@dataclass
class ReportWait:
    """Outcome of :func:`wait_for_reports`."""

    found: List[Path]
    """Finalised reports, sorted."""
    pending: List[Path]
    """Reports that exist but were still being written when the wait ended."""
    missing: List[str]
    """What is not there: literal paths not final, and a count line for short globs."""
    expected: int
    elapsed_s: float
    problem: Optional[str] = None
    """Why the wait gave up early: the directory cannot be written (full disk, read-only)."""

    @property
    def complete(self) -> bool:
        return not self.missing and not self.pending and len(self.found) >= self.expected


def _is_glob(s: str) -> bool:
    return any(ch in s for ch in "*?[")


def _busy_paths(candidates: Set[str]) -> Set[str]:
    """Candidates that a process holds open or that a QdstrmImporter names as its output."""
    busy: Set[str] = set()
    if not candidates:
        return busy
    for pid in _pids():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = [a.decode("utf-8", "replace") for a in fh.read().split(b"\0") if a]
        except OSError:
            continue
        if argv and "QdstrmImporter" in os.path.basename(argv[0]):
            for i, a in enumerate(argv[:-1]):
                if a == "--output-file":
                    busy.add(os.path.realpath(argv[i + 1]))
        for target in open_files(pid):
            if target in candidates:
                busy.add(target)
    return busy & candidates


def _has_temp_sibling(path: Path) -> bool:
    stem = path.name[: -len(".nsys-rep")] if path.name.endswith(".nsys-rep") else path.stem
    try:
        for e in os.scandir(path.parent):
            n = e.name
            if n != path.name and n.startswith(stem) and n.endswith((".qdstrm", ".tmp")):
                return True
    except OSError:
        pass
    return False


def wait_for_reports(patterns: Union[PathLike, Sequence[PathLike]],
                     expected_count: Optional[int] = None, timeout_s: float = 120.0,
                     poll_s: float = 0.5) -> ReportWait:
    """Wait until ``expected_count`` finalised reports match ``patterns`` (paths or globs).

    ``expected_count`` defaults to the number of entries (each literal path must exist; each
    glob must match at least once). Returns as soon as enough reports are final and none that
    matched is still being written, or at ``timeout_s`` with what is missing/pending.
    """
    items = [patterns] if isinstance(patterns, (str, os.PathLike)) else list(patterns)
    specs = [os.fspath(p) for p in items]
    literals = [s for s in specs if not _is_glob(s)]
    globs_ = [s for s in specs if _is_glob(s)]
    expected = expected_count if expected_count is not None else len(specs)
    t0 = time.monotonic()
    last: Dict[str, tuple] = {}
    changed_at = t0
    problem: Optional[str] = None
    folders = sorted({os.path.dirname(s) or "." for s in specs})
    while True:
        present: Set[str] = set()
        per_glob: Dict[str, Set[str]] = {}
        for s in literals:
            if os.path.isfile(s):
                present.add(os.path.realpath(s))
        for g in globs_:
            per_glob[g] = {os.path.realpath(p) for p in glob.glob(g) if os.path.isfile(p)}
            present.update(per_glob[g])
        stats: Dict[str, tuple] = {}
        for p in present:
            try:
                st = os.stat(p)
                stats[p] = (st.st_size, st.st_mtime_ns)
            except OSError:
                pass
        steady = {p for p, s in stats.items() if s[0] > 0 and last.get(p) == s
                  and not _has_temp_sibling(Path(p))}
        final = steady - _busy_paths(steady)
        now = time.monotonic()
        if stats != last:
            changed_at = now
        last = stats
        pending = sorted(set(stats) - final)
        missing = [s for s in literals if os.path.realpath(s) not in final]
        missing += [f"no finalised report matching {g}" for g in globs_
                    if not (per_glob.get(g, set()) & final)]
        elapsed = now - t0
        done = len(final) >= expected and not missing and not pending
        if not done and now - changed_at >= STALL_S:
            problem = next(filter(None, map(write_problem, folders)), None)
            changed_at = now  # ask again only after another quiet spell
        if done or elapsed >= timeout_s or problem:
            if len(final) < expected and not missing:
                missing.append(f"{expected - len(final)} more report(s) matching "
                               f"{', '.join(specs)} (expected {expected}, "
                               f"found {len(final)} finalised)")
            return ReportWait(sorted(Path(p) for p in final), [Path(p) for p in pending],
                              missing, expected, elapsed, problem)
        time.sleep(poll_s)

