"""The rocprof-sys launch prefix and environment the plan records for each wrapped process."""

from __future__ import annotations

from typing import Dict, Tuple

from verlprof import paths
from verlprof.config.options import render_options
from verlprof.config.schema import RocprofSysConfig
from verlprof.errors import ConfigError


def rocprof_argv(cfg: RocprofSysConfig, key: str) -> Tuple[str, ...]:
    """``rocprof-sys-python <args> --`` (the interpreter follows)."""
    return (cfg.executable, *render_options(cfg.args, (), key), "--")


def rocprof_env(cfg: RocprofSysConfig, output_dir: str, group: str, rank: int) -> Dict[str, str]:
    """ROCPROFSYS_* output settings derived from the plan; the user's ``env`` wins."""
    if "$" in output_dir:  # rocprof-sys reads it from runtime_env env_vars, where Ray expands $X
        raise ConfigError("trainer.profiler.output_dir",
                          f"{output_dir!r} contains '$', which Ray would expand in the "
                          "workers' environment (rocprof-sys reads its output path there)")
    env = {"ROCPROFSYS_OUTPUT_PATH": paths.raw_dir(output_dir, group, rank),
           "ROCPROFSYS_OUTPUT_PREFIX": f"{paths.sanitize(group)}_rank{rank}_",
           "ROCPROFSYS_USE_PID": "true"}
    env.update({str(k): str(v) for k, v in cfg.env.items()})
    return env
