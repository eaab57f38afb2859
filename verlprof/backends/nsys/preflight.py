"""nsys preflight: is the executable there, and does it accept each launch command?"""

from __future__ import annotations

from typing import Optional, Sequence

from verlprof.backends.nsys.cli import dry_run as nsys_dry_run
from verlprof.backends.nsys.cli import find_nsys, strip_output_options

INTERNAL_FAULT = "Throw in function"
"""How nsys reports an exception in its own code (``<file>.cpp(<line>): Throw in function
...``), as opposed to an option it rejects; such a trial run is made once more."""


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
    if problem is not None and INTERNAL_FAULT in problem:
        # nsys' own code threw (seen: ProcessWaiterImpl, two trial runs at one moment on a
        # busy machine), not its option parser: such a fault passes, a rejected option stays
        problem = nsys_dry_run([exe, *argv[1:]], timeout_s=timeout_s)
    if problem is None or problem.startswith("nsys did not finish"):
        return problem
    return f"nsys rejected these options in a {timeout_s:g}s trial run: {problem}"
