"""The verl bridge's own logic without Ray or verl: names, gates, routing, and that verlprof
works where verl is not installed (tests/integration/test_verl_bridge.py runs it in real verl)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import subprocess
import sys

import pytest

from verlprof.bridges.verl.roles import fused_keys, phase_of, roles_of_keys
from verlprof.bridges.verl.worker_side import ProcessHost, VerlprofImpl, remote_call


def test_fused_keys_come_from_verls_prefixed_methods():
    names = ["actor_rollout_ref_start_profile", "actor_rollout_ref_update_actor",
             "critic_start_profile", "critic_train_batch", "execute_with_func_generator",
             "start_profile"]
    assert fused_keys(names) == ("actor_rollout_ref", "critic")
    assert roles_of_keys(fused_keys(names)) == ("actor", "rollout", "ref", "critic")


@pytest.mark.parametrize("label, method, worker, expected", [
    ("actor_update", "update_actor", "actor_rollout_ref", ("actor", "update_actor")),
    ("ref_compute_log_prob", "compute_ref_log_prob", "actor_rollout_ref",
     ("ref", "compute_ref_log_prob")),
    ("rollout_generate", "generate_sequences", "actor_rollout_ref",
     ("rollout", "generate_sequences")),
    ("train_batch", "train_batch", "critic", ("critic", "train_batch")),
    (None, "compute_rm_score", "reward_model", ("rm", "compute_rm_score")),
])
def test_phase_names_follow_verlprofs_role_and_method(label, method, worker, expected):
    assert phase_of(label, method, worker) == expected


class FakeDistProfiler:
    """The three gates of verl's DistProfiler, as verl 0.9.1 keeps them."""

    def __init__(self, enable=False, this_rank=False):
        self._enable, self._this_rank, self._this_step = enable, this_rank, False
        self._impl = "verl's own impl"


def test_gates_open_only_while_a_window_is_live_and_are_restored():
    host = ProcessHost()
    profiler = FakeDistProfiler(enable=False, this_rank=True)
    host.adopt(profiler, "critic")
    assert profiler._impl == "verl's own impl"  # verl's until a window is live
    assert (profiler._enable, profiler._this_rank, profiler._this_step) == (False, True, False)
    host._verlprof_active = True
    assert isinstance(profiler._impl, VerlprofImpl) and profiler._impl.worker_key == "critic"
    assert (profiler._enable, profiler._this_rank, profiler._this_step) == (True, True, True)
    late = FakeDistProfiler()  # a profiler built while a window is open joins at once
    host.adopt(late, "actor_rollout_ref")
    assert late._this_step
    host._verlprof_active = False
    assert profiler._impl == late._impl == "verl's own impl"
    assert (profiler._enable, profiler._this_rank, profiler._this_step) == (False, True, False)
    assert (late._enable, late._this_rank, late._this_step) == (False, False, False)


def test_annotated_phase_runs_plainly_without_a_session():
    host = ProcessHost()
    impl = VerlprofImpl(host, "actor_rollout_ref")

    def update_actor(self, x, scale=1):
        return x * scale

    wrapped = impl.annotate(color="olive", role="actor_update")(update_actor)
    assert wrapped(object(), 3, scale=2) == 6
    assert wrapped.__name__ == "update_actor"


def test_remote_call_reaches_only_verlprof_rpcs():
    with pytest.raises(PermissionError):
        remote_call(object(), "__init__")
    assert remote_call(object(), "verlprof_status").configured is False


def _python(code: str) -> str:
    """What a fresh interpreter running ``code`` prints (it must succeed)."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip()


def test_verlprof_and_its_bridge_import_without_verl():
    code = ("import sys\n"
            "class NoVerl:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'verl' or name.startswith('verl.'):\n"
            "            raise ImportError('verl is not installed')\n"
            "sys.meta_path.insert(0, NoVerl())\n"
            "import verlprof, verlprof.bridges.verl as bridge\n"
            "from verlprof import build_plan, load_config, ProfileController\n"
            "print(bridge.install())\n")
    assert _python(code) == "[]"  # nothing to patch, and no error


def test_the_plugin_does_nothing_unless_asked():
    code = ("import os, sys\n"
            "os.environ.pop('VERLPROF_VERL_BRIDGE', None)\n"
            "import verlprof.bridges.verl.plugin\n"
            "print(sorted(m for m in sys.modules if m.startswith('verlprof.bridges.verl.')))\n")
    assert _python(code) == "['verlprof.bridges.verl.env', 'verlprof.bridges.verl.plugin']"


class ReplicaServer:
    """A served model's server as verl's engines write it (``async def generate``)."""

    async def generate(self, prompt_ids, sampling_params, request_id, **kwargs):
        await asyncio.sleep(0)
        return [t + 1 for t in prompt_ids], request_id, kwargs


def _recording_session(ranges):
    """A session class whose capture records each phase's label in ``ranges``."""
    class Capture:
        @contextlib.contextmanager
        def phase(self, label):
            ranges.append(label)
            yield

    class Session:
        capture = Capture()

    return Session


def test_a_hybrid_training_process_ranges_its_weight_sync_once_configured():
    """verl 0.7+ runs no generation in a training process of a hybrid replica: what the
    rollout does there is ``update_weights`` (the weights handed to the engine). Configuring
    such a process (its plan's roles hold rollout) reroutes it, in the fused worker's role
    workers too, through verl's own ``@register``; it records ``rollout/update_weights`` in a
    live window only."""
    from verl.single_controller.base.decorator import Dispatch, register

    from verlprof.bridges.verl import worker_side

    class TrainingWorker:  # as verl's ActorRolloutRefWorker writes it
        synced = 0

        @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)
        async def update_weights(self, global_steps=None, mode="auto"):
            await asyncio.sleep(0)
            type(self).synced += 1  # (naming the class would be a closure: not verl's)
            return global_steps

    class Fused:  # verl's fused WorkerDict: its roles' workers by key
        def __init__(self):
            self.worker_dict = {"actor_rollout": TrainingWorker()}

    ranges = []
    Session = _recording_session(ranges)

    assert worker_side.route_weight_sync(Fused()) == [
        f"{TrainingWorker.__qualname__}.update_weights"]
    assert worker_side.route_weight_sync(Fused()) == []  # once
    worker = TrainingWorker()
    assert asyncio.run(worker.update_weights(3)) == 3 and ranges == []  # no session
    host = worker_side.host()
    host._verlprof_session, host._verlprof_active = Session(), True
    try:
        assert asyncio.run(worker.update_weights(global_steps=4)) == 4
        assert ranges == ["rollout/update_weights"] and TrainingWorker.synced == 2
    finally:
        host._verlprof_session, host._verlprof_active = None, False


def test_a_replica_servers_generate_is_ranged_only_in_a_live_window():
    """The server class wrapped as Ray wraps actor methods (functools.wraps): its generate is
    rerouted in place (Ray keeps the function objects) and records ``rollout/generate`` while
    this process has a live window, and nothing otherwise."""
    from verlprof.bridges.verl import worker_side

    original = ReplicaServer.__dict__["generate"]

    @functools.wraps(original)
    async def traced(self, *args, **kwargs):  # Ray's tracing wrapper
        return await original(self, *args, **kwargs)

    ReplicaServer.generate = traced
    ranges = []
    Session = _recording_session(ranges)

    assert worker_side.route_generation(ReplicaServer, "rollout") == ["ReplicaServer.generate"]
    assert worker_side.route_generation(ReplicaServer, "rollout") == []  # once
    host = worker_side.host()
    call = ReplicaServer().generate([1, 2], {}, "r1", extra=3)
    assert asyncio.run(call) == ([2, 3], "r1", {"extra": 3})
    assert ranges == []  # no session: verl's function as it is
    host._verlprof_session = Session()
    try:
        asyncio.run(ReplicaServer().generate([1], {}, "r2"))
        assert ranges == []  # a session, but no live window
        host._verlprof_active = True
        asyncio.run(ReplicaServer().generate([1], {}, "r3"))
        assert ranges == ["rollout/generate"]
    finally:
        host._verlprof_active = False
        host._verlprof_session = None
