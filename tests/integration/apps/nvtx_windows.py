"""Test app: opens capture windows through verlprof.backends.nsys.nvtx, distinct ranges in each.

Run it under ``nsys profile -c nvtx -p VERLPROF_CAPTURE@verlprof --capture-range-end=repeat:N``.
Window ``w`` (1-based) holds the ranges ``WINDOW_RANGES[w-1]`` (start/end ranges, one of them
ended on another thread), a push/pop ``<group>/push`` and a mark ``<group>/mark`` (verlprof emits
neither: they come from the ``nvtx`` package, as a user's own code would). Ranges named
``outside/...`` are emitted between windows and must appear in no report. Writes a JSON file
(``--out``) with the pid, the emitter backend and the wall clock (``time.time_ns()``) of each
window's mark, so a test can check the report's time base.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time

import nvtx

from verlprof.backends.nsys import nvtx as vnvtx
from verlprof.backends.nsys.nvtx_base import NVTX_DOMAIN

WINDOW_RANGES = [
    ("actor/compute_log_prob", "actor/update_actor"),
    ("critic/compute_values", "critic/update_critic"),
    ("rollout/generate_sequences", "ref/compute_ref_log_prob"),
]


def window_names(w: int) -> set:
    """Every range/mark text expected in window ``w`` (1-based), the capture range excluded."""
    first, second = WINDOW_RANGES[(w - 1) % len(WINDOW_RANGES)]
    group = first.split("/")[0]
    return {first, second, f"{group}/push", f"{group}/mark"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--windows", type=int, default=3)
    ap.add_argument("--close-from-thread", type=int, action="append", default=[],
                    help="1-based window closed from a second thread (repeatable)")
    ap.add_argument("--linger", type=float, default=0.0, help="seconds to live after the last")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    em = vnvtx.get_emitter()
    info = {"pid": os.getpid(), "backend": em.backend, "enabled": em.enabled, "marks": {}}
    for w in range(1, args.windows + 1):
        first, second = WINDOW_RANGES[(w - 1) % len(WINDOW_RANGES)]
        group = first.split("/")[0]
        h = em.range_start(f"outside/before_{w}")
        em.range_end(h)
        cap = vnvtx.capture_open()
        h1 = em.range_start(first)
        time.sleep(0.01)
        em.range_end(h1)
        h2 = em.range_start(second)
        ender = threading.Thread(target=em.range_end, args=(h2,))
        nvtx.push_range(f"{group}/push", domain=NVTX_DOMAIN)
        nvtx.mark(f"{group}/mark", domain=NVTX_DOMAIN)
        info["marks"][str(w)] = time.time_ns()
        nvtx.pop_range(domain=NVTX_DOMAIN)
        ender.start()
        ender.join()
        if w in args.close_from_thread:
            closer = threading.Thread(target=vnvtx.capture_close, args=(cap,))
            closer.start()
            closer.join()
        else:
            vnvtx.capture_close(cap)
    nvtx.mark("outside/after_all", domain=NVTX_DOMAIN)
    with open(args.out, "w") as fh:
        json.dump(info, fh)
    time.sleep(args.linger)


if __name__ == "__main__":
    main()
