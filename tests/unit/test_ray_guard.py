"""verlprof's background threads and a driver's ``ray.shutdown()`` (verlprof.worker.ray_guard.py).

Seen in the suite: P2 shut Ray down with its controllers never finalized, while the placer
thread submitted ``verlprof_ready``; the pytest worker died of a segfault in Ray's core worker.
Without the guard, the same race run alone (below) left the calling thread hung in Ray or
failing on every call in 8 of 8 runs; with it the thread stops at its next call. A second
form of the crash: any Ray call after the shutdown, down to this node's id, makes Ray's core
worker end the process ("The core worker has already been shutdown"; 1 in 5 runs of P2 beside
a CPU load, from the placer thread)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import types

import pytest

from verlprof.plan_model import RunPolicy
from verlprof.runtime import placement
from verlprof.runtime.rank_rpc import RankCalls
from verlprof.worker.ray_guard import RayGone, ray_connected

RACE = textwrap.dedent("""
    import threading, time, ray
    from verlprof.worker.identity import node_id
    from verlprof.worker.ray_guard import RayGone, ray_connected
    ray.init(include_dashboard=False, logging_level="ERROR", log_to_driver=False, num_cpus=1)

    @ray.remote(num_cpus=0)
    class Rank:
        def ready(self):
            return []

    ranks = [Rank.remote() for _ in range(4)]
    ray.get([r.ready.remote() for r in ranks])
    calls, ended = [0], []

    def placer():  # calls Ray back to back, as a placer asking busy ranks does
        try:
            while True:
                with ray_connected():
                    refs = [r.ready.remote() for r in ranks]
                    ray.wait(refs, num_returns=len(refs), timeout=2.0)
                node_id()  # as placing names this node: "" once Ray is gone
                calls[0] += 1
        except RayGone:
            ended.append("RayGone")
        except Exception as err:
            ended.append(type(err).__name__)

    thread = threading.Thread(target=placer, daemon=True)
    thread.start()
    time.sleep(1.0)
    ray.shutdown()
    thread.join(5.0)
    print(f"calls={calls[0]} ended={ended} alive={thread.is_alive()}")
""")


@pytest.mark.integration
def test_a_thread_calling_ray_stops_cleanly_when_the_driver_shuts_ray_down():
    done = subprocess.run([sys.executable, "-c", RACE], capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    line = done.stdout.strip().splitlines()[-1]
    assert line.endswith("ended=['RayGone'] alive=False"), done.stdout + done.stderr[-3000:]
    assert int(line.split()[0].split("=")[1]) > 0  # it did call Ray before the shutdown


def test_no_call_is_made_once_ray_is_shut_down(monkeypatch):
    import ray

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    with pytest.raises(RayGone), ray_connected():
        pytest.fail("the body ran with Ray shut down")


def test_the_placer_thread_ends_quietly_when_ray_is_gone(monkeypatch):
    """A driver that shut Ray down without finalize: the placer's next look ends its thread,
    with no problem logged for it (finalize, if it comes, places what is left)."""
    import ray

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    rpc = RankCalls(rpc_timeout_s=10.0)
    rpc.actors[("actor_rollout_ref", 0)] = object()
    run = types.SimpleNamespace(rpc=rpc, plan=types.SimpleNamespace(policy=RunPolicy()))
    placer = placement.Placement(run, targets=list, gathered=list)
    placer._waiting.add(("actor_rollout_ref", 0))  # a closed window whose report is awaited
    thread = threading.Thread(target=placer._run, daemon=True)
    thread.start()
    thread.join(10.0)
    assert not thread.is_alive() and placer.problems == []
