"""nsys preflight: is the executable there, and does it accept each launch command?"""

from __future__ import annotations

from typing import Optional, Sequence

from verlprof.backends.nsys.cli import DID_NOT_FINISH, find_nsys, strip_output_options
from verlprof.backends.nsys.cli import dry_run as nsys_dry_run


def dry_run_key(argv: Sequence[str]) -> tuple:
    """A launch argv without its output options: ranks that differ only there share one check."""
    return tuple(strip_output_options(argv))


def check_launch_argv(argv: Sequence[str], timeout_s: float = 60.0,
                      dry_run: bool = True) -> Optional[str]:
    """``None`` when ``argv`` (``nsys profile ...``) can launch a process, else one line why.

    Checks the executable, then (``dry_run``) runs ``python -c pass`` under the same options
    with a timeout (:func:`verlprof.backends.nsys.cli.dry_run`: its own output directory, every
    process it started ended on timeout, no agent left behind).
    """
    if not argv:
        return None
    exe = find_nsys(argv[0])
    if exe is None:
        return (f"nsys executable {argv[0]!r} not found (install Nsight Systems, or set "
                "trainer.profiler.nsys.executable)")
    if not dry_run:
        return None
    problem = nsys_dry_run([exe, *argv[1:]], timeout_s=timeout_s)
    if problem is not None and not problem.startswith(DID_NOT_FINISH):
        # one more trial: a rejected option fails again, a fault of nsys' own passes (seen on
        # a busy machine: an exception thrown in its ProcessWaiter with two trial runs at one
        # moment; "End of file" from a valid controller's options during a full test run)
        problem = nsys_dry_run([exe, *argv[1:]], timeout_s=timeout_s)
    if problem is None or problem.startswith(DID_NOT_FINISH):
        return problem
    return f"nsys rejected these options in a {timeout_s:g}s trial run: {problem}"
