"""Processes that one nsys call starts, and ending them: the ones a call marked, and
agents whose owner is gone.

Observed with nsys 2022.4.2.1 on a GPU-less Debian 12 machine:

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
    PPID 1 alone does not make an agent orphaned (see above). An agent is orphaned when its
    owning CLI, named by the PID at the end of ``--session-name=profile-*-<pid>``, is gone (or
    that PID now belongs to a younger, non-nsys process). Agents whose session name carries no
    PID (``nsys launch --session-new=NAME``) cannot be attributed and are left alone.

Whose agents a run may end
    Another job on the node (another user, another CI job, another verlprof run) may have
    orphaned agents of its own: they are not ours to end. Every nsys a verlprof run starts has
    :data:`OWNER_ENV` set to the run's output directory in its launch environment (one live run
    per directory: :mod:`verlprof.runtime.ownership`), and the agent inherits it.
    :func:`reap_orphan_agents` ends an orphaned agent only when its owning CLI is one of the
    profilers the run recorded *and* its environment carries the run's :data:`OWNER_ENV`.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Set

from verlprof.records import NSYS_OWNER_ENV

MARKER_ENV = "VERLPROF_NSYS_RUN"
"""Environment variable carrying a per-call marker into every process an nsys call starts."""

OWNER_ENV = NSYS_OWNER_ENV
"""Environment variable in the launch of every nsys a verlprof run starts: the run's output
directory. Its agents inherit it; teardown ends only orphaned agents that carry its value."""

DEFAULT_KILL_GRACE_S = 2.0
"""Seconds between SIGTERM and SIGKILL when ending a timed-out run."""


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


def all_pids() -> List[int]:
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


def live_process(pid: int) -> Optional[ProcInfo]:
    """``ProcInfo`` for ``pid`` when it runs (not gone, not a zombie), else ``None``."""
    info = proc_info(pid)
    return info if info is not None and info.state not in ("Z", "X") else None


def _uptime_s() -> float:
    try:
        with open("/proc/uptime") as fh:
            return float(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0


def proc_age_s(info: ProcInfo) -> float:
    """Seconds since ``info``'s process started."""
    return max(0.0, _uptime_s() - info.start_ticks / _CLK_TCK)


def carries_env(pid: int, name: str, value: str) -> bool:
    """Whether process ``pid`` was started with ``name=value`` in its environment (False
    when it is gone or belongs to another user: unreadable)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            env = fh.read()
    except OSError:
        return False
    return f"{name}={value}".encode() in env.split(b"\0")


def marked_processes(marker: str) -> List[int]:
    """Live (non-zombie) processes whose environment has ``MARKER_ENV=marker``."""
    me = os.getpid()
    return [pid for pid in all_pids()
            if pid != me and carries_env(pid, MARKER_ENV, marker) and live_process(pid)]


def group_members(pgid: int) -> List[int]:
    return [pid for pid in all_pids() if (info := live_process(pid)) and info.pgid == pgid]


def send_signal(pid: int, sig: int) -> bool:
    """Send ``sig`` to ``pid``; False when it is gone or not ours."""
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
                if send_signal(pid, signal.SIGTERM):
                    signalled.add(pid)
                termed_at[pid] = now
            elif now - termed_at[pid] >= grace_s and send_signal(pid, signal.SIGKILL):
                signalled.add(pid)
        time.sleep(0.05)
    return sorted(signalled)


def settle_marked(marker: str, linger_s: float,
                  grace_s: float = DEFAULT_KILL_GRACE_S) -> List[int]:
    """After an nsys CLI exited: what still carries ``MARKER_ENV=marker`` (its agent finishing
    up) gets ``linger_s`` to exit, then is ended. Returns every PID signalled."""
    end = time.monotonic() + linger_s
    while marked_processes(marker) and time.monotonic() < end:
        time.sleep(0.05)
    if not marked_processes(marker):
        return []
    return terminate_processes(lambda: marked_processes(marker), grace_s=grace_s)


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


def is_nsys(argv: Sequence[str]) -> bool:
    return bool(argv) and os.path.basename(argv[0]) == "nsys"


def list_agents() -> List[AgentProcess]:
    """Every visible ``nsys --start-agent`` process (zombies excluded)."""
    out = []
    for pid in all_pids():
        info = live_process(pid)
        if info is None or not is_nsys(info.cmdline):
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
    owner = live_process(agent.owner_pid)
    if owner is None:
        return False
    # PID reuse: the owner must be an nsys process at least as old as the agent
    return is_nsys(owner.cmdline) and proc_age_s(owner) + 1.0 >= agent.age_s


def orphan_agents(older_than_s: float = 60.0) -> List[AgentProcess]:
    """Agents older than ``older_than_s`` whose owning ``nsys`` CLI is gone."""
    return [a for a in list_agents() if a.age_s >= older_than_s and not _owner_alive(a)]


def owned_agents(owner: str) -> List[AgentProcess]:
    """The agents, orphaned or not, whose environment carries ``OWNER_ENV=owner``: one run's."""
    return [a for a in list_agents() if carries_env(a.pid, OWNER_ENV, owner)]


def owned_orphan_agents(owner: str) -> List[AgentProcess]:
    """The orphaned agents whose environment carries ``OWNER_ENV=owner``: one run's."""
    return [a for a in orphan_agents(0) if carries_env(a.pid, OWNER_ENV, owner)]


def reap_orphan_agents(owner: str, grace_s: float = DEFAULT_KILL_GRACE_S) -> List[AgentProcess]:
    """End the orphaned agents of one run (SIGTERM, then SIGKILL after ``grace_s``); return
    them.

    An agent is ended only when its owning CLI (``--session-name=profile-*-<pid>``) is gone
    and the agent's environment carries ``OWNER_ENV=owner``, the mark every nsys of this run
    (workers, controller, preflight dry runs) is launched with: another job's agents, orphaned
    or not, are never touched. The mark, not the CLI's pid, says whose it is: an agent whose
    CLI outlived the run's wait (a slow import) is still found at the next teardown of the
    same output directory. A live run's agent also has PPID 1, so PPID alone is never the
    criterion. The ``nsys-report-*.qdstrm`` capture streams those agents held open are deleted
    with them.
    """
    victims = owned_orphan_agents(owner)
    if victims:
        wanted = {a.pid for a in victims}
        streams = nsys_temp_files(wanted)

        def still() -> List[int]:
            return [a.pid for a in list_agents() if a.pid in wanted]

        terminate_processes(still, grace_s=grace_s)
        for path in streams:  # capture streams nobody will import any more
            with contextlib.suppress(OSError):
                os.unlink(path)
    return victims


_TEMP_RE = re.compile(r"^nsys-report-[0-9a-fA-F]+\.qdstrm$")


def open_files(pid: int) -> Iterator[str]:
    """Paths process ``pid`` holds open (nothing when it is gone or not ours to read)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return
    for fd in fds:
        try:
            yield os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue


def nsys_temp_files(pids: Iterable[int]) -> Set[str]:
    """``nsys-report-XXXX.qdstrm`` files that ``pids`` hold open (the agent writes them)."""
    out: Set[str] = set()
    for pid in pids:
        for target in open_files(pid):
            if _TEMP_RE.match(os.path.basename(target)):
                out.add(target)
    return out
