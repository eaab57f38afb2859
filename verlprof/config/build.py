"""From a trainer config (a plain dict) and the environment to a :class:`LoadedConfig`.

The pipeline, one stage per module: plain dict (:func:`to_plain`) → layout read into a draft
(:mod:`.layouts`) → topology (verl's resource pools for verl's layouts, :mod:`.verl_pools`;
:meth:`Topology.from_trainer_config` for the seed layout) → default
worker options → NeMo RL environment, which wins (:mod:`.nemo_env`) → option and cross-key
checks (:mod:`.validate`) → frozen :class:`ProfilingConfig` (:mod:`.draft`, dacite).

Only :class:`~verlprof.errors.ConfigError` leaves this module for bad input, whatever the input
(a hypothesis test feeds it random trees): every reader tests a value's type before using it.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from verlprof.config import guard, layouts, nemo_env, profiler_block, size_budget, verl_pools
from verlprof.config import validate as v
from verlprof.config.draft import to_profiling
from verlprof.config.schema import OptionValue, ProfilingConfig
from verlprof.config.topology import Topology
from verlprof.errors import ConfigError
from verlprof.safe_text import one_line

logger = logging.getLogger("verlprof")

DEFAULT_CUDA_WORKER_OPTIONS: Dict[str, OptionValue] = {
    "trace": "cuda,nvtx,cublas", "cuda-memory-usage": "true", "cuda-graph-trace": "node"}
"""Worker nsys options when the config gives none and the workers have CUDA."""

DEFAULT_CPU_WORKER_OPTIONS: Dict[str, OptionValue] = {"trace": "nvtx,osrt"}
"""Worker nsys options when the config gives none and the workers have no CUDA."""

MAX_DEPTH = 64
"""Deeper nesting is refused (a trainer config is a few levels deep; this stops cycles)."""


@dataclass(frozen=True)
class LoadedConfig:
    """A loaded trainer config: the profiling settings, the topology, and what to warn about."""

    profiling: ProfilingConfig
    """The normalised profiling settings, whichever layout or environment they came from."""

    topology: Topology
    """Worker groups and sizes derived from the trainer config."""

    warnings: Tuple[str, ...]
    """One-line messages, each naming the key concerned (also logged to ``verlprof``)."""

    raw: Dict[str, Any]
    """The merged trainer config as a plain, resolved dict."""


def config_from_dict(cfg: Mapping[str, Any], env: Optional[Mapping[str, str]] = None
                     ) -> LoadedConfig:
    """Read profiling settings from a trainer config (a dict or an OmegaConf DictConfig).

    ``env`` holds NeMo RL's ``NRL_*`` variables (None: ``os.environ``); they win over the config.
    Raises :class:`ConfigError` naming the full key of the first bad setting.
    """
    try:
        return _build(to_plain(cfg), os.environ if env is None else env)
    except ConfigError as err:
        if "\n" not in str(err):
            raise
        # A message must stay one line even if it quotes something multi-line.
        raise ConfigError(one_line(err.key), one_line(err.message)) from None


def to_plain(cfg: Any) -> Dict[str, Any]:
    """``cfg`` as plain nested dicts and lists, interpolations resolved."""
    if isinstance(cfg, DictConfig):
        try:
            cfg = OmegaConf.to_container(cfg, resolve=True)
        except OmegaConfBaseException as err:
            # OmegaConf appends "full_key: ..." lines; the first line is the message
            message = next((ln for ln in str(err).splitlines() if ln.strip()), "cannot resolve")
            raise ConfigError(getattr(err, "full_key", None) or "config",
                              one_line(message)) from None
    elif isinstance(cfg, ListConfig) or not isinstance(cfg, Mapping):
        raise ConfigError("config", f"must be a mapping of sections, got {type(cfg).__name__}")
    # _copy expands shared references: measure first (memoised), so a bomb is never expanded
    guard.check_tree(cfg, "config", MAX_DEPTH)
    return _copy(cfg, 0)


def _build(raw: Dict[str, Any], env: Mapping[str, str]) -> LoadedConfig:
    draft = layouts.read(raw)
    # verl's layouts run as verl runs them: one fused process per GPU of each resource pool
    topology = (verl_pools.topology(raw, draft.verl, draft.warn) if draft.verl is not None
                else Topology.from_trainer_config(raw))
    if draft.worker_options is None:
        draft.worker_options = dict(DEFAULT_CUDA_WORKER_OPTIONS if topology.cuda
                                    else DEFAULT_CPU_WORKER_OPTIONS)
    nemo_env.apply(draft, env, topology)
    profiler_block.check_options(draft)
    v.check_draft(draft)
    _warn_steps_beyond_the_run(draft, raw)
    profiling = size_budget.resolve(to_profiling(draft))  # auto: the free space, now
    warnings = tuple(dict.fromkeys(draft.warnings))  # each message once, first order kept
    for message in warnings:
        logger.warning(message)
    return LoadedConfig(profiling=profiling, topology=topology, warnings=warnings, raw=raw)


def _warn_steps_beyond_the_run(draft: Any, raw: Mapping[str, Any]) -> None:
    """A step after the last training step is never reached: say so instead of nothing."""
    trainer = raw.get("trainer")
    total = trainer.get("total_training_steps") if isinstance(trainer, Mapping) else None
    if total is None:  # verl's default: the steps follow from the epochs and the data
        return
    if not isinstance(total, int) or isinstance(total, bool) or total < 1:
        raise ConfigError("trainer.total_training_steps",
                          f"a positive integer or null expected, not {total!r}")
    beyond = [s for s in draft.config.steps if s > total]
    if beyond:
        draft.warnings.append(f"{draft.steps_key}: step(s) {beyond} come after "
                              f"trainer.total_training_steps ({total}) and will never be "
                              "captured")


def _copy(value: Any, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise ConfigError("config", f"nested more than {MAX_DEPTH} levels deep")
    if isinstance(value, Mapping):
        return {k: _copy(item, depth + 1) for k, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_copy(item, depth + 1) for item in value]
    return value

