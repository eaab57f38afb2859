"""verlprof inside real verl (0.9.1 from PyPI) on CPU: verl's config, resource pools, fused worker
groups, profiler classes and trainer hooks, with real Ray, real nsys and the torch profiler.

Checked file by file against the plan: only the planned processes run under nsys, one report
per process and window (whole-step) or per planned phase call (discrete), each holding the
NVTX ranges of every colocated role, the controller's capture bounded to the profiled steps,
and ``verlprof report`` reading it all.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys

import pytest

from tests.helpers import local_ray_cluster, require_nsys, require_verl
from tests.integration.runtime_helpers import nvtx_names

pytestmark = pytest.mark.integration

require_verl()

from tests.integration.apps.verl_app import GLOBAL_RANKS, compose_verl_config  # noqa: E402
from verlprof.bridges.verl import plan_of  # noqa: E402
from verlprof.config.topology import GroupTopology, Topology  # noqa: E402

TOPOLOGY = Topology(groups=(
    GroupTopology(name="global_pool", roles=("actor", "rollout", "ref", "critic"),
                  world_size=GLOBAL_RANKS),
    GroupTopology(name="reward_pool", roles=("rm",), world_size=1)), cuda=False)
"""verl's pools for this run: actor/rollout/ref and critic fused on 2 ranks, rm on its own."""

NSYS = "global_profiler.global_tool_config.nsys"
PROFILER = ["trainer.device=cpu", "global_profiler.steps=[1,2]",
            "actor_rollout_ref.actor.profiler.enable=true",
            "actor_rollout_ref.actor.profiler.ranks=[1]",
            "critic.profiler.enable=true", "critic.profiler.ranks=[0]",
            f"{NSYS}.worker_nsight_options.capture-range=nvtx",
            f"{NSYS}.worker_nsight_options.trace='nvtx,osrt'",
            f"{NSYS}.controller_nsight_options.trace='nvtx,osrt'"]
"""Only profiler keys: actor rank 1 and critic rank 0, steps 1 and 2 (both ranks of the fused
pool are selected, each by one role; the reward pool's rank is not), and the nvtx trigger
with CPU traces, since these machines have no GPU."""

ROLES_PHASES = {"rollout/generate_sequences", "actor/compute_log_prob",
                "ref/compute_ref_log_prob", "actor/update_actor", "critic/train_batch"}
"""Every annotated phase of the fused process, whichever role selected it."""


@pytest.fixture(scope="module")
def ray_four_cpus():
    """verl's pools reserve one CPU per bundle: 2 + 1, plus room for the runner."""
    with local_ray_cluster(num_cpus=4):
        yield


def _run(tmp_path, extra):
    import ray

    from tests.integration.apps.verl_app import VerlTaskRunner
    from verlprof.runtime.ray_options import controller_options

    overrides = [*PROFILER, f"global_profiler.save_path={tmp_path}", *extra]
    plan = plan_of(compose_verl_config(overrides), TOPOLOGY)
    runner = VerlTaskRunner.options(**controller_options(plan)).remote()
    result = ray.get(runner.run.remote(overrides, TOPOLOGY, plan), timeout=600)
    ray.wait([runner.__ray_terminate__.remote()], timeout=60)
    return plan, result


def _by_status(manifest):
    return collections.Counter(r["status"] for r in manifest["reports"])


def test_whole_step_reports_of_fused_processes(ray_four_cpus, tmp_path):
    require_nsys()
    plan, result = _run(tmp_path, ["global_profiler.tool=nsys"])
    manifest = result["manifest"]
    # colocation: the actor and critic roles answer from the same process on each rank
    assert result["pids"]["actor_rollout_ref"] == result["pids"]["critic"]
    # only the planned processes are wrapped: both global ranks, not the reward pool's
    assert [p.rank for p in plan.processes] == [0, 1]
    assert [s["under_profiler"] for s in result["status"]["global_pool"]] == [True, True]
    assert [s["under_profiler"] for s in result["status"]["reward_pool"]] == [False]
    workers = [r for r in manifest["reports"] if r["group"] != "controller"]
    assert len(workers) == 2 * 2 and _by_status(manifest)["ok"] == len(manifest["reports"])
    for report in workers:
        names = nvtx_names(os.path.join(str(tmp_path), report["path"]))
        assert set(names) == ROLES_PHASES, report["path"]  # every colocated role, one report
        assert all(count == 1 for count in names.values())
        assert list(report["roles"]) == ["actor", "rollout", "ref", "critic"]
    controller = [r for r in manifest["reports"] if r["group"] == "controller"]
    assert [tuple(r["steps"]) for r in controller] == [(1,), (2,)]  # bounded to the steps
    assert not result["problems"]
    # the bridged run as one trace: each fused process with every role's phases, the
    # controller with its steps, clocks measured through verl's worker groups
    from tests.trace_reader import decode
    from verlprof.trace.build import write_trace

    assert all(p["clock_error_ns"] is not None for p in manifest["processes"])
    trace = decode(write_trace(str(tmp_path)).path)
    assert len(trace.processes) == 1 + len(manifest["processes"])
    for process, name in trace.processes.items():
        names = {s.name for s in trace.slices_of_process(process)}
        want = {"step/1", "step/2"} if name.startswith("controller") else ROLES_PHASES
        assert want <= names, (name, names)


def test_discrete_reports_one_per_planned_phase_call(ray_four_cpus, tmp_path):
    require_nsys()
    plan, result = _run(tmp_path, ["global_profiler.tool=nsys",
                                   f"{NSYS}.discrete=true",
                                   f"{NSYS}.controller_nsight_options=null"])
    manifest = result["manifest"]
    assert _by_status(manifest) == {"ok": len(plan.reports)}
    by_rank = collections.defaultdict(set)
    for report in manifest["reports"]:
        by_rank[report["rank"]].add((report["steps"][0], report["role"], report["phase"]))
        names = nvtx_names(os.path.join(str(tmp_path), report["path"]))
        assert set(names) == {f"{report['role']}/{report['phase']}"}, report["path"]
    # verl 0.9.1 annotates the critic's train_batch only; the reference policy, fused into the
    # actor's worker since 0.8.0, follows the actor's block; the rollout's phases live in
    # verl's rollout servers, so none is planned in the hybrid process
    assert by_rank[0] == {(step, "critic", "train_batch") for step in (1, 2)}
    assert {(role, phase) for _, role, phase in by_rank[1]} == {
        ("actor", "compute_log_prob"), ("actor", "update_actor"),
        ("ref", "compute_ref_log_prob")}


def test_torch_profiler_through_verl_classes(ray_four_cpus, tmp_path):
    from verlprof.report import summarize

    _, result = _run(tmp_path, ["global_profiler.tool=torch"])
    manifest = result["manifest"]
    assert _by_status(manifest) == {"ok": 4}
    assert not any(s["under_profiler"] for pool in result["status"].values()
                   for s in pool)  # torch runs in-process: nothing wrapped
    from rich.console import Console

    summary = summarize(str(tmp_path), console=Console(quiet=True), picture=False)
    phases = {(r.group, r.rank, r.role, r.phase) for r in summary.rows}
    assert ("global_pool", 0, "critic", "train_batch") in phases
    assert ("global_pool", 1, "actor", "update_actor") in phases


def test_rocprof_sys_output_is_gathered_at_fits_end(ray_four_cpus, tmp_path):
    """verl kills its workers at shutdown, so rocprof-sys (which writes at exit) would leave
    nothing: at fit's end the bridge ends the planned processes and gathers their output."""
    fake = os.path.join(os.path.dirname(__file__), "apps", "fake_rocprof_sys_python.sh")
    plan, result = _run(tmp_path, ["global_profiler.tool=rocprof_sys",
                                   f"+trainer.profiler.rocprof_sys.executable={fake}"])
    manifest = result["manifest"]
    # the manifest finish() returned is already the rewritten one: every window ok
    assert [(e["status"], e["reason"]) for e in manifest["reports"]] == \
        [("ok", None)] * len(plan.reports) == [("ok", None)] * 4
    # the planned processes (both ranks of the fused pool) were ended; the reward pool's not
    assert result["status"]["global_pool"] == [{"ended": True}] * GLOBAL_RANKS
    assert [s.get("ended") for s in result["status"]["reward_pool"]] == [None]
    assert not result["problems"]
    pids = {(p["group"], p["rank"]): p["pid"] for p in manifest["processes"]}
    for entry in manifest["reports"]:
        pid = pids[(entry["group"], entry["rank"])]
        folder = os.path.join(str(tmp_path), entry["path"])
        # the process's own files, every window it traced with every fused role's phases
        names = sorted(os.listdir(folder))
        assert names and all(n.endswith((f"-{pid}.json", f"-{pid}.proto", f"-{pid}.txt"))
                             for n in names)
        wall = next(n for n in names if n.endswith(f"wall-clock-{pid}.json"))
        with open(os.path.join(folder, wall)) as handle:
            traced = json.load(handle)
        assert len(traced["windows"]) == 2
        assert all(set(w["regions"]) >= ROLES_PHASES for w in traced["windows"])


def test_verl_workers_unchanged_with_the_bridge_on():
    """The same worker classes build verl's own profiler implementation with verlprof
    installed, switched off or on: the bridge changes nothing it does not profile."""
    code = (
        "import os\n"
        "os.environ.update(RANK='0', WORLD_SIZE='1', MASTER_ADDR='127.0.0.1', MASTER_PORT='0')\n"
        "from tests.integration.apps.verl_app import compose_verl_config\n"
        "from tests.integration.apps import verl_workers as w\n"
        "cfg = compose_verl_config(['global_profiler.tool=nsys', 'trainer.device=cpu'])\n"
        "worker = w.ActorRolloutRefWorker(cfg.actor_rollout_ref)\n"
        "print(type(worker.profiler._impl).__name__, worker.compute_log_prob(1) > 0)\n")
    outputs = []
    for on in ("", "1"):
        env = {k: v for k, v in os.environ.items() if not k.startswith("VERLPROF")}
        env.update(VERLPROF_VERL_BRIDGE=on, VERL_USE_EXTERNAL_MODULES=
                   "verlprof.bridges.verl.plugin" if on else "")
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, timeout=300, cwd=os.path.dirname(os.path.dirname(
                                  os.path.dirname(os.path.abspath(__file__)))))
        assert proc.returncode == 0, proc.stderr[-2000:]
        outputs.append(proc.stdout.strip().splitlines()[-1])
    assert outputs == ["NsightSystemsProfiler True"] * 2


def test_launcher_wraps_verl_run_ppo(ray_four_cpus, tmp_path):
    """verl's own ``run_ppo`` through the launcher: the plan is made from verl's keys, verl's
    step list is cleared (verl wraps and starts nothing itself), the TaskRunner runs under nsys
    with the bridge attached, and its capture is bounded to the profiled steps."""
    require_nsys()
    from verl.trainer import main_ppo

    from tests.integration.apps.verl_app import ProbeTaskRunner
    from verlprof.bridges.verl.launch import wrap_run_ppo

    one_step = [o for o in PROFILER if not o.startswith("global_profiler.steps=")]
    config = compose_verl_config([*one_step, f"global_profiler.save_path={tmp_path}",
                                  "global_profiler.tool=nsys", "global_profiler.steps=[1]"])
    # the probe builds no worker group, so the selected ranks write nothing: the launcher
    # says so and exits 3 (after the run, with the controller's report written)
    with pytest.raises(SystemExit) as ended:
        wrap_run_ppo(main_ppo.run_ppo)(config, ProbeTaskRunner)
    assert ended.value.code == 3
    with open(tmp_path / "probe.json") as handle:
        probe = json.load(handle)
    assert probe == {"attached": True, "plan_steps": [1], "verl_steps": None,
                     "under_profiler": True, "bridge_env": "1"}
    with open(tmp_path / "manifest.json") as handle:
        manifest = json.load(handle)
    controller = [r for r in manifest["reports"] if r["group"] == "controller"]
    assert [(r["steps"], r["status"]) for r in controller] == [([1], "ok")]
    assert set(nvtx_names(os.path.join(str(tmp_path), controller[0]["path"]))) == {
        "step/1", "controller/fit"}
