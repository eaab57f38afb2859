"""Running the real ``nsys`` safely: argv only, always a timeout, never an agent left behind.

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
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import Future
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Set, Union

from verlprof.backends.nsys.procs import (  # noqa: F401  (re-exported: one import path)
    DEFAULT_KILL_GRACE_S,
    MARKER_ENV,
    AgentProcess,
    group_members,
    list_agents,
    marked_processes,
    nsys_temp_files,
    orphan_agents,
    proc_info,
    reap_orphan_agents,
    settle_marked,
    terminate_processes,
)
from verlprof.backends.nsys.reports import ReportWait, wait_for_reports  # noqa: F401
from verlprof.backends.reading import ReportReadError

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
        pids.update(group_members(proc.pid))
        temp_files.update(nsys_temp_files(pids))
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
        killed = settle_marked(marker, linger_s, grace_s=kill_grace_s)
    rc = proc.returncode if proc.returncode is not None else -9
    result = NsysResult(args, rc, _decode(out), _decode(err), timed_out=timed_out,
                        killed=killed, elapsed_s=time.monotonic() - t0, pid=proc.pid,
                        marker=marker)
    result.removed_files = removed
    return result


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


_AHEAD: Dict[str, Future[Path]] = {}
"""Exports started by :func:`export_ahead` not yet joined, by output path."""
_AHEAD_LOCK = threading.Lock()


def export_ahead(report_path: PathLike, timeout_s: float = 120.0) -> None:
    """Start exporting ``report_path`` (to :func:`sqlite_path_for`) now, on a thread of its
    own; the next :func:`export_sqlite` of the same report and output waits for it instead of
    starting another ``nsys export``, and gets its result or its error.

    ``verlprof report`` starts its first exports so, once it has read the manifest: they run
    while the rest of the command is imported. Not a daemon thread: a command that ends early
    still lets the export finish (or time out) and remove its temporary file."""
    out = sqlite_path_for(report_path)
    pending: Future[Path] = Future()
    with _AHEAD_LOCK:
        if str(out) in _AHEAD:
            return
        _AHEAD[str(out)] = pending

    def run() -> None:
        try:
            pending.set_result(_export_sqlite(report_path, out, timeout_s))
        except BaseException as err:  # noqa: BLE001 - handed to the export_sqlite that joins
            pending.set_exception(err)

    threading.Thread(target=run, name="verlprof-export-ahead").start()


def export_sqlite(report_path: PathLike, timeout_s: float = 120.0, *,
                  out_path: Optional[PathLike] = None, nsys_exe: str = "nsys",
                  force: bool = False) -> Path:
    """Export ``report.nsys-rep`` to ``report.sqlite`` next to it (or ``out_path``) and return it.

    Skipped when that sqlite exists and is at least as new as the report (unless ``force``).
    nsys writes to a private temporary name in the same directory which is then renamed into
    place, so concurrent calls (threads or processes) never see a half-written file. Success is
    judged by the file, not nsys' exit code. Raises :class:`NsysExportError` (a
    :class:`~verlprof.backends.nsys.sqlite.ReportReadError`) with nsys' output tail otherwise.
    An export of the same report and output started by :func:`export_ahead` is waited for.
    """
    out = Path(out_path) if out_path is not None else sqlite_path_for(report_path)
    with _AHEAD_LOCK:
        pending = _AHEAD.pop(str(out), None)
    if pending is not None and not force and nsys_exe == "nsys":
        return pending.result()
    return _export_sqlite(report_path, out, timeout_s, nsys_exe=nsys_exe, force=force)


def _export_sqlite(report_path: PathLike, out: Path, timeout_s: float, *,
                   nsys_exe: str = "nsys", force: bool = False) -> Path:
    rep = Path(report_path)
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


def strip_output_options(opts: Sequence[str]) -> List[str]:
    """``opts`` without ``-o/--output`` and ``-f/--force-overwrite`` (and their values)."""
    out: List[str] = []
    skip = False
    for a in opts:
        if skip:
            skip = False
        elif a in _OUTPUT_OPTS + _FORCE_OPTS:
            skip = True
        elif not a.startswith(tuple(o + "=" for o in _OUTPUT_OPTS + _FORCE_OPTS)):
            out.append(a)
    return out


DID_NOT_FINISH = "nsys did not finish"
"""How :func:`dry_run` begins its answer for a trial run past its timeout."""


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
    head, opts = prefix[:2], strip_output_options(prefix[2:])
    app = list(app_argv) if app_argv is not None else [sys.executable, "-c", "pass"]
    with tempfile.TemporaryDirectory(prefix="verlprof-nsys-dry-") as tmp:
        argv = [*head, *opts, "-o", os.path.join(tmp, "dry_run_%p"), "-f", "true", *app]
        try:
            res = run_nsys(argv, timeout_s, cwd=tmp)
        except OSError as exc:
            return f"cannot run {prefix[0]}: {exc}"
    if res.timed_out:
        return (f"{DID_NOT_FINISH} a trial run of {app[0]} within {timeout_s:g}s "
                "(options that hang here? e.g. CPU sampling or context-switch tracing "
                "without --sample=none --cpuctxsw=none)")
    return res.error_line()


__all__ = ["AgentProcess", "DID_NOT_FINISH", "MARKER_ENV", "NsysError", "NsysExportError",
           "NsysResult", "ReportWait", "dry_run", "export_sqlite", "find_nsys", "first_error_line",
           "list_agents", "marked_processes", "nsys_version", "orphan_agents",
           "parse_nsys_version", "reap_orphan_agents", "run_nsys", "sqlite_path_for",
           "terminate_processes", "version_tuple", "wait_for_reports"]

