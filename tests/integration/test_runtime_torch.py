"""The torch profiler backend end to end on a real Ray cluster: Chrome traces per plan, with
the phases, the rank and a ProfilerStep marker that HolisticTraceAnalysis needs."""

from __future__ import annotations

import gzip
import json
import os

import pytest

from tests.integration.runtime_helpers import files_on_disk, planned_files, run_case

pytestmark = pytest.mark.integration


def load(path):
    with gzip.open(path, "rt") as handle:
        return json.load(handle)


def test_torch_whole_and_discrete(ray_cluster, tmp_path):
    out = str(tmp_path)
    plan, result = run_case(out, [
        "trainer.profiler.tool=torch", "trainer.total_training_steps=2",
        "trainer.profile_steps=[2]", "actor_rollout_ref.actor.profile_ranks_all=true",
        "actor_rollout_ref.rollout.profile_ranks=[]", "critic.profile_ranks=[1]",
        "critic.profile_discrete=true", "reward_model.profile_ranks=[]"])
    manifest = result["manifest"]
    assert {r["status"] for r in manifest["reports"]} == {"ok"}
    assert files_on_disk(out) == planned_files(plan, manifest)
    assert len(files_on_disk(out)) == 4  # 2 whole-step actor_rollout_ref + 2 critic phases
    for rel in files_on_disk(out):
        trace = load(os.path.join(out, rel))
        names = {e.get("name") for e in trace["traceEvents"]}
        rank = int(rel.split("/")[2][len("rank"):])
        assert trace["distributedInfo"]["rank"] == rank
        assert "ProfilerStep#2" in names
        if rel.split("/")[1] == "actor_rollout_ref":
            assert {"rollout/generate_sequences", "actor/compute_log_prob",
                    "ref/compute_ref_log_prob", "actor/update_actor"} <= names
            assert trace["distributedInfo"]["world_size"] == 2
        else:
            role_phase = rel.split("/")[1].replace(".", "/")
            assert role_phase in names
            other = {"critic/compute_values", "critic/update_critic"} - {role_phase}
            assert not other & names
    assert not any(p["under_profiler"] for p in result["processes"])
    # the same run as one trace: every process's record_function ranges, clocks measured
    from tests.trace_reader import decode
    from verlprof.trace.build import write_trace

    written = write_trace(out)
    print(written.line())  # docs/user_guide.md#one-trace-of-the-whole-job shows it
    trace = decode(written.path)
    assert sorted(n.split(" (")[0] for n in trace.processes.values()) == [
        "actor_rollout_ref rank 0", "actor_rollout_ref rank 1", "controller", "critic rank 1"]
    for process, name in trace.processes.items():
        names = {s.name for s in trace.slices_of_process(process)}
        if name.startswith("actor_rollout_ref"):
            assert {"ProfilerStep#2", "actor/update_actor"} <= names
        elif name.startswith("critic"):
            assert {"critic/compute_values", "critic/update_critic"} <= names


def test_worker_class_shipped_by_value_records_its_phases(ray_cluster, tmp_path):
    """A worker class defined in a function (or in the driver's ``__main__``) reaches Ray's
    workers by value, rebuilt without running ``annotate`` there: its phases must still be
    recorded once its window opens."""
    import ray

    from tests.faults import harness, light
    from verlprof.worker import ProfilingWorkerMixin, annotate

    class ScriptWorker(ProfilingWorkerMixin):
        @annotate("actor")
        def update_actor(self, batch):
            return sum(batch)

    out = str(tmp_path)
    plan = light.make_plan(out, [*harness.SMALLEST, "trainer.profiler.tool=torch"])
    controller = light.controller_for(plan)
    actors = [ray.remote(num_cpus=0)(ScriptWorker).remote()]
    controller.register_group("actor_rollout_ref", actors)
    with controller.step(1):
        assert ray.get(actors[0].update_actor.remote([1, 2])) == 3
    manifest = controller.finalize().to_dict()
    [entry] = manifest["reports"]
    assert entry["status"] == "ok"
    names = {e.get("name") for e in load(os.path.join(out, entry["path"]))["traceEvents"]}
    assert "actor/update_actor" in names
