"""With the bridge switched on, verl's own profiler is verl's wherever verlprof does not profile.

verl's ``DistProfiler`` is built here for each of verl 0.9.1's tools, with the bridge installed
in this process (``install()``: what ``VERLPROF_VERL_BRIDGE=1`` does in every verl process),
unattached and attached on a rank its plan does not select, and compared with what verl itself
builds: the impl's type and state, ``save_file_prefix``, and the backend calls ``start`` and
``stop`` make (the CUDA profiler calls patched, as verl's own profiler tests patch them). Only
while a window of the process is live does a profiler delegate to verlprof, and it is verl's
again when the window closes.
"""

from __future__ import annotations

from unittest import mock

import pytest

from tests.helpers import require_verl

require_verl()

from verl.utils.profiler import DistProfiler, ProfilerConfig  # noqa: E402
from verl.utils.profiler.config import (  # noqa: E402
    NsightToolConfig,
    TorchMemoryToolConfig,
    TorchProfilerToolConfig,
)
from verl.utils.profiler.profile import _NoOpProfiler  # noqa: E402

from verlprof.bridges.verl import install  # noqa: E402
from verlprof.bridges.verl.patching import MARK  # noqa: E402
from verlprof.bridges.verl.worker_side import VerlprofImpl, host  # noqa: E402

TOOLS = {
    None: None,
    "nsys": NsightToolConfig(discrete=False),
    "torch": TorchProfilerToolConfig(),
    "torch_memory": TorchMemoryToolConfig(),
}
"""verl's tools that build on a CPU machine, each with verl's default tool config."""


def _config(tool, enable=True, ranks=(0,), save_path=None):
    return ProfilerConfig(tool=tool, enable=enable, all_ranks=False, ranks=list(ranks),
                          save_path=save_path, tool_config=None)


def _as_verl_builds_it(rank, config, tool_config, prefix):
    """A ``DistProfiler`` built by verl's own ``__init__``, the bridge's patch bypassed."""
    init = DistProfiler.__init__
    original = getattr(init, "__wrapped__", init)
    profiler = DistProfiler.__new__(DistProfiler)
    original(profiler, rank, config, tool_config, save_file_prefix=prefix)
    return profiler


def _state(profiler):
    """What verl's code and tests read of a ``DistProfiler`` (the impl by type and attributes)."""
    impl = profiler._impl
    impl_state = {k: v if isinstance(v, (bool, int, float, str, type(None))) else type(v)
                  for k, v in vars(impl).items()}  # objects (a sampler) by type
    return (type(impl), impl_state, profiler.save_file_prefix, profiler.check_enable(),
            profiler.check_this_rank(), profiler.check_this_step(),
            profiler.is_discrete_mode())


@pytest.fixture(scope="module", autouse=True)
def bridge_switched_on():
    """The bridge installed in this process, as the plugin installs it in verl's processes."""
    assert "DistProfiler" in install()
    assert getattr(DistProfiler.__init__, MARK, False)


@pytest.mark.parametrize("tool", list(TOOLS))
@pytest.mark.parametrize("rank", [0, 1])
def test_unattached_profiler_is_verls_own(tool, rank, tmp_path):
    config = _config(tool, save_path=str(tmp_path))
    built = DistProfiler(rank=rank, config=config, tool_config=TOOLS[tool],
                         save_file_prefix="actor")
    reference = _as_verl_builds_it(rank, config, TOOLS[tool], "actor")
    assert _state(built) == _state(reference)
    assert type(built._impl) is not VerlprofImpl
    if tool is None:
        assert isinstance(built._impl, _NoOpProfiler)
    if tool == "torch":
        assert built._impl.save_file_prefix == "actor"


@pytest.mark.parametrize("enable, rank, calls", [(True, 0, 1), (True, 1, 0), (False, 0, 0)])
def test_nsys_start_and_stop_reach_the_cuda_profiler_as_in_verl(enable, rank, calls):
    """verl's NsightSystemsProfiler starts and stops the CUDA profiler on a selected, enabled
    rank (whole-step mode), and does nothing elsewhere: so does it with the bridge on."""
    profiler = DistProfiler(rank=rank, config=_config("nsys", enable=enable),
                            tool_config=TOOLS["nsys"])
    platform = mock.MagicMock()
    with mock.patch("verl.utils.profiler.nvtx_profile.get_platform", return_value=platform):
        profiler.start(role="train", profile_step=1)
        assert profiler.check_this_step() == bool(calls)
        profiler.stop(run_command=False)
    assert platform.profiler_start.call_count == calls
    assert platform.profiler_stop.call_count == calls


def test_torch_start_and_stop_run_verls_torch_profiler(tmp_path):
    profiler = DistProfiler(rank=0, config=_config("torch", save_path=str(tmp_path)),
                            tool_config=TOOLS["torch"], save_file_prefix="critic")
    impl = profiler._impl
    with mock.patch.object(type(impl), "start") as start, \
            mock.patch.object(type(impl), "stop") as stop:
        profiler.start(profile_step=3)
        profiler.stop(run_command=False)
    start.assert_called_once_with(profile_step=3)
    stop.assert_called_once_with()


def test_verls_annotate_runs_verls_impl_when_verl_profiles():
    """verl profiling itself (its own gates open) reaches verl's impl, not verlprof's."""

    class Worker:
        def __init__(self, profiler):
            self.profiler = profiler

        @DistProfiler.annotate(color="blue", role="actor_update")
        def update_actor(self, x):
            return x + 1

    profiler = DistProfiler(rank=0, config=_config("nsys"), tool_config=TOOLS["nsys"])
    seen = []
    real = type(profiler._impl).annotate

    def spy(self, *args, **kwargs):
        seen.append(type(self).__name__)
        return real(self, *args, **kwargs)

    with mock.patch.object(type(profiler._impl), "annotate", spy), \
            mock.patch("verl.utils.profiler.nvtx_profile.get_platform"):
        profiler.start()
        assert Worker(profiler).update_actor(1) == 2
        profiler.stop(run_command=False)
    assert seen == ["NsightSystemsProfiler"]


def test_attached_bridge_leaves_unplanned_ranks_to_verl(tmp_path):
    """A bridge attached in this process whose plan selects global_pool rank 1 only: a verl
    profiler of rank 0, and of rank 1 outside a window, is verl's own."""
    from verlprof.bridges.verl import attach
    from verlprof.bridges.verl.driver_side import active_bridge, set_active_bridge
    from verlprof.bridges.verl.launch import compose_verl_config

    config = compose_verl_config([
        "trainer.device=cpu", "global_profiler.tool=nsys", "global_profiler.steps=[1]",
        f"global_profiler.save_path={tmp_path}",
        "actor_rollout_ref.actor.profiler.enable=true",
        "actor_rollout_ref.actor.profiler.ranks=[1]", "trainer.n_gpus_per_node=2",
        "global_profiler.global_tool_config.nsys.worker_nsight_options.capture-range=nvtx"])
    bridge = attach(config, preflight=False, echo=False)
    try:
        assert ("global_pool", 1) in [(p.group, p.rank) for p in bridge.plan.processes]
        assert ("global_pool", 0) not in [(p.group, p.rank) for p in bridge.plan.processes]
        for rank in (0, 1):
            cfg = _config("nsys", ranks=(1,))
            built = DistProfiler(rank=rank, config=cfg, tool_config=TOOLS["nsys"],
                                 save_file_prefix="actor")
            assert _state(built) == _state(_as_verl_builds_it(rank, cfg, TOOLS["nsys"],
                                                              "actor"))
    finally:
        bridge.controller.run.release()
        if active_bridge() is bridge:
            set_active_bridge(None)


def test_a_live_window_delegates_to_verlprof_then_gives_verl_back(tmp_path):
    config = _config("torch", save_path=str(tmp_path))
    profiler = DistProfiler(rank=0, config=config, tool_config=TOOLS["torch"],
                            save_file_prefix="actor_rollout_ref")
    before = _state(profiler)
    own_impl = profiler._impl
    process = host()
    process._verlprof_active = True  # the session armed this process's first window
    try:
        assert isinstance(profiler._impl, VerlprofImpl)
        assert profiler._impl.worker_key == "actor_rollout_ref"
        assert profiler.check_this_step() and profiler.check_this_rank()
    finally:
        process._verlprof_active = False
    assert profiler._impl is own_impl
    assert _state(profiler) == before
