"""Launch settings: only planned ranks are wrapped; argv survives Ray's bash -c intact."""

import shlex
import subprocess
import sys

from verlprof.config.schema import ComponentConfig, ComponentsConfig, NsysConfig, ProfilingConfig
from verlprof.config.topology import Topology
from verlprof.plan import build_plan
from verlprof.runtime.ray_options import controller_options, worker_options, wrapped_executable

TOPO = Topology.of({"actor_rollout_ref": 2, "critic": 1}, cuda=False)


def plan_with(options):
    cfg = ProfilingConfig(steps=(1,), output_dir="/tmp/o dir",
                          components=ComponentsConfig(actor=ComponentConfig((1,))),
                          nsys=NsysConfig(worker_options=options,
                                          controller_options={"trace": "nvtx"}))
    return build_plan(cfg, TOPO)


def test_unselected_rank_runs_the_plain_interpreter_explicitly():
    """Explicit, because Ray merges a child's runtime_env into its creator's: a worker created
    by a controller running under nsys would otherwise inherit the nsys wrapper."""
    plan = plan_with({"trace": "nvtx"})
    assert worker_options(plan, "actor_rollout_ref", 0) == {
        "runtime_env": {"py_executable": sys.executable}}
    assert worker_options(plan, "critic", 0, {"env_vars": {"A": "1"}}) == {
        "runtime_env": {"env_vars": {"A": "1"}, "py_executable": sys.executable}}
    custom = {"py_executable": "/opt/py/bin/python"}
    assert worker_options(plan, "critic", 0, custom) == {"runtime_env": custom}


def test_selected_rank_is_wrapped_with_real_interpreter_and_env_merged():
    plan = plan_with({"trace": "nvtx"})
    env = worker_options(plan, "actor_rollout_ref", 1, {"env_vars": {"A": "1"}})["runtime_env"]
    argv = shlex.split(env["py_executable"])
    assert argv[:2] == ["nsys", "profile"] and argv[-1] == sys.executable
    assert env["env_vars"] == {"A": "1", "NSYS_NVTX_PROFILER_REGISTER_ONLY": "0",
                               "VERLPROF_NSYS_OWNER": "/tmp/o dir"}
    assert "--output=/tmp/o dir/.raw/actor_rollout_ref/rank1/actor_rollout_ref_rank1_%p" in argv


def test_controller_options_wrap_the_controller():
    env = controller_options(plan_with({"trace": "nvtx"}))["runtime_env"]
    argv = shlex.split(env["py_executable"])
    assert argv[-2] == "--output=/tmp/o dir/controller/controller_%h_%p"


def test_hostile_values_stay_in_their_slot_through_bash():
    """Ray runs ``bash -c "<py_executable> <args>"``: check with bash itself."""
    hostile = "a b'c\"d;$(touch /tmp/verlprof_pwned)`x`\nz"
    cmd = wrapped_executable(["printf", "%s\\0", hostile], python="END")
    out = subprocess.run(["bash", "-c", cmd], capture_output=True, check=True).stdout
    assert out.split(b"\0")[:-1] == [hostile.encode(), b"END"]
