"""Running the real ``nsys`` safely: argv only, always a timeout, never an agent left behind.

What this module relies on (observed with nsys 2022.4.2.1 on a GPU-less Debian 12 machine):

Processes of one ``nsys profile`` run
    ``nsys profile`` (the CLI) spawns ``nsys --start-agent --session-name=profile-<app>-<CLI pid>
    --shm-name=...``, which double-forks and ``setsid()``s: the agent that does the work runs in
    its own session with PPID 1 (or the nearest subreaper) *while the run is healthy*. The
    profiled application is started by ``nsys-launcher`` in yet another session. Killing the
    CLI's process group therefore reaches neither the agent nor the application. All of them,
    and the ``QdstrmImporter`` the agent starts, inherit the CLI's environment, so
    :func:`run_nsys` puts a unique marker variable (:data:`MARKER_ENV`) into it and, on timeout,
    ends exactly the processes that carry its marker (read from ``/proc/<pid>/environ``) plus
    the CLI's process group. Agents of other runs are never touched.

Orphaned agents
    PPID 1 alone does not make an agent orphaned (see above). :func:`reap_orphan_agents` ends
    agents whose owning CLI, named by the PID at the end of ``--session-name=profile-*-<pid>``,
    is gone (or that PID now belongs to a younger, non-nsys process). Agents whose session name
    carries no PID (``nsys launch --session-new=NAME``) cannot be attributed and are left alone.

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

Exit codes
    nsys exits 0 after writing nothing in many cases (output directory missing: it silently
    writes ``/tmp/nsys-report-XXXX.nsys-rep`` instead; capture range never opened; ...). Judge by
    files. ``nsys export`` on a truncated or non-report file exits 1 at once with a one-line
    ``Exportation error: ...``. ``nsys profile`` in 2022.4 rejects ``--`` before the application.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Set, Union

from verlprof.report.nsys_sqlite import ReportReadError

MARKER_ENV = "VERLPROF_NSYS_RUN"
"""Environment variable carrying a per-call marker into every process an nsys call starts."""

DEFAULT_KILL_GRACE_S = 2.0
"""Seconds between SIGTERM and SIGKILL when ending a timed-out run."""

DEFAULT_LINGER_S = 10.0
"""After a normal exit, how long marked processes (the agent finishing up) may keep running."""

_COMMON_LOCATIONS = ("/usr/local/cuda/bin/nsys", "/opt/nvidia/nsight-systems/*/bin/nsys",
                     "/usr/local/cuda-*/bin/nsys", "/opt/nvidia/nsight-systems-cli/*/bin/nsys")

PathLike = Union[str, "os.PathLike[str]"]


class NsysError(RuntimeError):
    """nsys could not do what was asked (not found, failed, timed out)."""


class NsysExportError(NsysError, ReportReadError):
    """``nsys export`` produced no sqlite for a report (truncated, corrupt, missing, timeout)."""


class NsysResult(subprocess.CompletedProcess):
    """``subprocess.CompletedProcess`` plus what :func:`run_nsys` had to do."""

    def __init__(self, args, returncode, stdout="", stderr="", *, timed_out=False,
                 killed: Optional[List[int]] = None, elapsed_s: float = 0.0,
                 pid: Optional[int] = None, marker: Optional[str] = None):
        super().__init__(args, returncode, stdout, stderr)
        self.timed_out = timed_out
        self.killed: List[int] = list(killed or [])
        self.elapsed_s = elapsed_s
        self.pid = pid
        """PID of the process started (the nsys CLI)."""
        self.removed_files: List[str] = []
        """Temporary nsys files of a timed-out run that :func:`run_nsys` deleted."""
        self.marker = marker
        """Value of :data:`MARKER_ENV` in every process of this call (see
        :func:`marked_processes`)."""

    def error_line(self) -> Optional[str]:
        """The first meaningful error line of the output, if any."""
        return first_error_line(self.stderr, self.stdout, failed=self.returncode != 0)


# ----------------------------------------------------------------------------------- locating


def find_nsys(executable: str = "nsys") -> Optional[str]:
    """Absolute path of ``executable`` on PATH (or an absolute path that exists), else common
    install locations; ``None`` when there is no nsys."""
    if os.sep in executable:
        p = Path(executable)
        return str(p.resolve()) if p.is_file() and os.access(p, os.X_OK) else None
    found = shutil.which(executable)
    if found:
        return found
    if executable != "nsys":
        return None
    for pattern in _COMMON_LOCATIONS:
        for cand in sorted(glob.glob(pattern), reverse=True):
            if os.path.isfile(cand) and os.access(cand, os.X_OK):
                return cand
    return None


_VERSION_RE = re.compile(r"(\d{4}\.\d+(?:\.\d+){0,2})")


def parse_nsys_version(text: str) -> Optional[str]:
    """``"NVIDIA Nsight Systems version 2022.4.2.1-df9881f"`` → ``"2022.4.2.1"``."""
    m = _VERSION_RE.search(text or "")
    return m.group(1) if m else None


@lru_cache(maxsize=16)
def nsys_version(exe: str = "nsys", timeout_s: float = 30.0) -> Optional[str]:
    """The version of nsys ``exe`` (e.g. ``"2022.4.2.1"``), ``None`` if it cannot be run."""
    path = find_nsys(exe)
    if path is None:
        return None
    try:
        res = run_nsys([path, "--version"], timeout_s)
    except OSError:
        return None
    if res.timed_out:
        return None
    return parse_nsys_version(res.stdout + "\n" + res.stderr)


def version_tuple(version: Optional[str]) -> tuple:
    """``"2022.4.2.1"`` → ``(2022, 4, 2, 1)``; ``None`` → ``()``."""
    return tuple(int(x) for x in version.split(".")) if version else ()


# --------------------------------------------------------------------------------- /proc bits


@dataclass(frozen=True)
class ProcInfo:
    """One process as seen in ``/proc``."""

    pid: int
    ppid: int
    pgid: int
    sid: int
    state: str
    start_ticks: int
    cmdline: List[str] = field(default_factory=list)


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _pids() -> List[int]:
    try:
        return [int(n) for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return []


def proc_info(pid: int) -> Optional[ProcInfo]:
    """``ProcInfo`` for ``pid``, ``None`` if it is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode("utf-8", "replace")
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    rest = stat[stat.rfind(")") + 2:].split()
    try:
        state, ppid, pgid, sid = rest[0], int(rest[1]), int(rest[2]), int(rest[3])
        start = int(rest[19])
    except (IndexError, ValueError):
        return None
    argv = [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]
    return ProcInfo(pid, ppid, pgid, sid, state, start, argv)


def _uptime_s() -> float:
    try:
        with open("/proc/uptime") as fh:
            return float(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0


def proc_age_s(info: ProcInfo) -> float:
    """Seconds since ``info``'s process started."""
    return max(0.0, _uptime_s() - info.start_ticks / _CLK_TCK)


def _has_marker(pid: int, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            env = fh.read()
    except OSError:
        return False
    return needle in env.split(b"\0")


def marked_processes(marker: str) -> List[int]:
    """Live (non-zombie) processes whose environment has ``MARKER_ENV=marker``."""
    needle = f"{MARKER_ENV}={marker}".encode()
    me = os.getpid()
    out = []
    for pid in _pids():
        if pid == me or not _has_marker(pid, needle):
            continue
        info = proc_info(pid)
        if info is not None and info.state not in ("Z", "X"):
            out.append(pid)
    return out


def _group_members(pgid: int) -> List[int]:
    out = []
    for pid in _pids():
        info = proc_info(pid)
        if info is not None and info.pgid == pgid and info.state not in ("Z", "X"):
            out.append(pid)
    return out


def _signal(pid: int, sig: int) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def terminate_processes(find: Callable[[], Iterable[int]], grace_s: float = DEFAULT_KILL_GRACE_S,
                        deadline_s: float = 15.0) -> List[int]:
    """SIGTERM what ``find()`` returns, SIGKILL what is still there after ``grace_s``; repeat
    (new processes may appear meanwhile) until ``find()`` is empty or ``deadline_s`` passed.
    Returns every PID signalled."""
    signalled: Set[int] = set()
    start = time.monotonic()
    termed_at: Dict[int, float] = {}
    while True:
        now = time.monotonic()
        alive = [p for p in find() if p != os.getpid()]
        if not alive or now - start > deadline_s:
            break
        for pid in alive:
            if pid not in termed_at:
                if _signal(pid, signal.SIGTERM):
                    signalled.add(pid)
                termed_at[pid] = now
            elif now - termed_at[pid] >= grace_s and _signal(pid, signal.SIGKILL):
                signalled.add(pid)
        time.sleep(0.05)
    return sorted(signalled)


# ----------------------------------------------------------------------------------- running


def run_nsys(argv: Sequence[str], timeout_s: float, *, env: Optional[Dict[str, str]] = None,
             cwd: Optional[PathLike] = None, kill_grace_s: float = DEFAULT_KILL_GRACE_S,
             linger_s: float = DEFAULT_LINGER_S) -> NsysResult:
    """Run ``argv`` (a list, never a shell string; ``argv[0]`` is nsys or any program) with a
    timeout, and leave nothing behind.

    The call gets its own session and a unique :data:`MARKER_ENV` marker. On timeout the
    process group and every process carrying the marker (the ``nsys --start-agent`` daemon, the
    profiled application, importers) are SIGTERMed, then SIGKILLed after ``kill_grace_s``. After a
    normal exit, marked processes may finish for ``linger_s`` before being ended the same way.
    After a timeout the ``nsys-report-*.qdstrm`` streams those processes held open and their
    ``nsys_termination_status_<pid>`` files are deleted (nsys would have removed them).
    Returns :class:`NsysResult` (``timed_out``, ``killed``, ``elapsed_s``); never raises for a
    non-zero exit. Raises ``TypeError`` for a string argv, ``OSError`` if it cannot start.
    """
    if isinstance(argv, (str, bytes)):
        raise TypeError("run_nsys takes an argv list, not a shell string")
    args = [os.fspath(a) for a in argv]
    marker = uuid.uuid4().hex
    full_env = dict(os.environ if env is None else env)
    full_env[MARKER_ENV] = marker
    t0 = time.monotonic()
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=full_env, cwd=cwd,
                            start_new_session=True)
    timed_out = False
    killed: List[int] = []
    removed: List[str] = []

    temp_files: Set[str] = set()

    def ours() -> List[int]:
        pids = set(marked_processes(marker))
        if proc.poll() is None:
            pids.add(proc.pid)
        pids.update(_group_members(proc.pid))
        temp_files.update(_nsys_temp_files(pids))
        return sorted(pids)

    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        killed = terminate_processes(ours, grace_s=kill_grace_s)
        tmpdir = full_env.get("NSYS_AGENT_TMP_DIR") or full_env.get("TMPDIR") or "/tmp"
        temp_files.update(os.path.join(tmpdir, f"nsys_termination_status_{p}") for p in killed)
        for path in sorted(temp_files):  # what the killed run would have deleted itself
            with contextlib.suppress(OSError):
                os.unlink(path)
                removed.append(path)
        try:
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILLed above
            proc.kill()
            out, err = proc.communicate()
    except BaseException:
        terminate_processes(ours, grace_s=kill_grace_s)
        proc.wait()
        raise
    else:
        end = time.monotonic() + linger_s
        while marked_processes(marker) and time.monotonic() < end:
            time.sleep(0.05)
        if marked_processes(marker):
            killed = terminate_processes(lambda: marked_processes(marker), grace_s=kill_grace_s)
    rc = proc.returncode if proc.returncode is not None else -9
    result = NsysResult(args, rc, _decode(out), _decode(err), timed_out=timed_out,
                        killed=killed, elapsed_s=time.monotonic() - t0, pid=proc.pid,
                        marker=marker)
    result.removed_files = removed
    return result


_TEMP_RE = re.compile(r"^nsys-report-[0-9a-fA-F]+\.qdstrm$")


def _nsys_temp_files(pids: Iterable[int]) -> Set[str]:
    """``nsys-report-XXXX.qdstrm`` files that ``pids`` hold open (the agent writes them)."""
    out: Set[str] = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if _TEMP_RE.match(os.path.basename(target)):
                out.add(target)
    return out


def _decode(data: Optional[bytes]) -> str:
    return data.decode("utf-8", "replace") if data else ""


_PROGRESS_RE = re.compile(r"\[\s*=*\s*\d+%|^\[\d+/\d+\]|^Exporting \d+ events")
_NOISE_PREFIXES = ("usage:", "try 'nsys", "generating '", "generated:", "processing [")
_ERROR_RE = re.compile(r"^(error|fatal|failed|illegal|unrecognised|unrecognized|unknown option|"
                       r"option is ambiguous|exportation error|invalid|cannot|could not|"
                       r"missing)\b|\berror:", re.IGNORECASE)


def meaningful_lines(*texts: str) -> List[str]:
    """Non-empty output lines without progress bars and usage boilerplate."""
    out = []
    for text in texts:
        for line in re.split(r"[\r\n]+", text or ""):
            s = line.strip()
            if not s or _PROGRESS_RE.search(s) or s.lower().startswith(_NOISE_PREFIXES):
                continue
            out.append(s)
    return out


def first_error_line(stderr: str, stdout: str = "", failed: bool = True) -> Optional[str]:
    """The line that explains an nsys failure: the first error-looking line, or when ``failed``
    the first meaningful stderr line (then stdout). ``None`` when nothing looks wrong."""
    lines = meaningful_lines(stderr, stdout)
    for s in lines:
        if _ERROR_RE.search(s):
            return s
    if failed:
        err_lines = meaningful_lines(stderr) or lines
        return err_lines[0] if err_lines else None
    return None


def _tail(text: str, n: int = 5) -> str:
    lines = meaningful_lines(text)
    return " | ".join(lines[-n:]) if lines else "(no output)"


# ---------------------------------------------------------------------------- orphan agents


@dataclass(frozen=True)
class AgentProcess:
    """One ``nsys --start-agent`` process."""

    pid: int
    ppid: int
    session_name: Optional[str]
    owner_pid: Optional[int]
    age_s: float
    cmdline: List[str]


_SESSION_PID_RE = re.compile(r"^profile-.*-(\d+)$")


def _is_nsys(argv: Sequence[str]) -> bool:
    return bool(argv) and os.path.basename(argv[0]) == "nsys"


def list_agents() -> List[AgentProcess]:
    """Every visible ``nsys --start-agent`` process (zombies excluded)."""
    out = []
    for pid in _pids():
        info = proc_info(pid)
        if info is None or info.state in ("Z", "X") or not _is_nsys(info.cmdline):
            continue
        if "--start-agent" not in info.cmdline:
            continue
        session = None
        for a in info.cmdline:
            if a.startswith("--session-name="):
                session = a.split("=", 1)[1]
        m = _SESSION_PID_RE.match(session or "")
        out.append(AgentProcess(pid, info.ppid, session, int(m.group(1)) if m else None,
                                proc_age_s(info), list(info.cmdline)))
    return out


def _owner_alive(agent: AgentProcess) -> bool:
    if agent.owner_pid is None:
        return True  # unattributable: treat as owned
    owner = proc_info(agent.owner_pid)
    if owner is None or owner.state in ("Z", "X"):
        return False
    # PID reuse: the owner must be an nsys process at least as old as the agent
    return _is_nsys(owner.cmdline) and proc_age_s(owner) + 1.0 >= agent.age_s


def orphan_agents(older_than_s: float = 60.0) -> List[AgentProcess]:
    """Agents older than ``older_than_s`` whose owning ``nsys`` CLI is gone."""
    return [a for a in list_agents() if a.age_s >= older_than_s and not _owner_alive(a)]


def reap_orphan_agents(older_than_s: float = 60.0, grace_s: float = DEFAULT_KILL_GRACE_S,
                       dry_run: bool = False) -> List[AgentProcess]:
    """End :func:`orphan_agents` (SIGTERM, then SIGKILL after ``grace_s``); return them.

    Only agents attributable to a dead CLI (``--session-name=profile-*-<pid>``) are ended; a
    live run's agent also has PPID 1, so PPID alone is never the criterion. The
    ``nsys-report-*.qdstrm`` capture streams those agents held open are deleted with them.
    """
    victims = orphan_agents(older_than_s)
    if victims and not dry_run:
        wanted = {a.pid for a in victims}
        streams = _nsys_temp_files(wanted)

        def still() -> List[int]:
            return [a.pid for a in list_agents() if a.pid in wanted]

        terminate_processes(still, grace_s=grace_s)
        for path in streams:  # capture streams nobody will import any more
            with contextlib.suppress(OSError):
                os.unlink(path)
    return victims


# --------------------------------------------------------------------------------- exporting


def sqlite_path_for(report_path: PathLike) -> Path:
    """``dir/name.nsys-rep`` → ``dir/name.sqlite`` (``w_1.2.nsys-rep`` → ``w_1.2.sqlite``)."""
    p = Path(report_path)
    name = p.name[: -len(".nsys-rep")] if p.name.endswith(".nsys-rep") else p.stem
    return p.with_name(name + ".sqlite")


def _is_sqlite(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


def export_sqlite(report_path: PathLike, timeout_s: float = 120.0, *,
                  out_path: Optional[PathLike] = None, nsys_exe: str = "nsys",
                  force: bool = False) -> Path:
    """Export ``report.nsys-rep`` to ``report.sqlite`` next to it (or ``out_path``) and return it.

    Skipped when that sqlite exists and is at least as new as the report (unless ``force``).
    nsys writes to a private temporary name in the same directory which is then renamed into
    place, so concurrent calls (threads or processes) never see a half-written file. Success is
    judged by the file, not nsys' exit code. Raises :class:`NsysExportError` (a
    :class:`~verlprof.report.nsys_sqlite.ReportReadError`) with nsys' output tail otherwise.
    """
    rep = Path(report_path)
    out = Path(out_path) if out_path is not None else sqlite_path_for(rep)
    try:
        rep_stat = rep.stat()
    except OSError as exc:
        raise NsysExportError(f"cannot export {rep}: {exc.strerror or exc}") from exc
    if not force:
        try:
            if out.stat().st_mtime_ns >= rep_stat.st_mtime_ns and _is_sqlite(out):
                return out
        except OSError:
            pass
    exe = find_nsys(nsys_exe)
    if exe is None:
        raise NsysExportError(f"cannot export {rep}: nsys executable {nsys_exe!r} not found")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.{os.getpid()}.{threading.get_ident()}."
                        f"{uuid.uuid4().hex[:8]}.tmp.sqlite")
    try:
        res = run_nsys([exe, "export", "--type", "sqlite", "-f", "true", "-o", str(tmp),
                        str(rep)], timeout_s)
        if res.timed_out:
            raise NsysExportError(f"nsys export of {rep} timed out after {timeout_s:g}s: "
                                  f"{_tail(res.stderr + chr(10) + res.stdout)}")
        if not (tmp.is_file() and tmp.stat().st_size > 0 and _is_sqlite(tmp)):
            line = first_error_line(res.stderr, res.stdout, failed=True)
            raise NsysExportError(
                f"nsys export wrote no sqlite for {rep} (exit {res.returncode}): "
                f"{line or _tail(res.stderr + chr(10) + res.stdout)}")
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            with contextlib.suppress(OSError):
                tmp.unlink()
    return out


# ---------------------------------------------------------------------------------- dry run

_OUTPUT_OPTS = ("-o", "--output")
_FORCE_OPTS = ("-f", "--force-overwrite")


def _strip_output_options(opts: Sequence[str]) -> List[str]:
    out: List[str] = []
    skip = False
    for a in opts:
        if skip:
            skip = False
            continue
        if a in _OUTPUT_OPTS + _FORCE_OPTS:
            skip = True
            continue
        if a.startswith(tuple(o + "=" for o in _OUTPUT_OPTS + _FORCE_OPTS)):
            continue
        out.append(a)
    return out


def dry_run(argv_prefix: Sequence[str], timeout_s: float = 30.0,
            app_argv: Optional[Sequence[str]] = None) -> Optional[str]:
    """Check nsys options before training: ``<argv_prefix> -o <tmp> -f true python -c pass``.

    ``argv_prefix`` is ``[nsys, "profile", *options]`` (or just the options: nsys and
    ``profile`` are then added). Its ``-o/--output`` and ``-f/--force-overwrite`` are replaced
    by a private temporary directory, removed afterwards. Returns ``None`` when nsys accepted
    the options, else the one meaningful error line (e.g. ``"Illegal --trace argument
    'bogus'"``); a run past ``timeout_s`` is reported as an error too (and fully cleaned up).
    """
    prefix = [os.fspath(a) for a in argv_prefix]
    if not prefix or prefix[0].startswith("-"):
        exe = find_nsys()
        if exe is None:
            return "nsys not found"
        prefix = [exe, "profile", *prefix]
    head, opts = prefix[:2], _strip_output_options(prefix[2:])
    app = list(app_argv) if app_argv is not None else [sys.executable, "-c", "pass"]
    with tempfile.TemporaryDirectory(prefix="verlprof-nsys-dry-") as tmp:
        argv = [*head, *opts, "-o", os.path.join(tmp, "dry_run_%p"), "-f", "true", *app]
        try:
            res = run_nsys(argv, timeout_s, cwd=tmp)
        except OSError as exc:
            return f"cannot run {prefix[0]}: {exc}"
    if res.timed_out:
        return (f"nsys did not finish a trial run of {app[0]} within {timeout_s:g}s "
                "(options that hang here? e.g. CPU sampling or context-switch tracing "
                "without --sample=none --cpuctxsw=none)")
    return res.error_line()


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
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
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
        last = stats
        pending = sorted(set(stats) - final)
        missing = [s for s in literals if os.path.realpath(s) not in final]
        missing += [f"no finalised report matching {g}" for g in globs_
                    if not (per_glob.get(g, set()) & final)]
        elapsed = time.monotonic() - t0
        done = len(final) >= expected and not missing and not pending
        if done or elapsed >= timeout_s:
            if len(final) < expected and not missing:
                missing.append(f"{expected - len(final)} more report(s) matching "
                               f"{', '.join(specs)} (expected {expected}, "
                               f"found {len(final)} finalised)")
            return ReportWait(sorted(Path(p) for p in final), [Path(p) for p in pending],
                              missing, expected, elapsed)
        time.sleep(poll_s)


__all__ = ["AgentProcess", "MARKER_ENV", "NsysError", "NsysExportError", "NsysResult",
           "ReportWait", "dry_run", "export_sqlite", "find_nsys", "first_error_line",
           "list_agents", "marked_processes", "nsys_version", "orphan_agents",
           "parse_nsys_version", "reap_orphan_agents", "run_nsys", "sqlite_path_for",
           "terminate_processes", "version_tuple", "wait_for_reports"]
