"""verlprof: profiling controller for Ray-based RL trainers.

The public surface, one import away (loaded on first use, so that ``import verlprof`` stays
cheap on workers and in ``verlprof report``)::

    from verlprof import load_config, build_plan, ProfileController, worker_options

Stages, one package each: :mod:`verlprof.config` → :mod:`verlprof.plan` →
:mod:`verlprof.runtime` (driver) and :mod:`verlprof.worker` (inside the actors), with
:mod:`verlprof.backends` (one folder per tool) → :mod:`verlprof.report`. See
docs/architecture.md.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

from verlprof.version import __version__

# a library logs; the application (our CLI, or the user's trainer) decides where it goes
logging.getLogger("verlprof").addHandler(logging.NullHandler())

_PUBLIC = {
    "load_config": "verlprof.config",
    "LoadedConfig": "verlprof.config",
    "ConfigError": "verlprof.errors",
    "ProfilingRuntimeError": "verlprof.errors",
    "build_plan": "verlprof.plan",
    "ProfilePlan": "verlprof.plan",
    "Topology": "verlprof.config.topology",
    "worker_options": "verlprof.runtime.ray_options",
    "controller_options": "verlprof.runtime.ray_options",
    "ProfileController": "verlprof.runtime.controller",
    "ProfilingWorkerMixin": "verlprof.worker",
    "annotate": "verlprof.worker",
    "summarize": "verlprof.report",
    "read_manifest": "verlprof.manifest",
}

__all__ = [
    "ConfigError", "LoadedConfig", "ProfileController", "ProfilePlan", "ProfilingRuntimeError",
    "ProfilingWorkerMixin", "Topology", "__version__", "annotate", "build_plan",
    "controller_options", "load_config", "read_manifest", "summarize", "worker_options",
]

if TYPE_CHECKING:
    from verlprof.config import LoadedConfig, load_config
    from verlprof.config.topology import Topology
    from verlprof.errors import ConfigError, ProfilingRuntimeError
    from verlprof.manifest import read_manifest
    from verlprof.plan import ProfilePlan, build_plan
    from verlprof.report import summarize
    from verlprof.runtime.controller import ProfileController
    from verlprof.runtime.ray_options import controller_options, worker_options
    from verlprof.worker.annotate import annotate
    from verlprof.worker.mixin import ProfilingWorkerMixin


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'verlprof' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(_PUBLIC))
