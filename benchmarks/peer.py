"""verl, the peer of P1, in its own virtual environment ``benchmarks/.venv-peer`` (git-ignored).

``pip install --no-deps verl`` plus the few modules importing ``verl.utils.profiler`` needs
(tensordict, transformers, codetiming, orjson, at the versions verl's own metadata asks for, with
whatever they need). Torch, numpy, Ray and the rest are shared read-only with the main
environment through a ``.pth`` file, and pinned to the versions installed there, so the peer
never downloads a second torch and the main ``.venv`` is never written to. Built once, reused by
later runs; any failure is returned as a one-line reason, never raised.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from typing import Optional, Tuple

from benchmarks.bounds import Stalled, deadline_s, run_bounded
from benchmarks.common import ROOT

PEER_DIR = os.path.join(ROOT, "benchmarks", ".venv-peer")
MARKER = os.path.join(PEER_DIR, ".verlprof-peer-ready")
NEEDED = ("tensordict", "transformers", "codetiming", "orjson")
"""What ``import verl.utils.profiler`` needs beyond the main environment (verl's own pins)."""
SHARED = ("torch", "numpy", "ray")
"""Taken from the main environment as they are (pinned to its versions)."""
IMPORT_CHECK = "from verl.utils.profiler import DistProfiler; import verl; print(verl.__version__)"


def peer_python() -> str:
    return os.path.join(PEER_DIR, "bin", "python")


def _run(argv, timeout: float) -> subprocess.CompletedProcess:
    """``argv`` bounded (pip and what it starts are ended by pid on expiry), output merged."""
    return run_bounded("peer", argv, deadline_s(timeout), f"peer: {' '.join(argv[:4])}",
                       stderr=subprocess.STDOUT)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1][:200] if lines else "no output"


def ensure_peer(timeout_s: float = 400.0, log=print) -> Tuple[Optional[str], str]:
    """``(python of the peer env, verl version)`` or ``(None, reason)``."""
    python = peer_python()
    if os.path.exists(MARKER) and os.path.exists(python):
        check = _run([python, "-c", IMPORT_CHECK], 120)
        if check.returncode == 0:
            return python, _last_line(check.stdout)
    log("peer: building benchmarks/.venv-peer (pip install --no-deps verl + "
        f"{', '.join(NEEDED)}); once, a few minutes")
    try:
        return _build(python, timeout_s)
    except Stalled as err:
        return None, f"install took longer than {timeout_s:g}s ({err})"
    except OSError as err:
        return None, f"{type(err).__name__}: {err}"


def _build(python: str, timeout_s: float) -> Tuple[Optional[str], str]:
    made = _run([sys.executable, "-m", "venv", "--clear", PEER_DIR], 120)
    if made.returncode != 0:
        return None, f"python -m venv failed: {_last_line(made.stdout)}"
    peer_site = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     60).stdout.strip()
    shared = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    with open(os.path.join(peer_site, "zz_verlprof_main_env.pth"), "w") as handle:
        handle.write("import site; " + "; ".join(f"site.addsitedir({p!r})" for p in shared)
                     + "\n")
    pins = os.path.join(PEER_DIR, "main-env-pins.txt")
    with open(pins, "w") as handle:  # reuse the main env's heavy packages, never a second copy
        from importlib import metadata

        for name in SHARED:
            try:
                handle.write(f"{name}=={metadata.version(name)}\n")
            except metadata.PackageNotFoundError:
                continue
    pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    step = _run([*pip, "--no-deps", "verl"], timeout_s)
    if step.returncode != 0:
        return None, f"pip install --no-deps verl failed: {_last_line(step.stdout)}"
    wanted = _run([python, "-c", "import importlib.metadata as m, re, sys\n"
                   "for r in m.requires('verl') or []:\n"
                   "    name = re.split(r'[<>=!~; \\[]', r, 1)[0].lower()\n"
                   f"    if name in {NEEDED!r} and 'extra ==' not in r: print(r.split(';')[0])"],
                  60).stdout.split("\n")
    specs = [w.strip() for w in wanted if w.strip()] or list(NEEDED)
    step = _run([*pip, "-c", pins, *specs], timeout_s)
    if step.returncode != 0:
        return None, f"pip install {' '.join(specs)} failed: {_last_line(step.stdout)}"
    check = _run([python, "-c", IMPORT_CHECK], 180)
    if check.returncode != 0:
        return None, f"import verl.utils.profiler failed: {_last_line(check.stdout)}"
    with open(MARKER, "w") as handle:
        handle.write(" ".join(specs) + "\n")
    return python, _last_line(check.stdout)
