"""Which Ray cluster the demo runs on, and how its own local cluster is started.

The demo starts a local Ray cluster of its own unless told an address: `--ray-address`, or
``RAY_ADDRESS`` as every Ray program reads it. Plain ``ray.init()`` would instead join a
cluster that a ``ray start`` left running on the machine, which is not what the demo says.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Optional

LOCAL = "local"
"""``ray.init(address="local")``: always a new cluster, never one found on the machine."""

AUTH_MODE = "RAY_AUTH_MODE"
_AUTH_SETUP = Path("_private", "authentication", "authentication_token_setup.py")
_DEFAULT_ON = "def enable_token_auth_by_default("


def ray_address(requested: Optional[str]) -> str:
    """The address to pass to ``ray.init``: the one asked for, else ``RAY_ADDRESS``, else a
    new local cluster."""
    return requested or os.environ.get("RAY_ADDRESS") or LOCAL


def choose_token_auth(address: str) -> bool:
    """Set ``RAY_AUTH_MODE=token`` for a new local cluster of a Ray that turns token
    authentication on by default anyway; True when it was set.

    Such a Ray logs a WARNING about that default on every ``ray.init()`` that starts a
    cluster: on a first run it is the first line a user sees, about a choice verlprof makes
    the same way. With the mode set explicitly Ray behaves identically and says nothing
    (its own code: "Mode set explicitly; respect it without warning").

    Nothing is set when the user chose a mode, when the cluster is not a new local one (an
    existing cluster's mode is its own), or when Ray has no such default: an older Ray is
    left exactly as it was. Ray caches the mode when it is first imported, so this must run
    before ``import ray``; once Ray is imported it does nothing, and Ray prints its warning,
    rather than leave this process and the cluster disagreeing about authentication.
    """
    if address != LOCAL or AUTH_MODE in os.environ or "ray" in sys.modules:
        return False
    if not _ray_enables_token_auth_by_default():
        return False
    os.environ[AUTH_MODE] = "token"
    return True


def _ray_enables_token_auth_by_default() -> bool:
    """Whether the installed Ray has the token-auth default, asked without importing Ray
    (importing it would cache the mode too early): its setup module defines the function
    that turns it on for a new local cluster."""
    spec = importlib.util.find_spec("ray")  # finds the package; imports nothing
    if spec is None or not spec.submodule_search_locations:
        return False
    for location in spec.submodule_search_locations:
        try:
            if _DEFAULT_ON in (Path(location) / _AUTH_SETUP).read_text(encoding="utf-8"):
                return True
        except OSError:
            continue
    return False
