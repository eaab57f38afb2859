"""A stand-in for one profiled process of a verl-style run, for the report tests.

Run under real nsys (``-c nvtx -p VERLPROF_CAPTURE@verlprof``). All processes share a start
time ``--t0`` (epoch seconds) and follow one schedule on the wall clock, so that a controller
and its workers line up as in a real run without talking to each other:

* ``worker``: per step one capture window (``VERLPROF_CAPTURE``) holding the phases below;
  ``--straggle STEP`` makes ``actor/update_actor`` of that step much longer.
* ``controller``: one window over all steps, ``step/<n>`` ranges and ``controller/<phase>``
  ranges around the workers' phases.

Each process writes ``--out`` (JSON): its pid and the wall-clock ns at which it opened every
phase, to check that the summary places reports on the wall clock.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import nvtx

DOMAIN = "verlprof"
PERIOD_S = 2.5  # closing and reopening a capture window pauses the app ~1 s
# (role/phase, start offset s, duration s) inside a step
# long enough that a loaded 2-core machine's sleep jitter never looks like a straggler
PHASES = (("rollout/generate_sequences", 0.020, 0.200),
          ("actor/compute_log_prob", 0.240, 0.100),
          ("actor/update_actor", 0.360, 0.120))
STRAGGLE_S = 0.500
CONTROLLER = (("controller/generate_sequences", 0.010, 0.225),
              ("controller/compute_log_prob", 0.235, 0.120),
              ("controller/update_actor", 0.355, 1.000))
"""Wider than the workers' phases: opening a window pauses a worker for ~0.1 s."""


def sleep_until(t: float) -> None:
    while True:
        left = t - time.time()
        if left <= 0:
            return
        time.sleep(min(left, 0.05))


def worker(t0: float, steps: int, straggle: int, log: dict) -> None:
    for step in range(1, steps + 1):
        base = t0 + (step - 1) * PERIOD_S
        sleep_until(base + 0.005)
        window = nvtx.start_range("VERLPROF_CAPTURE", domain=DOMAIN)
        for name, offset, duration in PHASES:
            if name == "actor/update_actor" and step == straggle:
                duration = STRAGGLE_S
            sleep_until(base + offset)
            log.setdefault(name, []).append(time.time_ns())
            with nvtx.annotate(name, domain=DOMAIN):
                time.sleep(duration)
        nvtx.end_range(window)


def controller(t0: float, steps: int, log: dict) -> None:
    sleep_until(t0 - 0.3)  # opening a capture pauses the app for a while
    window = nvtx.start_range("VERLPROF_CAPTURE", domain=DOMAIN)
    for step in range(1, steps + 1):
        base = t0 + (step - 1) * PERIOD_S
        sleep_until(base)
        step_range = nvtx.start_range(f"step/{step}", domain=DOMAIN)
        for name, offset, duration in CONTROLLER:
            sleep_until(base + offset)
            log.setdefault(name, []).append(time.time_ns())
            with nvtx.annotate(name, domain=DOMAIN):
                time.sleep(duration)
        nvtx.end_range(step_range)
    nvtx.end_range(window)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=("worker", "controller"))
    parser.add_argument("--t0", type=float, required=True)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--straggle", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    log: dict = {}
    if args.kind == "worker":
        worker(args.t0, args.steps, args.straggle, log)
    else:
        controller(args.t0, args.steps, log)
    with open(args.out, "w") as handle:
        json.dump({"pid": os.getpid(), "starts": log}, handle)


if __name__ == "__main__":
    main()
