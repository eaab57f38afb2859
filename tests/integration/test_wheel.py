"""verlprof as users get it (issue 18): a wheel built from this checkout, installed with its
dependencies into a fresh virtual environment, run from an empty directory.

The new environment sees the test environment's packages (torch, Ray, verl, ...) through a
``.pth`` line, so nothing is downloaded and ``pip --no-index`` fails loudly if a dependency
the wheel declares is not installed. verlprof itself comes only from the wheel: the test
environment's editable install is a ``.pth`` finder of its own, which a path added by a
``.pth`` line does not run, and each test checks ``verlprof.__file__``. (``venv
--system-site-packages`` would not do: from inside a venv it reaches the base interpreter's
packages, not this environment's, and pip would fetch torch again.)
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path
from typing import Dict, List

import pytest

from tests.helpers import require_verl, skip_or_fail

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

SMALL_DEMO = ["trainer.total_training_steps=1", "trainer.profile_steps=[1]",
              "trainer.n_gpus_per_node=1", "actor_rollout_ref.actor.profile_ranks=[0]",
              "actor_rollout_ref.rollout.profile_ranks=[]", "critic.enable=false",
              "reward_model.enable=false", "trainer.controller_nsight_options=null"]
"""One step, one profiled rank, no critic or reward model: the demo's config otherwise as
shipped (nsys when installed, else the torch profiler, as the demo chooses)."""

DEPENDENCY_WARNING = re.compile(
    r"\w+Warning\b"              # a Python warning: "file:line: UserWarning: ..."
    r"|\bWARNING\b"              # Python logging (Ray's own, for one)
    r"|^\[[^\]]* [WE] \d+ \d+\]"  # Ray's C++ log lines: "[date time W pid tid] file: ..."
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_RAY_PREFIX = re.compile(r"^\([^)]*pid=\d+[^)]*\)\s*")  # "(TaskRunner pid=42, ip=...)"


def dependency_warnings(output: str) -> List[str]:
    """Lines of ``output`` that are warnings from somewhere other than verlprof: Ray's
    prefix for worker output is removed first, and verlprof's own lines (``verlprof: ...``,
    its notes and warnings included) are never counted."""
    found = []
    for raw in output.splitlines():
        line = _RAY_PREFIX.sub("", _ANSI.sub("", raw)).strip()
        if line and not line.startswith("verlprof") and DEPENDENCY_WARNING.search(line):
            found.append(line)
    return found


def _checkout_files() -> List[str]:
    """What a clone of this checkout holds, with its uncommitted changes: tracked and
    untracked files that git does not ignore (no .venv, no build output)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=ROOT, capture_output=True,
                            check=True).stdout.decode()
    return [p for p in listed.split("\0") if p and os.path.lexists(ROOT / p)]


def _run(argv: List[str], cwd: Path, env: Dict[str, str], timeout: float = 240.0,
         merged: bool = False) -> subprocess.CompletedProcess:
    """Run to completion, exit 0 or fail with the output; ``merged``: stderr interleaved into
    stdout as a terminal shows them."""
    proc = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, text=True,
                          stderr=subprocess.STDOUT if merged else subprocess.PIPE,
                          timeout=timeout)
    assert proc.returncode == 0, f"{argv}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(wheel, venv, environment): the wheel built and installed with its dependencies."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        skip_or_fail("needs git and a git checkout to know which files a clone holds")
    base = tmp_path_factory.mktemp("wheel")
    src, dist, venv = base / "src", base / "dist", base / "venv"
    for rel in _checkout_files():  # build from a copy: no build/ or egg-info in the checkout
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, src / rel, follow_symlinks=False)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "RAY_ADDRESS", "RAY_AUTH_MODE", "VIRTUAL_ENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
          "--no-index", "-w", str(dist), str(src)], base, env)
    wheel = next(dist.glob("verlprof-*.whl"))
    # no pip or setuptools of its own: ensurepip's older setuptools would shadow the test
    # environment's and fail torch's requirement; this environment's pip installs into it
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], base, env)
    site = Path(_run([str(venv / "bin" / "python"), "-c",
                      "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     base, env).stdout.strip())
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "_test_env_packages.pth").write_text("\n".join(sorted(ours)) + "\n")
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
           "-q", "--no-index"]
    _run([*pip, "--no-deps", "--force-reinstall", str(wheel)], base, env)  # ours, not the base's
    _run([*pip, str(wheel)], base, env)  # every declared dependency, or a loud failure
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return wheel, venv, env


def _from_the_wheel(venv: Path, env: Dict[str, str], cwd: Path, module: str) -> Path:
    out = _run([str(venv / "bin" / "python"), "-c",
                f"import {module} as m; print(m.__file__)"], cwd, env).stdout
    path = Path(out.strip())
    assert venv in path.parents, f"{module} comes from {path}, not from the wheel in {venv}"
    return path


VERL_PLAN = ["global_profiler.tool=nsys", "global_profiler.steps=[2,3]",
             "actor_rollout_ref.actor.profiler.enable=true",
             "actor_rollout_ref.actor.profiler.ranks=[0]"]
"""docs/verl.md's first launch, planned (``--plan`` composes verl's config and plans it)."""


@pytest.fixture(scope="module")
def verl_plan(installed, tmp_path_factory):
    """``python -m verlprof.bridges.verl --plan`` from an empty directory, started in the
    background (importing verl takes 10-30 s here) while the demo runs: (directory, process),
    or None without verl."""
    if importlib.util.find_spec("verl") is None:  # not imported here: that alone takes seconds
        yield None
        return
    _, venv, env = installed
    cwd = tmp_path_factory.mktemp("empty_verl")
    proc = subprocess.Popen([str(venv / "bin" / "python"), "-m", "verlprof.bridges.verl",
                             "--plan", *VERL_PLAN], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    yield cwd, proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def demo_run(installed, verl_plan, tmp_path_factory):
    """``verlprof demo`` from an empty directory: (directory, combined output)."""
    _, venv, env = installed
    cwd = tmp_path_factory.mktemp("empty")
    _from_the_wheel(venv, env, cwd, "verlprof")
    proc = _run([str(venv / "bin" / "verlprof"), "demo", *SMALL_DEMO], cwd, env, merged=True)
    return cwd, proc.stdout


def test_wheel_carries_the_demo_config_and_declares_its_dependencies(installed):
    wheel, _, _ = installed
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
        metadata = whl.read(next(n for n in names if n.endswith(".dist-info/METADATA")))
    assert "verlprof/demo/ppo_trainer.yaml" in names and "verlprof/py.typed" in names
    requires = [line.split(":", 1)[1].strip() for line in metadata.decode().splitlines()
                if line.startswith("Requires-Dist:")]
    # without numpy, torch warns "Failed to initialize NumPy" in every process of the demo
    assert any(r.startswith("numpy") for r in requires), requires
    assert any(r.startswith("verl") and 'extra == "verl"' in r for r in requires), requires


def test_demo_from_an_empty_directory_writes_reports_manifest_and_summary(demo_run, installed):
    import json

    cwd, output = demo_run
    _, venv, _ = installed
    first = next(line for line in output.splitlines() if line.strip())
    assert first.startswith("verlprof: config: ") and str(venv) in first, first
    out = cwd / "outputs" / "ppo_demo" / "profiling"
    manifest = json.loads((out / "manifest.json").read_text())
    workers = [r for r in manifest["reports"] if r["group"] != "controller"]
    assert [r["status"] for r in workers] == ["ok"], manifest["reports"]
    assert (out / workers[0]["path"]).is_file()
    # the printed host and pid are those of the process the manifest records as controller:
    # its own line (from its Ray actor, behind Ray's "(Name pid=N)" prefix) and the summary's
    controller = manifest["controller"]
    said = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in output.splitlines()
            if "verlprof controller: host=" in line]
    assert [re.sub(r"^\(\w+ pid=\d+\) ", "", line) for line in said] == [
        f"verlprof controller: host={controller['host']} pid={controller['pid']}"], output
    assert re.match(rf"^(\(\w+ pid={controller['pid']}\) )?verlprof", said[0]), said
    assert f"verlprof controller ran on host={controller['host']} pid={controller['pid']}" \
        in output.splitlines()
    for name in ("summary.csv", "summary.md", "timeline.png", "timeline.html"):
        assert (out / "summary" / name).is_file(), name


def test_demo_output_holds_no_warning_from_a_dependency(demo_run):
    """A first run shows verlprof's own output first: nothing from torch, Ray or the demo's
    own use of them that the project can prevent (numpy installed, the demo's cluster
    started with the auth mode Ray would choose, losses detached before float())."""
    _, output = demo_run
    assert dependency_warnings(output) == [], output


def test_dependency_warnings_are_recognised():
    ray_prefix = "\x1b[36m(ActorRolloutRefWorker pid=16259)\x1b[0m "
    output = "\n".join([
        "verlprof: config: /x/ppo_trainer.yaml",
        "verlprof: warning: critic.profile_ranks: not deployed",
        f"{ray_prefix}/t/workers.py:96: UserWarning: Converting a tensor with requires_grad",
        "2026-11-23 14:33:43,316\tWARNING authentication_token_setup.py:85 -- Token auth",
        "[2026-11-23 14:42:32,672 W 31834 31834] gcs_client.cc:210: Failed to get cluster ID",
        f"{ray_prefix}verlprof controller: host=vm pid=2829",
        "│ actor_rollout_ref │ rollout/generate_sequences │  9.9 │",
    ])
    assert [w.split()[0] for w in dependency_warnings(output)] == [
        "/t/workers.py:96:", "2026-11-23", "[2026-11-23"]


def test_init_config_then_plan_from_an_empty_directory(installed, tmp_path):
    _, venv, env = installed
    verlprof = str(venv / "bin" / "verlprof")
    _run([verlprof, "init-config", "trainer.yaml"], tmp_path, env)
    proc = _run([verlprof, "plan", "--config", "trainer.yaml", "trainer.total_training_steps=4",
                 "trainer.profile_steps=[3,4]"], tmp_path, env)
    assert "verlprof plan tool=" in proc.stdout
    assert str(tmp_path / "outputs" / "ppo_demo" / "profiling") in proc.stdout


def test_verl_extra_the_bridge_plans_verls_own_config(installed, verl_plan, tmp_path):
    """``verlprof[verl]``: verl comes from the test environment (installed there without its
    GPU-side requirements, which is why the extra is not resolved here); the bridge comes
    from the wheel and composes verl's own config."""
    if verl_plan is None:
        require_verl()  # skips, or fails under CI=true
    cwd, plan = verl_plan
    _, venv, env = installed
    _from_the_wheel(venv, env, tmp_path, "verlprof.bridges.verl")
    plugin = _run([str(venv / "bin" / "python"), "-c",
                   "from importlib.metadata import entry_points; "
                   "print({e.value for e in entry_points(group='verl.plugins')})"],
                  tmp_path, env).stdout
    assert "verlprof.bridges.verl.plugin" in plugin
    output, _ = plan.communicate(timeout=240)
    assert plan.returncode == 0, output
    assert "verlprof plan tool=nsys" in output
    assert str(cwd / "outputs") in output
