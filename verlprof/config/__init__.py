"""The config layer: trainer YAML + dotlist overrides + NeMo RL environment → ProfilingConfig.

::

    from verlprof.config import load_config
    loaded = load_config("trainer_configs/ppo_trainer.yaml", ["trainer.profile_steps=[2,3]"])
    loaded.profiling   # ProfilingConfig (frozen), whichever layout the YAML used
    loaded.topology    # worker groups and their sizes
    loaded.warnings    # one-line messages, each naming a key (also logged to "verlprof")

Bad input raises :class:`verlprof.errors.ConfigError` (a ValueError) whose text starts with
the full key: ``actor_rollout_ref.actor.profile_ranks[1]: rank 0 listed twice``.
Which source wins when several are set: see ``docs/config_sources.md``.
"""

from typing import Any

from verlprof.config.schema import (
    ComponentConfig,
    ComponentsConfig,
    NsysConfig,
    ProfilingConfig,
    RocprofSysConfig,
    TorchProfilerConfig,
)
from verlprof.errors import ConfigError

__all__ = [
    "ComponentConfig",
    "ComponentsConfig",
    "ConfigError",
    "LoadedConfig",
    "NsysConfig",
    "ProfilingConfig",
    "RocprofSysConfig",
    "TorchProfilerConfig",
    "config_from_dict",
    "load_config",
]

_LAZY = {"LoadedConfig": "verlprof.config.build", "config_from_dict": "verlprof.config.build",
         "load_config": "verlprof.config.loader"}
"""Imported on first use: they pull in OmegaConf and YAML (about 0.2 s), which the plan, the
workers and ``verlprof report`` only need the schema from."""


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'verlprof.config' has no attribute {name!r}")
