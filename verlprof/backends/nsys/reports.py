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

Who writes them
    The session's agent (``nsys --start-agent --session-name=profile-<app>-<CLI pid>``) and its
    importer write every report; the ``nsys profile`` CLI lives as long as its target. Given
    the :class:`ReportWriter`, the wait stops as soon as nothing of the session is left (CLI,
    agents) and the target has ended too, with no report being written: no file can come any
    more, and polling on to the deadline only hides that.
"""

from __future__ import annotations

import glob
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Protocol, Sequence, Set, Tuple, Union

from verlprof.backends.nsys.procs import (
    all_pids,
    is_nsys,
    list_agents,
    live_process,
    open_files,
    proc_info,
)
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
    """Why the wait gave up early: the directory cannot be written (full disk, read-only), or
    the writer is gone (its nsys session and target ended; names both)."""

    @property
    def complete(self) -> bool:
        return not self.missing and not self.pending and len(self.found) >= self.expected


def _is_glob(s: str) -> bool:
    return any(ch in s for ch in "*?[")


def busy_paths(candidates: Set[str]) -> Set[str]:
    """Candidates that a process holds open or that a QdstrmImporter names as its output."""
    busy: Set[str] = set()
    if not candidates:
        return busy
    for pid in all_pids():
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


def has_temp_sibling(path: Path) -> bool:
    stem = path.name[: -len(".nsys-rep")] if path.name.endswith(".nsys-rep") else path.stem
    try:
        for e in os.scandir(path.parent):
            n = e.name
            if n != path.name and n.startswith(stem) and n.endswith((".qdstrm", ".tmp")):
                return True
    except OSError:
        pass
    return False


# ------------------------------------------------------------------ who writes the reports


@dataclass(frozen=True)
class ReportWriter:
    """Who writes the awaited reports: an ``nsys profile`` CLI, whose session's agents are
    named ``profile-<app>-<cli_pid>``, and the process it profiles."""

    cli_pid: int
    target_pid: Optional[int] = None
    """None: not known (then only the session is asked)."""


class WriterProbe(Protocol):
    """What the wait asks the system about a writer (replaced by a fake in unit tests)."""

    def session(self, cli_pid: int) -> Tuple[List[int], Optional[str]]:
        """Live processes of the session of ``cli_pid`` (the CLI, its agents), and the
        session's name when an agent shows it."""

    def alive(self, pid: int) -> bool:
        """Whether ``pid`` runs (a zombie does not)."""


class ProcProbe:
    """:class:`WriterProbe` reading ``/proc``."""

    def session(self, cli_pid: int) -> Tuple[List[int], Optional[str]]:
        agents = [a for a in list_agents() if a.owner_pid == cli_pid]
        cli = live_process(cli_pid)
        live = [a.pid for a in agents]
        if cli is not None and is_nsys(cli.cmdline):
            live.append(cli_pid)
        return live, next((a.session_name for a in agents if a.session_name), None)

    def alive(self, pid: int) -> bool:
        return live_process(pid) is not None


class WriterWatch:
    """Decides that a writer is gone: nothing of its session and not its target (unless the
    target is the waiting process: it never writes a report itself) seen on two looks in a
    row (one look could fall between an agent's fork and its exec)."""

    def __init__(self, writer: ReportWriter, probe: Optional[WriterProbe] = None):
        self.writer = writer
        self.probe: WriterProbe = probe or ProcProbe()
        self.name = f"profile-*-{writer.cli_pid}"
        self._quiet = 0

    def gone(self) -> Optional[str]:
        """None while the writer may still write; else why no report can come, one line."""
        live, name = self.probe.session(self.writer.cli_pid)
        self.name = name or self.name
        target = self.writer.target_pid
        waiting_on_self = target == os.getpid()
        if live or (target and not waiting_on_self and self.probe.alive(target)):
            self._quiet = 0
            return None
        self._quiet += 1
        if self._quiet < 2:
            return None
        whose = ("this process" if waiting_on_self else "target") + (f" pid {target}" if target
                                                                     else " (pid unknown)")
        return (f"nsys session {self.name} (CLI pid {self.writer.cli_pid}) ended and its "
                f"{whose} {'never writes it' if waiting_on_self else 'too'}; no report came")


def own_writer(levels: int = 8) -> Optional[ReportWriter]:
    """This process's writer when it runs under ``nsys profile`` (the CLI is an ancestor,
    behind ``nsys-launcher``); None otherwise."""
    pid = os.getpid()
    for _ in range(levels):
        info = proc_info(pid)
        if info is None or info.ppid <= 1:
            return None
        pid = info.ppid
        parent = proc_info(pid)
        if parent is not None and is_nsys(parent.cmdline) and "profile" in parent.cmdline:
            return ReportWriter(cli_pid=pid, target_pid=os.getpid())
    return None


# ------------------------------------------------------------------------------ the wait


def wait_for_reports(patterns: Union[PathLike, Sequence[PathLike]],
                     expected_count: Optional[int] = None, timeout_s: float = 120.0,
                     poll_s: float = 0.5, writer: Optional[ReportWriter] = None,
                     probe: Optional[WriterProbe] = None) -> ReportWait:
    """Wait until ``expected_count`` finalised reports match ``patterns`` (paths or globs).

    ``expected_count`` defaults to the number of entries (each literal path must exist; each
    glob must match at least once). Returns as soon as enough reports are final and none that
    matched is still being written; or, given the ``writer``, as soon as it is gone (its
    session and target ended, nothing being written; ``problem`` says so); or at
    ``timeout_s``, with what is missing/pending.
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
    watch = WriterWatch(writer, probe) if writer is not None else None
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
                  and not has_temp_sibling(Path(p))}
        final = steady - busy_paths(steady)
        now = time.monotonic()
        quiet = stats == last
        if not quiet:
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
        if not done and not problem and watch is not None and quiet and not pending:
            problem = watch.gone()
        if done or elapsed >= timeout_s or problem:
            if len(final) < expected and not missing:
                missing.append(f"{expected - len(final)} more report(s) matching "
                               f"{', '.join(specs)} (expected {expected}, "
                               f"found {len(final)} finalised)")
            return ReportWait(sorted(Path(p) for p in final), [Path(p) for p in pending],
                              missing, expected, elapsed, problem)
        time.sleep(poll_s)

