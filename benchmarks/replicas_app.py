"""Run by :mod:`benchmarks.replicas` in a process of its own (its own Ray cluster, with the
logical GPUs verl's resource pools ask for): verl 0.9.1's real ``LLMServerManager`` and
``RolloutReplica`` classes over the stand-in ``cpu_standin`` engine of the CPU tests
(``tests/integration/apps/verl_cpu_engine.py``, registered through verl's
``RolloutReplicaRegistry``), two standalone replicas per side:

- OFF: plain verl, no verlprof (built first, replica ranks 2 and 3);
- ON: verlprof's bridge attached as a custom driver attaches it (docs/verl.md), nsys whole-step
  windows on the odd steps, replica 0 selected (under nsys), replica 1 not.

The sides take turns in blocks (ON, OFF, OFF, ON, ...). Each step sends ``requests`` generate
calls to each replica of its side at once (what verl's ``LLMServerClient`` sends); the ON
side's step is ``bridge.begin_step`` / ``end_step`` around them, as in fit's ``gen`` phase.
The engine thread of replica 0 of each side is pinned to the first core, replica 1's to the
second (a replica owns its GPUs and cores). Prints one line ``RESULT <json>``: per step the
entry, body and exit of the ON step, each replica's generate time, the CPU time of the
unselected replica's engine thread and of its whole process in the step; bare round trips to
ON's replica 0; the manifest; nsys' start floor under replica 0's nsys argv (measured after
the run).

Then ``together`` ON steps send their requests with OFF's at once (four replicas, the same
neighbours for both unselected ones), each side first in turn (two steps ON's, two OFF's);
per step each replica's generate time (ON's listed first), both unselected replicas' process
CPU, and which side sent first.

argv: output directory, rounds, steps per block, requests per replica per step, together.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from typing import Any, Dict, List, Sequence

from benchmarks.common import idle_cpu_rates, process_cpu_s

RESULT = "RESULT "
NSYS = "global_profiler.global_tool_config.nsys"
PROMPT = [8, 9, 10, 11, 12, 13]
SAMPLING = {"max_tokens": 6, "temperature": 1.0}
OFF_START_RANK = 2
"""OFF's replica ranks start here: its servers' Ray names must not be ON's."""


def base_overrides(steps: int) -> List[str]:
    """Two standalone replicas of one (logical) GPU each; ``trainer.n_gpus_per_node=2`` so
    that the plan predicts both (verl maps the rollout's ranks to replicas as the actor's)."""
    return ["actor_rollout_ref.rollout.nnodes=1", "actor_rollout_ref.rollout.n_gpus_per_node=2",
            "trainer.n_gpus_per_node=2", f"trainer.total_training_steps={steps}"]


def profiled_overrides(steps: int) -> List[str]:
    """verl's own keys: nsys on the odd steps, the actor's rank 0 (and with it replica 0),
    the NVTX trigger (no GPU), the controller plain."""
    odd = ",".join(str(s) for s in range(1, steps + 1, 2))
    return ["global_profiler.tool=nsys", f"global_profiler.steps=[{odd}]",
            "actor_rollout_ref.actor.profiler.enable=true",
            "actor_rollout_ref.actor.profiler.ranks=[0]",
            f"{NSYS}.worker_nsight_options.capture-range=nvtx",
            f"{NSYS}.worker_nsight_options.trace='nvtx,osrt'",
            f"{NSYS}.controller_nsight_options=null"]


def pin_engine(server: Any, index: int) -> List[int]:
    """The server's engine thread (where its generation runs) onto one core (``index`` modulo
    the cores allowed), as P3 pins a rank's phases; the rest of the process (Ray's threads,
    nsys' collection) runs where the kernel puts it."""
    cpus = sorted(os.sched_getaffinity(0))
    core = {cpus[index % len(cpus)]}
    server._engine_thread.submit(os.sched_setaffinity, 0, core).result(timeout=60)
    return sorted(core)


def engine_cpu_s(server: Any) -> float:
    """CPU seconds the server's engine thread has used so far."""
    return server._engine_thread.submit(time.thread_time).result(timeout=60)


def cpu_now(server: Any) -> List[float]:
    """(engine thread, whole process) CPU seconds of ``server`` so far."""
    import ray

    return ray.get([server.__ray_call__.remote(engine_cpu_s),
                    server.__ray_call__.remote(process_cpu_s)], timeout=60)


def noop(_: Any) -> None:
    return None


def generate_step(servers: Sequence[Any], tag: str, requests: int) -> List[float]:
    """``requests`` calls to each server at once; seconds until each server's last answer
    (each answer's moment taken as it comes, whichever server answers first)."""
    import ray

    began = time.perf_counter()
    owner: Dict[Any, int] = {}
    for i, s in enumerate(servers):
        for k in range(requests):
            owner[s.generate.remote(prompt_ids=PROMPT, sampling_params=SAMPLING,
                                    request_id=f"{tag}-{i}-{k}")] = i
    done = [0.0] * len(servers)
    waiting = list(owner)
    until = time.monotonic() + 120
    while waiting:
        ready, waiting = ray.wait(waiting, num_returns=1, timeout=until - time.monotonic())
        if not ready:
            raise TimeoutError(f"{tag}: {len(waiting)} generate calls unanswered after 120 s")
        at = time.perf_counter() - began
        for ref in ready:
            ray.get(ref)  # an error in generate surfaces here
            done[owner[ref]] = at
    return done


def run(out: str, rounds: int, block: int, requests: int, together: int) -> Dict[str, Any]:
    import ray
    from verl.workers.rollout.llm_server import LLMServerManager

    from tests.integration.apps.verl_cpu_trainer import ENGINE_MODULE, compose
    from verlprof.bridges.verl import attach

    importlib.import_module(ENGINE_MODULE)
    steps = rounds * block + together
    off_config = compose(base_overrides(steps), os.path.join(out, "off"))
    on_config = compose([*base_overrides(steps), *profiled_overrides(steps)],
                        os.path.join(out, "on"))
    off = LLMServerManager.create(config=off_config, start_rank=OFF_START_RANK)
    bridge = attach(on_config, preflight="quick", echo=False)
    on = LLMServerManager.create(config=on_config)
    servers = {side: [r.servers[0] for r in manager.get_replicas()]
               for side, manager in (("on", on), ("off", off))}
    for side in servers.values():
        ray.get([s.__ray_call__.remote(pin_engine, i) for i, s in enumerate(side)], timeout=60)
    for side, handles in servers.items():  # warm both engines before any timing
        generate_step(handles, f"{side}-warm", requests)
    times: Dict[str, Dict[int, Any]] = {key: {} for key in (
        "enter", "body", "exit", "on", "off", "cpu_on", "cpu_off", "pcpu_on", "pcpu_off",
        "together", "together_cpu", "together_first", "edges")}
    bare: List[float] = []
    done = {"on": 0, "off": 0}

    def on_step(step: int, handles: Sequence[Any], unselected: Any = None) -> List[float]:
        """One ON step; with ``unselected``, its CPU time is read around the generation (the
        span OFF's reading covers) and around begin_step and end_step apart."""
        probe = (lambda: cpu_now(unselected)) if unselected is not None else (lambda: None)
        c0, t0 = probe(), time.perf_counter()
        bridge.begin_step(step)
        ta = time.perf_counter()
        c1 = probe()
        t1 = time.perf_counter()
        took = generate_step(handles, f"on-{step}", requests)
        t2 = time.perf_counter()
        c2 = probe()
        tb = time.perf_counter()
        bridge.end_step(step)
        t3 = time.perf_counter()
        c3 = probe()
        times["enter"][step], times["body"][step], times["exit"][step] = ta - t0, t2 - t1, t3 - tb
        if unselected is not None:
            times["cpu_on"][step], times["pcpu_on"][step] = c2[0] - c1[0], c2[1] - c1[1]
            times["edges"][step] = [c1[1] - c0[1] + c3[1] - c2[1], ta - t0 + t3 - tb]
        return took

    for index in range(rounds):
        for side in (("on", "off") if index % 2 == 0 else ("off", "on")):
            for _ in range(block):
                done[side] += 1
                step = done[side]
                unselected = servers[side][1]
                if side == "on":
                    times["on"][step] = on_step(step, servers["on"], unselected)
                    b0 = time.perf_counter()  # a bare round trip to the planned replica
                    ray.get(servers["on"][0].__ray_call__.remote(noop), timeout=60)
                    bare.append(time.perf_counter() - b0)
                    continue
                cpu = cpu_now(unselected)
                times["off"][step] = generate_step(servers["off"], f"off-{step}", requests)
                after = cpu_now(unselected)
                times["cpu_off"][step], times["pcpu_off"][step] = (after[0] - cpu[0],
                                                                   after[1] - cpu[1])
    # what an idle unselected replica's process uses per second, each side (Ray's own threads)
    idle = dict(zip(("on", "off"), idle_cpu_rates([servers[side][1] for side in ("on", "off")],
                                                  2.0)))
    # both sides at once: ON's step (its window open on the odd steps) sends its requests
    # together with OFF's, so each unselected replica has the same neighbours. The side sent
    # (and read) first changes every two steps, so consecutive odd steps take both orders:
    # requests sent first are answered first (the generate-time row), and neither side's CPU
    # reading should always be the earlier one
    for _ in range(together):
        done["on"] += 1
        step = done["on"]
        sides = ("on", "off") if (step // 2) % 2 == 0 else ("off", "on")
        before = {side: cpu_now(servers[side][1])[1] for side in sides}
        took = on_step(step, [h for side in sides for h in servers[side]])
        after = {side: cpu_now(servers[side][1])[1] for side in sides}
        split = len(servers[sides[0]])
        took_by = {sides[0]: took[:split], sides[1]: took[split:]}
        times["together"][step] = [*took_by["on"], *took_by["off"]]
        # each unselected replica's process CPU over the same span (begin_step to end_step)
        times["together_cpu"][step] = [after[side] - before[side] for side in ("on", "off")]
        times["together_first"][step] = sides[0]
    manifest = bridge.finish()
    return {"times": times, "bare": bare, "manifest": manifest.to_dict(), "idle_cpu": idle,
            "floor": _floor(bridge.plan, times, block, rounds * block, out)}


def _floor(plan: Any, times: Dict[str, Dict[int, Any]], block: int, last: int,
           out: str) -> Dict[str, float]:
    """nsys' own start floor under replica 0's nsys argv, in bare processes, while this run's
    cluster is up and idle (as P5 measures it), windows as long as this run's unprofiled
    steps and as far apart."""
    from benchmarks.p5_stall import capture_start_floor

    replica = plan.process("rollout_replicas", 0)
    body = [v for s, v in times["body"].items() if s % 2 == 0 and (s - 1) % block and s <= last]
    step_s = sorted(body)[len(body) // 2]
    floor = capture_start_floor([(replica.launch_argv, dict(replica.launch_env))],
                                os.path.join(out, "floor"), step_s=step_s)
    return {**floor, "step_s": step_s}


def main(argv: Sequence[str]) -> None:
    import ray

    out, rounds, block, requests = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    together = int(argv[4]) if len(argv) > 4 else 0
    ray.init(address="local", num_cpus=8, num_gpus=4, include_dashboard=False,
             logging_level="ERROR", log_to_driver=False)
    try:
        got = run(out, rounds, block, requests, together)
    finally:
        ray.shutdown()
    print(RESULT + json.dumps(got), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
