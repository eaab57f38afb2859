"""verl's real trainer configs, release by release, fetched from PyPI at test time.

Nothing of verl is committed here (nothing fetched may be): each release's wheel is downloaded
once with ``pip download --no-deps verl==X`` into a cache outside the repository
(``$VERLPROF_VERL_WHEELS``, default ``~/.cache/verlprof/verl-wheels``) and only its
``verl/trainer/config`` folder is extracted next to it. Later runs reuse both. Without network
the tests skip, except under ``CI=true``: there a failed download is a failure.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Tuple

from tests.helpers import skip_or_fail

RELEASES: Tuple[str, ...] = ("0.4.1", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "0.9.0", "0.9.1")
"""Every verl release verlprof reads the config of."""

CONFIG_DIR = "verl/trainer/config"
DOWNLOAD_TIMEOUT_S = 300


def cache_dir() -> Path:
    return Path(os.environ.get("VERLPROF_VERL_WHEELS", "~/.cache/verlprof/verl-wheels")
                ).expanduser()


def _unavailable(message: str) -> None:
    skip_or_fail(message)


def wheel(version: str) -> Path:
    """The release's wheel in the cache, downloaded from PyPI the first time."""
    cache = cache_dir()
    found = sorted(glob.glob(str(cache / f"verl-{version}-*.whl")))
    if found:
        return Path(found[0])
    cache.mkdir(parents=True, exist_ok=True)
    try:
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                               "--disable-pip-version-check", "-q", f"verl=={version}",
                               "-d", str(cache)], capture_output=True, text=True,
                              timeout=DOWNLOAD_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as err:
        _unavailable(f"cannot download verl=={version} from PyPI: {err}")
    found = sorted(glob.glob(str(cache / f"verl-{version}-*.whl")))
    if proc.returncode != 0 or not found:
        tail = " ".join((proc.stderr or proc.stdout).split())[-300:]
        _unavailable(f"cannot download verl=={version} from PyPI: {tail}")
    return Path(found[0])


def config_dir(version: str) -> Path:
    """``verl/trainer/config`` of the release, extracted from its wheel (cached)."""
    target = cache_dir() / version
    done = target / ".extracted"
    if not done.exists():
        with zipfile.ZipFile(wheel(version)) as archive:
            members = [m for m in archive.namelist() if m.startswith(CONFIG_DIR + "/")]
            archive.extractall(target, members)
        done.touch()
    return target / CONFIG_DIR
