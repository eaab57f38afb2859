"""Fault 6: hostile input. Every option value (spaces, quotes, ``;``, ``$(...)``, backticks,
newlines, ...) stays inside its own argv slot all the way through the shell command Ray builds
from ``py_executable``; every name or template with ``../`` or ``/`` is refused or made one
safe path segment, so nothing is ever written outside output_dir. Property tests (hypothesis)
plus two real runs: Ray's own ``exec_worker`` and a real nsys capture into a hostile path."""

from __future__ import annotations

import copy
import json
import os
import shlex
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.faults import harness
from verlprof import paths
from verlprof.config import config_from_dict
from verlprof.errors import ConfigError
from verlprof.plan import build_plan
from verlprof.records import ProcessIdentity, ReportIdentity, WorkerReport
from verlprof.runtime.ray_options import wrapped_executable

NASTY = ["a b", " lead", "trail ", "'", '"', "'\"'", ";", "; rm -rf /", "$(touch {pwn})",
         "`touch {pwn}`", "$HOME", "${HOME}", "a\nb", "\n", "\t", "\\", "\\'", "*", "?", "~",
         "&&", "|", ">", "<", "--output=/etc/passwd", "-o", "#", "!", "%p", "{host}", "é中"]
"""Hand-picked hostile fragments (``{pwn}`` becomes a file that must never appear)."""

DUMP = "import json, sys; sys.stdout.write(json.dumps(sys.argv[1:]))"
PROPERTY = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
SHELL = settings(PROPERTY, max_examples=40)
"""Examples that each start a shell and a Python (about 40 ms apiece)."""

text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
               max_size=24)
hostile = st.one_of(text, st.sampled_from(NASTY),
                    st.lists(st.sampled_from(NASTY), min_size=1, max_size=4).map("".join))


def _shipped() -> dict:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(harness.CONFIG), resolve=False)


SHIPPED = _shipped()


def _config(**trainer_updates) -> dict:
    cfg = copy.deepcopy(SHIPPED)
    for key, value in trainer_updates.items():
        node = cfg["trainer"]
        *parents, last = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return cfg


def _through_ray_shell(argv, pwn: str):
    """What a program receives when Ray starts a worker with ``py_executable`` = the plan's
    launch argv (Ray: ``bash -c "exec <py_executable> <shlex-quoted worker args>"``). The
    profiler (argv[0]) is replaced by a program that prints its argv."""
    prefix = [sys.executable, "-S", "-c", DUMP, *argv[1:]]
    worker_args = ["default_worker.py", "--node-ip-address=127.0.0.1", "$(touch x)"]
    cmd = " ".join(["exec", wrapped_executable(prefix, python="PY"),
                    *[shlex.quote(a) for a in worker_args]])
    out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=30,
                         cwd=os.path.dirname(pwn))
    assert out.returncode == 0, out.stderr
    assert not os.path.exists(pwn), "a value was run by the shell"
    return json.loads(out.stdout), [*argv[1:], "PY", *worker_args]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    return tmp_path_factory.mktemp("bad_input")


@SHELL
@given(value=hostile)
@example(value="; touch {pwn} #")
def test_option_values_stay_in_their_argv_slot(scratch, value):
    harness.COUNTS["property_examples"] += 1
    pwn = str(scratch / "pwned")
    value = value.replace("{pwn}", pwn)
    cfg = _config(**{"profiler.output_dir": str(scratch / "out"),
                     "worker_nsight_options.x-verlprof-test": value,
                     "controller_nsight_options.x-verlprof-test": value})
    try:
        loaded = config_from_dict(cfg, env={})
    except ConfigError as err:  # refused: then in one line, naming the key
        assert "\n" not in str(err) and err.key.startswith(
            ("trainer.worker_nsight_options", "trainer.controller_nsight_options")), err
        return
    plan = build_plan(loaded.profiling, loaded.topology)
    for process in plan.processes:
        assert list(process.launch_argv).count(f"--x-verlprof-test={value}") == 1
    # through the shell: one worker's argv (the others differ only in --output) and the
    # controller's
    for argv in (plan.processes[0].launch_argv, plan.controller.launch_argv):
        slot = f"--x-verlprof-test={value}"
        assert list(argv).count(slot) == 1, argv
        received, expected = _through_ray_shell(argv, pwn)
        assert received == expected


@SHELL
@given(segment=hostile.filter(lambda s: s not in ("", ".", "..") and "/" not in s))
def test_hostile_output_dir_stays_one_argv_slot(scratch, segment):
    harness.COUNTS["property_examples"] += 1
    pwn = str(scratch / "pwned")
    output_dir = str(scratch / segment.replace("{pwn}", "pwn"))
    try:
        loaded = config_from_dict(_config(**{"profiler.output_dir": output_dir}), env={})
    except ConfigError as err:  # refused (line breaks): in one line naming the key
        assert err.key == "trainer.profiler.output_dir" and "\n" not in str(err)
        assert any(c in segment for c in "\n\r"), segment
        return
    plan = build_plan(loaded.profiling, loaded.topology)
    for process in plan.processes:
        expected = f"--output={paths.raw_prefix(output_dir, process.group, process.rank)}"
        assert expected in process.launch_argv
        assert os.path.realpath(process.raw_dir).startswith(os.path.realpath(output_dir) + "/")
        received, want = _through_ray_shell(process.launch_argv, pwn)
        assert received == want


@PROPERTY
@given(template=st.one_of(hostile, st.sampled_from(
    ["../{component}_{step}_{rank}", "{component}/{step}_{rank}", "/etc/{component}{step}{rank}",
     "..{component}{step}{rank}", ".{component}_{step}_{rank}", "{component}{step}{rank}/..",
     "{component}..{step}{rank}"])).map(lambda t: t if "{" in t else t + "{component}{step}{rank}"),
       host=hostile, pid=st.integers(1, 2**22))
def test_templates_and_names_stay_inside_output_dir(scratch, template, host, pid):
    harness.COUNTS["property_examples"] += 1
    output_dir = str(scratch / "out")
    cfg = _config(**{"profiler.output_dir": output_dir, "profiler.filename_template": template,
                     "profile_steps": [1, 2]})
    cfg["actor_rollout_ref"]["actor"]["profile_discrete"] = True
    cfg["actor_rollout_ref"]["rollout"]["profile_discrete"] = True
    try:
        loaded = config_from_dict(cfg, env={})
    except ConfigError as err:
        assert err.key == "trainer.profiler.filename_template" and "\n" not in str(err)
        assert "/" in template or "\\" in template or ".." in template or "{" in template
        return
    assert "/" not in template and ".." not in template
    plan = build_plan(loaded.profiling, loaded.topology)
    root = os.path.realpath(output_dir)
    for report in plan.reports:
        relpath = paths.resolve_relpath(report.path, host, pid)
        full = paths.inside(output_dir, relpath)  # raises if it escapes
        assert full.startswith(root + "/") and len(relpath.split("/")) == 4, relpath
        assert not any(part in ("", ".", "..") or part.startswith(".")
                       for part in relpath.split("/")), relpath


@PROPERTY
@given(group=hostile, role=hostile, phase=hostile, rank=st.integers(0, 4096))
def test_path_builders_make_single_safe_segments(scratch, group, role, phase, rank):
    harness.COUNTS["property_examples"] += 1
    output_dir = str(scratch / "out")
    root = os.path.realpath(output_dir)
    raw = paths.raw_dir(output_dir, group, rank)
    assert os.path.realpath(raw).startswith(os.path.join(root, paths.RAW_DIR) + "/")
    assert os.path.dirname(paths.raw_prefix(output_dir, group, rank)) == raw
    component = paths.discrete_component(role, phase)
    assert "/" not in component and component not in (".", "..")
    assert "/" not in paths.sanitize(group) and paths.sanitize(group) not in ("", ".", "..")


@PROPERTY
@given(relpath=st.one_of(hostile, st.sampled_from(
    ["../x.nsys-rep", "../../etc/x", "/etc/x", "a/../../x", "step0001/../../x", ".raw/../../x"])))
def test_collection_never_writes_outside(scratch, relpath):
    """A worker's entry with a hostile path (a bug, or a compromised worker) is refused:
    the report is marked missing and nothing lands outside output_dir."""
    from verlprof.runtime.collect import move_report

    harness.COUNTS["property_examples"] += 1
    out = scratch / "collect"
    out.mkdir(exist_ok=True)
    raw = scratch / "raw.nsys-rep"
    raw.write_bytes(b"report")
    before = set(_tree(scratch))
    item = WorkerReport(
        report=ReportIdentity(steps=(1,), group="actor_rollout_ref", rank=0, component="c",
                              backend="nsys", path=relpath),
        status="ok", raw_path=str(raw), bytes=6, where=ProcessIdentity(host="h", pid=1))
    entry = move_report(item, str(out), "", None)
    new = set(_tree(scratch)) - before
    root = os.path.realpath(str(out))
    assert all(os.path.realpath(p).startswith(root + "/") for p in new), new
    if entry.status == "ok":
        assert os.path.realpath(os.path.join(root, entry.path)).startswith(root + "/")
    raw.unlink(missing_ok=True)


def _tree(root):
    return [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]


@PROPERTY
@given(name=st.one_of(hostile, st.sampled_from(["../secret", "../../etc/passwd", "/etc/passwd",
                                                  "x/../../secret"])))
def test_worker_serves_only_its_own_reports(scratch, name):
    from verlprof.plan import ProcessPlan
    from verlprof.worker import ProfileSession, ProfilingWorkerMixin

    harness.COUNTS["property_examples"] += 1
    raw_dir = scratch / "w" / ".raw" / "g" / "rank0"
    raw_dir.mkdir(parents=True, exist_ok=True)
    (scratch / "w" / "secret").write_text("secret")
    worker = ProfilingWorkerMixin()
    plan = ProcessPlan(group="g", rank=0, roles=("actor",), selected_roles=("actor",),
                       mode="whole", backend="torch", windows=(), raw_dir=str(raw_dir))
    worker._verlprof_session = ProfileSession(plan, worker)
    path = os.path.join(str(raw_dir), name)
    inside = os.path.realpath(path).startswith(os.path.realpath(str(raw_dir)) + "/")
    if not inside:
        with pytest.raises(PermissionError):
            worker.verlprof_read_chunk(path, 0, 10)
        assert worker.verlprof_discard(path) is False
    assert (scratch / "w" / "secret").exists()


def test_ray_exec_worker_keeps_every_slot(tmp_path):
    """Ray's own worker exec (RuntimeEnvContext.exec_worker, which runs ``bash -c``) with a
    launch argv made of every hostile fragment."""
    pwn = str(tmp_path / "pwned")
    values = [v.replace("{pwn}", pwn) for v in NASTY]
    argv = [sys.executable, "-S", "-c", DUMP, *values]
    script = ("import sys, json\n"
              "from ray._private.runtime_env.context import RuntimeEnvContext\n"
              "from ray.core.generated.common_pb2 import Language\n"
              "RuntimeEnvContext(py_executable=sys.argv[1]).exec_worker(\n"
              "    json.loads(sys.argv[2]), Language.PYTHON)\n")
    worker_args = ["worker.py", "--flag=$(touch x)"]
    out = subprocess.run([sys.executable, "-c", script, wrapped_executable(argv, python="PY"),
                          json.dumps(worker_args)], capture_output=True, text=True, timeout=60,
                         cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [*values, "PY", *worker_args]
    assert not os.path.exists(pwn) and not os.path.exists(tmp_path / "x")
    harness.COUNTS["property_examples"] += 1


@pytest.mark.integration
def test_real_nsys_capture_into_a_hostile_directory(tmp_path, no_leftovers):
    """A real nsys capture launched exactly as Ray would (bash -c, py_executable) into an
    output_dir full of shell syntax: the report lands in its planned place, nothing runs."""
    from tests.helpers import require_nsys
    from verlprof.backends.nsys.cli import wait_for_reports

    require_nsys()
    pwn = str(tmp_path / "pwned")
    output_dir = str(tmp_path / f"o ut;'$(touch {pwn})'\"`touch {pwn}`\" #x")
    cfg = _config(**{"profiler.output_dir": output_dir, "profile_steps": [1],
                     "controller_nsight_options": None})
    cfg["actor_rollout_ref"]["actor"]["profile_ranks"] = [0]
    cfg["actor_rollout_ref"]["rollout"]["profile_ranks"] = []
    cfg["critic"]["profile_ranks"] = []
    loaded = config_from_dict(cfg, env={})
    plan = build_plan(loaded.profiling, loaded.topology)
    process = plan.processes[0]
    os.makedirs(process.raw_dir)
    app = ("from verlprof.backends.nsys import nvtx; handle = nvtx.capture_open(); "
           "nvtx.capture_close(handle)")
    cmd = " ".join(["exec", wrapped_executable(process.launch_argv), "-c", shlex.quote(app)])
    env = dict(os.environ, **process.launch_env)
    res = subprocess.run(["bash", "-c", cmd], env=env, capture_output=True, text=True,
                         timeout=120, cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr
    waited = wait_for_reports(os.path.join(process.raw_dir, "*.nsys-rep"), 1, timeout_s=60)
    assert len(waited.found) == 1, (waited.missing, os.listdir(process.raw_dir))
    assert str(waited.found[0]).startswith(process.raw_dir + "/")
    assert not os.path.exists(pwn)
    assert harness.check_reports(tmp_path, [{"status": "ok", "bytes": waited.found[0].stat(
        ).st_size, "path": os.path.relpath(waited.found[0], tmp_path)}]) == 1
