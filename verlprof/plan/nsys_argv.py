"""The exact nsys command line the plan records for each wrapped process.

Pure functions from (config, topology, window count, output path) to argv lists. What the user
may set is rendered by :mod:`verlprof.config.options`; what the plan owns (capture range, the exact
``repeat:N``, the output path, overwrite) is always set here, and a user value for it is
dropped with a warning that names the key.
"""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Tuple

from verlprof.config.options import canonical_key, pop_option, render_options
from verlprof.config.schema import NsysConfig
from verlprof.errors import ConfigError
from verlprof.plan_model import OPEN_ENDED
from verlprof.records import CAPTURE_RANGE, NVTX_DOMAIN, Trigger

PLAN_OWNED = ("output", "capture-range-end", "force-overwrite", "nvtx-capture")
"""nsys options verlprof always sets itself, whatever the user wrote."""

CPU_SAFE_DEFAULTS = {"sample": "none", "cpuctxsw": "none"}
"""Without a GPU, sampling and context-switch tracing hang nsys about one run in three."""

_CAPTURE_RANGE_TRIGGERS: Dict[str, Trigger] = {"cudaprofilerapi": "cuda", "nvtx": "nvtx"}


def resolve_trigger(nsys: NsysConfig, options_key: str, cuda: bool) -> Tuple[Trigger, str]:
    """The trigger (``cuda`` or ``nvtx``) for workers, and the key that decided it.

    An explicit ``trigger`` wins, then the user's ``capture-range`` option, then the device.
    ``cuda`` without CUDA would record nothing and exit 0, so it is an error.
    """
    key, value = pop_option(dict(nsys.worker_options), "capture-range")
    trigger: Optional[Trigger]
    if nsys.trigger != "auto":
        trigger, source = nsys.trigger, "trainer.profiler.nsys.trigger"
    elif value is not None:
        source = f"{options_key}.{key}"
        trigger = _CAPTURE_RANGE_TRIGGERS.get(str(value).lower())
        if trigger is None:
            raise ConfigError(source, f"verlprof opens windows per step; use cudaProfilerApi or "
                                      f"nvtx, not {value!r}")
    else:
        trigger, source = ("cuda" if cuda else "nvtx"), "trainer.device"
    assert trigger is not None
    if trigger == "cuda" and not cuda:
        raise ConfigError(source, "the cuda trigger records nothing without CUDA (trainer.device "
                                  "is not cuda); use trigger nvtx")
    return trigger, source


def nsys_argv(nsys: NsysConfig, *, options: Mapping[str, object], flags: Tuple[str, ...],
              options_key: str, trigger: str, windows: int, output: str, cpu_only: bool,
              warnings: List[str]) -> Tuple[str, ...]:
    """``nsys profile ...`` up to (not including) the profiled program."""
    opts = dict(options)
    for owned in PLAN_OWNED + ("capture-range",):
        key, value = pop_option(opts, owned)
        if key is not None and value is not None and owned in PLAN_OWNED:
            warnings.append(f"{options_key}.{key}: ignored; verlprof sets --{owned} from the plan")
    if cpu_only:
        present = {canonical_key(k) for k in opts} | {f.lstrip("-") for f in flags}
        opts.update({k: v for k, v in CPU_SAFE_DEFAULTS.items() if k not in present})
    argv = [nsys.executable, "profile", *render_options(opts, flags, options_key)]
    if trigger == "nvtx":
        argv += ["--capture-range=nvtx", f"--nvtx-capture={CAPTURE_RANGE}@{NVTX_DOMAIN}"]
    else:
        argv += ["--capture-range=cudaProfilerApi"]
    # 0 windows: an armed rank (on demand), open-ended; nsys writes its reports when asked
    # (NsysCapture.collect) or at exit
    argv += [f"--capture-range-end=repeat:{windows}" if windows else OPEN_ENDED,
             "--force-overwrite=true",
             f"--output={output}"]
    return tuple(argv)


def check_trace_has_nvtx(options: Mapping[str, object], options_key: str) -> None:
    """The nvtx trigger and the phase ranges need ``nvtx`` among the traced APIs."""
    key, value = pop_option(dict(options), "trace")
    if value is not None and "nvtx" not in str(value).split(","):
        raise ConfigError(f"{options_key}.{key}", f"must include nvtx (got {value!r}); without it "
                                                   "no capture window opens and no phase is named")
