"""``uninstall()`` gives verl back exactly what ``install()`` found, and verl's profiler is then
verl's alone.

Every object the bridge patches is named here by hand, not read from the bridge's record: its
seams in verl's worker groups, ``DistProfiler``, trainers and replicas (a TRT-LLM replica made
the way verl makes one patches its class and the module global naming its server class), the
launcher's ``run_ppo``, a server's ``generate`` (the code swap: Ray holds the function) and a
fused role worker's ``update_weights`` (a wrapper). Each must change under the bridge, be in
the bridge's record, and be the identical original object after ``uninstall()``.
"""

from __future__ import annotations

import asyncio
import os
import sys
from unittest import mock

import pytest

from tests.helpers import require_verl

require_verl()

from verl.utils.profiler import DistProfiler, ProfilerConfig  # noqa: E402
from verl.utils.profiler.config import NsightToolConfig, TorchProfilerToolConfig  # noqa: E402

from verlprof.bridges.verl import install, uninstall, worker_side  # noqa: E402
from verlprof.bridges.verl.launch import compose_verl_config, install_launcher  # noqa: E402
from verlprof.bridges.verl.patching import ABSENT, MARK, applied  # noqa: E402
from verlprof.bridges.verl.served import LaunchingClass  # noqa: E402


class Server:
    """A replica's server as verl's engines write it: Ray calls ``generate`` itself."""

    async def generate(self, prompt_ids, request_id, *, scale=1):
        await asyncio.sleep(0)
        return [t * scale for t in prompt_ids], request_id


class RoleWorker:
    """A fused worker's role worker: verl's ``WorkerDict`` looks its methods up per call."""

    async def update_weights(self, global_steps=None):
        return global_steps


class Fused:
    def __init__(self):
        self.worker_dict = {"actor_rollout": RoleWorker()}


def _targets():
    """(owner, name) of every verl object the bridge patches in this test."""
    from verl.single_controller.ray.base import RayWorkerGroup
    from verl.trainer import main_ppo
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer
    from verl.workers.rollout.replica import RolloutReplica, RolloutReplicaRegistry

    trtllm = RolloutReplicaRegistry.get("trtllm")
    hooks = ("_start_profiling", "_stop_profiling", "fit")
    return [(DistProfiler, "__init__"), (RayWorkerGroup, "_create_worker"),
            (RayWorkerGroup, "_init_with_resource_pool"), (RolloutReplica, "__init__"),
            *[(trainer, hook) for trainer in (RayPPOTrainer, PPOTrainer) for hook in hooks],
            (trtllm, "launch_servers"), (trtllm, "stop_profile"),
            (vars(sys.modules[trtllm.__module__]), "TRTLLMHttpServer"),
            (main_ppo, "run_ppo"), (Server.generate, "__code__"), (RoleWorker, "update_weights")]


def _held(owner, name):
    """What ``owner`` holds itself under ``name`` (not what it inherits)."""
    if isinstance(owner, dict):
        return owner.get(name, ABSENT)
    return owner.__code__ if name == "__code__" else vars(owner).get(name, ABSENT)


def _patched_by_bridge(value):
    return getattr(value, MARK, False) or isinstance(value, LaunchingClass) or (
        getattr(value, "co_filename", None) == worker_side.__file__)


@pytest.fixture
def verl_as_shipped():
    """This process with no patch of the bridge (other tests attach bridges), and after."""
    uninstall()
    yield _targets()
    uninstall()


def _install_everything():
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    install()
    with mock.patch.dict(os.environ):  # the launcher's environment stays its own
        install_launcher()
    rollout = compose_verl_config(["actor_rollout_ref.rollout.name=trtllm"]).actor_rollout_ref
    RolloutReplicaRegistry.get("trtllm")(replica_rank=0, config=rollout.rollout,
                                        model_config=rollout.model, gpus_per_node=1)
    assert worker_side.route_generation(Server, "rollout") == [Server.generate.__qualname__]
    assert worker_side.route_weight_sync(Fused()) == [RoleWorker.update_weights.__qualname__]


def test_uninstall_puts_back_every_object_the_bridge_patched(verl_as_shipped):
    targets = verl_as_shipped
    shipped = [_held(owner, name) for owner, name in targets]
    assert not [t for t, value in zip(targets, shipped) if _patched_by_bridge(value)]
    _install_everything()
    assert [_patched_by_bridge(_held(*t)) for t in targets] == [True] * len(targets)
    recorded = {(id(p.owner), p.name) for p in applied()}
    assert recorded == {(id(owner), name) for owner, name in targets}  # the record is whole
    assert asyncio.run(Server().generate([1, 2], "r", scale=3)) == ([3, 6], "r")
    uninstall()
    assert applied() == ()
    assert [_held(*t) for t in targets] == shipped
    assert all(_held(*t) is original for t, original in zip(targets, shipped))
    assert asyncio.run(Server().generate([1], "r")) == ([1], "r")
    # and the bridge installs afresh
    assert worker_side.route_generation(Server, "rollout") == [Server.generate.__qualname__]
    assert "DistProfiler" in install() and getattr(DistProfiler.__init__, MARK, False)


def _config(tool, save_path=None):
    return ProfilerConfig(tool=tool, enable=True, all_ranks=False, ranks=[0],
                          save_path=save_path, tool_config=None)


def test_after_uninstall_verls_profiler_is_verls_even_in_a_live_window(verl_as_shipped,
                                                                       tmp_path):
    """Under the bridge a live window routes every ``DistProfiler`` of the process to
    verlprof; uninstall gives each its own impl back, one built after is never adopted, and
    verl's own start/stop and annotate run as in verl (its profiler tests' way: the CUDA
    profiler patched)."""
    install()
    process = worker_side.host()
    adopted = DistProfiler(rank=0, config=_config("nsys"),
                           tool_config=NsightToolConfig(discrete=False))
    own_impl = adopted._impl
    process._verlprof_active = True
    try:
        assert type(adopted._impl).__name__ == "VerlprofImpl"
        uninstall()  # in the window: verl's impl back at once
        assert adopted._impl is own_impl and not adopted.check_this_step()
        assert adopted not in process._profilers
        nsys = DistProfiler(rank=0, config=_config("nsys"),
                            tool_config=NsightToolConfig(discrete=False))
        torch_profiler = DistProfiler(rank=0, config=_config("torch", str(tmp_path)),
                                      tool_config=TorchProfilerToolConfig(),
                                      save_file_prefix="actor")
        assert nsys not in process._profilers and torch_profiler not in process._profilers
        assert type(nsys._impl).__name__ == "NsightSystemsProfiler"
        assert torch_profiler._impl.save_file_prefix == "actor"

        class Worker:
            def __init__(self, profiler):
                self.profiler = profiler

            @DistProfiler.annotate(color="blue", role="actor_update")
            def update_actor(self, x):
                return x + 1

        platform = mock.MagicMock()
        with mock.patch("verl.utils.profiler.nvtx_profile.get_platform", return_value=platform):
            nsys.start(role="train", profile_step=1)
            assert Worker(nsys).update_actor(1) == 2
            nsys.stop(run_command=False)
        assert platform.profiler_start.call_count == platform.profiler_stop.call_count == 1
    finally:
        process._verlprof_active = False
