"""What verl's own rollout-engine profiling asks for, read from a verl config (set by the
loader only, so it lives outside :mod:`verlprof.config.schema`'s user-facing reference)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class EngineTorchConfig:
    """verl's own torch profiling of its rollout engines (verl 0.8+ layout, read from
    ``actor_rollout_ref.rollout.profiler``): what verl's vLLM / SGLang servers do in their
    ``start_profile`` / ``stop_profile`` when its ``tool_config.torch.discrete`` is true. Set by
    the loader only (no key of verlprof's own)."""

    trace_dir: str
    """verl's ``save_path`` for the rollout: each engine writes its traces into
    ``<trace_dir>/agent_loop_rollout_replica_<replica>/`` (``rollout_trace_dir``)."""
    key: str
    """The block it was read from (``actor_rollout_ref.rollout.profiler.tool_config.torch``)."""
    token_start: Optional[int] = None
    """``profile_token_start``: engine iterations (one generated token per running sequence)
    after ``start_profile`` before the engine records; None: from the first."""
    token_end: Optional[int] = None
    """``profile_token_end`` (exclusive, counted like ``token_start``); None: until
    ``stop_profile``."""
