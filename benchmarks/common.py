"""What every benchmark shares: a result row, interleaved A/B timing, medians, the machine.

Every metric is a ratio of two things measured side by side in the same run, interleaved
(A B A B ...), so that a slow moment of this noisy machine hits both sides alike. Nothing here
asserts on absolute times.
"""

from __future__ import annotations

import functools
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK_DIR = os.path.join(ROOT, "benchmarks", ".work")
"""Scratch space of the benchmarks (git-ignored): generated reports, step times."""
DEMO_CONFIG = os.path.join(ROOT, "trainer_configs", "ppo_trainer.yaml")
"""The demo's shipped config: every demo-based metric starts from it."""


VERDICTS = ("PASS", "MISS", "WITHIN NOISE", "INFO", "N/A", "FAIL")
"""The verdicts a row can carry (``FAIL`` with its reason in brackets)."""


@dataclass
class Result:
    """One row of the final table.

    A row is built by keyword: ``metric`` (what is compared), ``ratio`` (the headline figure,
    usually the ratio of the two sides' medians), ``goal`` (the ratio must be at most this;
    None: an INFO row) and ``samples``, the ratio once per round (or block) of the run, so that
    the row shows its own noise: the table prints ``min / median / max`` of the samples, and
    when the goal lies inside that spread the verdict is ``WITHIN NOISE`` rather than PASS or
    MISS (one more round could land either side). A row without samples (one round, or a
    figure that has no rounds) is judged on ``ratio`` alone.
    """

    metric: str
    ratio: Optional[float]
    """Measured ratio (None: could not be measured, see ``note``)."""
    goal: Optional[float]
    """The ratio must be at most this (None: no goal, the row is reported as INFO)."""
    goal_text: str = ""
    details: List[str] = field(default_factory=list)
    """Lines printed under the metric (the raw figures behind the ratio)."""
    note: str = ""
    failure: str = ""
    """Why the row could not be measured: a wait expired or a step failed (``FAIL (why)``)."""
    samples: List[float] = field(default_factory=list)
    """The ratio per round (or block), for the spread and the noise verdict."""
    not_run: str = ""
    """Left out of this run on purpose, and how to run it (``--large``): the verdict says so
    instead of ``N/A``."""

    @property
    def verdict(self) -> str:
        if self.failure:
            return f"FAIL ({self.failure})"
        if self.not_run:
            return f"NOT RUN ({self.not_run})"
        if self.ratio is None:
            return "N/A"
        if self.goal is None:
            return "INFO"
        return judge(self.ratio, self.goal, self.samples)

    @property
    def holds(self) -> Optional[float]:
        """The chance that another run like this one gives the same verdict, from this run's
        own noise: None for a row that has no goal or fewer than two samples."""
        if self.ratio is None or self.goal is None or len(self.samples) < 2 or \
                self.failure or self.not_run:
            return None
        return verdict_holds(self.ratio, self.goal, tuple(self.samples))

    @property
    def holds_text(self) -> str:
        holds = self.holds
        return "-" if holds is None else f"{holds:.0%}"

    @property
    def spread_text(self) -> str:
        """``min / median / max (n)`` of the samples; ``-`` without them."""
        if not self.samples:
            return "-"
        return (f"{min(self.samples):.3f} / {median(self.samples):.3f} / "
                f"{max(self.samples):.3f} (n={len(self.samples)})")

    @property
    def ratio_text(self) -> str:
        if self.ratio is None:
            return "-" if self.not_run else "n/a"
        return f"{self.ratio:.3f}x"

    def line(self) -> str:
        ratio = self.ratio_text
        goal = self.goal_text or ("none" if self.goal is None else f"<= {self.goal:g}x")
        spread_part = f"  spread {self.spread_text}" if self.samples else ""
        if self.holds is not None:
            spread_part += f", verdict holds {self.holds_text}"
        tail = f"  ({self.note})" if self.note else ""
        return f"{self.metric}: {ratio}{spread_part}  goal {goal}  {self.verdict}{tail}"


def judge(ratio: float, goal: float, samples: Sequence[float]) -> str:
    """PASS, MISS or WITHIN NOISE: the goal inside the samples' spread (two or more) is noise;
    otherwise the headline ``ratio`` against the goal."""
    if len(samples) >= 2 and min(samples) <= goal < max(samples):
        return "WITHIN NOISE"
    return "PASS" if ratio <= goal else "MISS"


HOLDS_DRAWS = 2000
HOLDS_FIRM = 0.9
"""A verdict that holds in fewer runs than this is named in the closing line."""


@functools.cache  # a row's line, the table and the summary each ask
def verdict_holds(ratio: float, goal: float, samples: Tuple[float, ...],
                  draws: int = HOLDS_DRAWS) -> float:
    """The share of simulated runs like this one that :func:`judge` the same.

    Each simulated run draws as many samples from a normal law whose spread and centre are
    themselves drawn from what this run's samples say of them: the standard deviation from
    its scaled inverse chi-square law (n - 1 degrees of freedom), the centre around this
    run's median with that deviation's error of a median (``sqrt(pi / 2n)``); the headline
    moves with the drawn median (its offset from the samples' median kept).

    Taking this run's median and deviation as the truth instead (what this did until the
    tenth pair of runs) was overconfident: three to five rounds often fall close together by
    chance, and the next run's centre is not this run's. Over four pairs of runs it predicted
    3-7 rows changing verdict where 7-10 did; drawn as here, 6-9 (docs/performance.md).
    Resampling the samples themselves would never draw past their min or max and would call
    a PASS whose rounds all lie just under the goal safe. Seeded: the same samples give the
    same figure."""
    n = len(samples)
    center, scale = median(samples), statistics.stdev(samples)
    verdict, offset = judge(ratio, goal, samples), ratio - center
    rng = random.Random(0)
    same = 0
    for _ in range(draws):
        chi2 = rng.gammavariate((n - 1) / 2, 2.0)  # chi-square, n - 1 degrees of freedom
        sigma = scale * math.sqrt((n - 1) / chi2) if chi2 > 0 else scale
        mid = rng.gauss(center, sigma * math.sqrt(math.pi / (2 * n)))
        drawn = [rng.gauss(mid, sigma) for _ in samples]
        same += judge(median(drawn) + offset, goal, drawn) == verdict
    return same / draws


def same_everywhere(holds: Sequence[float]) -> float:
    """The chance that another run gives every row the verdict this one gave (rows taken as
    independent: each is measured on its own processes and rounds)."""
    return math.prod(holds)


def ratios(top: Sequence[float], bottom: Sequence[float]) -> List[float]:
    """Round by round ``top[i] / bottom[i]`` (the samples of a row whose two sides were
    measured once per round, interleaved)."""
    return [a / b for a, b in zip(top, bottom) if b]


def chunks(values: Sequence[float], size: int) -> List[List[float]]:
    """``values`` cut into consecutive blocks of ``size`` (the last one may be shorter): many
    short interleaved rounds become a few samples of a row."""
    return [list(values[i:i + size]) for i in range(0, len(values), max(1, size))]


def paired_ratios(on: Sequence[float], off: Sequence[float], chunk: int
                  ) -> Tuple[float, List[float]]:
    """Measurements taken two by two at the same moments (``on[i]`` beside ``off[i]``): the
    median of the pairs' ratios, and one such median per ``chunk`` pairs (the samples). What
    moves from one moment to the next, the core's speed, cancels inside each pair."""
    ratios = [a / b for a, b in zip(on, off)]
    return median(ratios), [median(part) for part in chunks(ratios, chunk)]


def block_ratios(top: Sequence[Sequence[float]], bottom: Sequence[Sequence[float]]
                 ) -> List[float]:
    """Per block (or round) of several measurements a side: the ratio of the two medians."""
    return [median(a) / median(b) for a, b in zip(top, bottom) if a and b and median(b)]


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def process_cpu_s(_actor: Any) -> float:
    """Run in an actor's process (``actor.__ray_call__``): the CPU seconds that process has
    used so far, every thread of it (Ray's, the engine's, verlprof's if it had any there)."""
    return time.process_time()


def idle_cpu_rates(actors: Sequence[Any], seconds: float = 3.0) -> List[float]:
    """Share of a core each actor's process uses while nobody calls it (Ray's own threads:
    heartbeats, metrics, polling), over the same ``seconds`` for all (two calls each, the
    reading's own cost: well under 0.1% of the span)."""
    import ray

    def now() -> List[float]:
        return ray.get([a.__ray_call__.remote(process_cpu_s) for a in actors], timeout=60)

    before, t0 = now(), time.perf_counter()
    time.sleep(seconds)
    after, t1 = now(), time.perf_counter()
    return [(a - b) / (t1 - t0) for a, b in zip(after, before)]


def peak_rss_kib() -> int:
    """This process's peak RSS (``VmHWM``). Not ``ru_maxrss``: Linux keeps it across exec, so
    a child started by a large benchmark process would report its parent's peak."""
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith("VmHWM:"))


def interleave(sides: Dict[str, Callable[[], float]], rounds: int) -> Dict[str, List[float]]:
    """Run each side once per round, in the same order every round (A B A B ...); each call
    returns one measurement. Returns every measurement per side."""
    out: Dict[str, List[float]] = {name: [] for name in sides}
    for _ in range(rounds):
        for name, measure in sides.items():
            out[name].append(measure())
    return out


def ns() -> int:
    return time.perf_counter_ns()


def ms(value_ns: float) -> str:
    return f"{value_ns / 1e6:.2f} ms"


def spread(values: Sequence[float]) -> str:
    """``median [min..max] (n)`` of nanosecond values, in ms."""
    return (f"median {ms(median(values))} [{ms(min(values))} .. {ms(max(values))}] "
            f"n={len(values)}")


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def ram_gib() -> str:
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    return f"{int(line.split()[1]) / 1024 ** 2:.1f} GiB"
    except OSError:
        pass
    return "unknown"


def os_name() -> str:
    try:
        with open("/etc/os-release") as handle:
            for line in handle:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return platform.platform()


def machine() -> Dict[str, str]:
    """The machine and versions the figures were measured with."""
    info = {"nproc": str(os.cpu_count()), "cpu": cpu_model(), "ram": ram_gib(),
            "os": f"{os_name()} ({platform.release()})",
            "python": platform.python_version()}
    for module in ("torch", "ray"):
        try:
            info[module] = __import__(module).__version__
        except Exception as err:  # noqa: BLE001 - a version line must never stop the run
            info[module] = f"unavailable ({type(err).__name__})"
    from verlprof.backends.nsys.cli import find_nsys, nsys_version

    exe = find_nsys()
    info["nsys"] = (nsys_version(exe) or "does not run") if exe else "not installed"
    return info


def run_quiet(argv: Sequence[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout, check=False, **kwargs)


def python() -> str:
    return sys.executable


def run_standalone(run: Callable[[], Union[Result, Sequence[Result]]]) -> None:
    """``python -m benchmarks.<metric>``: one metric's rows on its own Ray cluster, printed."""
    import ray

    ray.init(include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    try:
        got = run()
    finally:
        ray.shutdown()
    for res in [got] if isinstance(got, Result) else got:
        print(res.line(), *res.details, sep="\n  ")
