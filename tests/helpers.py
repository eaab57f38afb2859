"""Shared test helpers."""

from __future__ import annotations

import os

import pytest

NSYS_SAFE_OPTS = ["--sample=none", "--cpuctxsw=none"]
"""Options every test passes to ``nsys profile`` (sampling/ctxsw can hang without a GPU)."""


def require_nsys() -> str:
    """Path of a working nsys. Skips the test when there is none, except under ``CI=true``,
    where a missing nsys is a failure (CI must install it: see NSYS_ON_CPU.md)."""
    from verlprof.backends.nsys_cli import find_nsys, nsys_version

    exe = find_nsys()
    version = nsys_version(exe) if exe else None
    if exe is None or version is None:
        msg = ("nsys not found on PATH" if exe is None
               else f"{exe} does not run (nsys --version failed)")
        if os.environ.get("CI", "").strip().lower() == "true":
            pytest.fail(f"{msg}; CI=true requires Nsight Systems", pytrace=False)
        pytest.skip(msg)
    return exe
