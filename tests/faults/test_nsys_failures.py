"""Fault 4: nsys that is missing, rejects an option, cannot write, or hangs.

Every such problem is one clear line before training starts (``preflight``: the output
directory is checked and each nsys command is dry-run with a timeout), and no nsys process or
``nsys --start-agent`` is ever left behind. If a launcher fails anyway (preflight switched
off), worker start-up is bounded and names the rank."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time

import pytest

from tests.faults import harness
from tests.helpers import mount_tmpfs
from verlprof.errors import ConfigError, ProfilingRuntimeError
from verlprof.runtime.preflight import preflight

pytestmark = pytest.mark.integration

BASE = ["trainer.total_training_steps=1", "trainer.profile_steps=[1]",
        "trainer.n_gpus_per_node=1", "actor_rollout_ref.actor.profile_ranks=[0]",
        "actor_rollout_ref.rollout.profile_ranks=[]", "critic.enable=false",
        "reward_model.enable=false"]


def _plan(out, *overrides):
    """The plan as a verl trainer would build it (no demo fallback to torch)."""
    from verlprof.config import load_config
    from verlprof.plan import build_plan

    loaded = load_config(harness.CONFIG, [f"trainer.profiler.output_dir={out}", *BASE,
                                          *overrides])
    return loaded, build_plan(loaded.profiling, loaded.topology)


def _one_line_error(func, key: str) -> str:
    with pytest.raises(ConfigError) as info:
        func()
    text = str(info.value)
    assert info.value.key == key and text.startswith(f"{key}: ") and "\n" not in text, text
    return text[len(key) + 2:]


@pytest.fixture(autouse=True, scope="module")
def _module_leftovers(no_leftovers):
    yield


@pytest.fixture
def nsys():
    from tests.helpers import require_nsys

    return require_nsys()


def test_missing_binary(tmp_path):
    _, plan = _plan(tmp_path, "++trainer.profiler.nsys.executable=/nonexistent/nsys")
    why = _one_line_error(lambda: preflight(plan), "trainer.profiler.nsys.executable")
    assert why.startswith("nsys executable '/nonexistent/nsys' not found")


@pytest.mark.parametrize("option, expected", [
    ("trainer.worker_nsight_options.trace='nvtx,bogus'", "Illegal --trace argument 'bogus'"),
    ("++trainer.worker_nsight_options.no-such-option=1", "no-such-option"),
])
def test_bad_worker_option(nsys, tmp_path, option, expected):
    _, plan = _plan(tmp_path, option)
    why = _one_line_error(lambda: preflight(plan, timeout_s=60),
                          "trainer.worker_nsight_options")
    assert why.startswith("nsys rejected these options in a 60s trial run: ") and expected in why


def test_bad_controller_option(nsys, tmp_path):
    _, plan = _plan(tmp_path, "trainer.controller_nsight_options.trace='nvtx,bogus'")
    why = _one_line_error(lambda: preflight(plan), "trainer.controller_nsight_options")
    assert "Illegal --trace argument 'bogus'" in why


def test_bad_option_stops_the_demo_before_anything_starts(nsys, tmp_path, capsys):
    """Through the CLI: exit 2 and one line, before Ray or any worker starts."""
    import ray

    from verlprof.cli import main
    from verlprof.manifest import Manifest, write_manifest

    # an earlier, finished run is there: a refused start must not move it aside
    write_manifest(Manifest(tool="nsys", output_dir=str(tmp_path), step_windows=(),
                            reports=(), run_id="20261201-000000-earlier"), str(tmp_path))
    before = sorted(os.listdir(tmp_path))
    rc = main(["demo", "--config", harness.CONFIG, f"trainer.profiler.output_dir={tmp_path}",
               *BASE, "trainer.worker_nsight_options.trace='nvtx,bogus'"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert err[-1].startswith("verlprof: trainer.worker_nsight_options: nsys rejected these "
                              "options") and "Illegal --trace argument 'bogus'" in err[-1]
    assert not any("moved to" in line for line in err), err
    assert sorted(os.listdir(tmp_path)) == before  # nothing claimed, nothing moved
    assert not ray.is_initialized()


def test_unwritable_output_dir(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    _, plan = _plan(blocker / "profiling")
    why = _one_line_error(lambda: preflight(plan), "trainer.profiler.output_dir")
    assert why == f"{blocker / 'profiling'} is not writable: Not a directory"


@pytest.mark.parametrize("kind", ["read-only", "full"])
def test_read_only_or_full_filesystem(tmp_path, kind):
    mnt = tmp_path / "mnt"
    mount_tmpfs(mnt, "ro,size=4m" if kind == "read-only" else "size=256k")
    try:
        if kind == "full":
            try:
                with open(mnt / "filler", "wb") as handle:
                    while True:
                        handle.write(b"\0" * 4096)
                        handle.flush()
            except OSError:
                pass  # full
        _, plan = _plan(mnt / "profiling")
        why = _one_line_error(lambda: preflight(plan), "trainer.profiler.output_dir")
        assert why.startswith(f"{mnt / 'profiling'} ")
        assert ("Read-only file system" in why if kind == "read-only" else
                "No space left on device" in why or "free" in why), why
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_too_little_free_space(tmp_path):
    _, plan = _plan(tmp_path)
    why = _one_line_error(lambda: preflight(plan, min_free_bytes=1 << 60),
                          "trainer.profiler.output_dir")
    assert why.startswith(f"{tmp_path} has only ") and why.endswith("reports need at least "
                                                                      "1073741824.0 GiB")


def test_nsys_that_hangs_is_bounded(tmp_path):
    """An nsys that never returns (here a stand-in that sleeps: real nsys cannot be made to
    hang on purpose): preflight gives up after its timeout and ends what it started."""
    fake = tmp_path / "nsys"
    fake.write_text("#!/bin/sh\nexec sleep 600\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    _, plan = _plan(tmp_path / "out", f"++trainer.profiler.nsys.executable={fake}")
    started = time.monotonic()
    why = _one_line_error(lambda: preflight(plan, timeout_s=3),
                          "trainer.controller_nsight_options")
    assert time.monotonic() - started < 20
    assert why.startswith("nsys did not finish a trial run of ")
    assert not harness.our_processes("sleep 600")


def test_real_nsys_with_a_hanging_app_leaves_no_agent(nsys, tmp_path):
    """Real nsys whose application hangs: the bounded dry run ends nsys, the application and
    the ``--start-agent`` it spawned."""
    from verlprof.backends.nsys.cli import dry_run

    _, plan = _plan(tmp_path)
    argv = list(plan.processes[0].launch_argv)
    started = time.monotonic()
    problem = dry_run(argv, timeout_s=5,
                      app_argv=[sys.executable, "-c", "import time; time.sleep(120)"])
    assert time.monotonic() - started < 30
    assert problem.startswith("nsys did not finish a trial run")
    assert not harness.wait_until_gone(harness.our_agents, 10)


def test_failing_launcher_bounded_worker_start(ray_cluster, tmp_path):
    """Preflight switched off and a launcher that cannot start: Ray would retry the worker
    forever; the demo trainer's start-up wait is bounded and names the rank."""
    import ray

    from verlprof.demo.settings import demo_settings
    from verlprof.demo.trainer import TaskRunner

    loaded, plan = _plan(tmp_path, "trainer.controller_nsight_options=null",
                         "++trainer.worker_nsight_options.no-such-option=1",
                         "+demo.worker_start_timeout_s=5")
    harness.COUNTS["demo_runs"] += 1
    runner = TaskRunner.options(runtime_env={"py_executable": sys.executable}).remote()
    started = time.monotonic()
    try:
        with pytest.raises(ProfilingRuntimeError) as info:
            ray.get(runner.run.remote(demo_settings(loaded.raw), plan, False), timeout=120)
    finally:
        ray.wait([runner.__ray_terminate__.remote()], timeout=30)
    assert time.monotonic() - started < 60
    cause = info.value.cause
    assert (cause.group, cause.rank) == ("actor_rollout_ref", 0)
    assert str(cause) == ("actor_rollout_ref rank 0: worker did not start within 5s "
                          f"(launched under {plan.processes[0].launch_argv[0]} profile)")
    assert not os.listdir(tmp_path / ".raw" / "actor_rollout_ref" / "rank0") \
        if (tmp_path / ".raw").exists() else True
