"""The mutable working copy of a profiling config, with the key each value came from.

Each layout reader fills a :class:`Draft`; the NeMo RL environment then overwrites parts of it
(environment wins); the last checks and warnings read it; :func:`to_profiling` freezes it into a
:class:`~verlprof.config.schema.ProfilingConfig`. Keeping the source key next to each value is
what lets every later message name the exact key the user wrote (``global_profiler.steps``,
``critic.profiler.ranks``, ``NRL_NSYS_PROFILE_STEP_RANGE``) whatever the layout.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import dacite

from verlprof.config.schema import (
    DEFAULT_FILENAME_TEMPLATE,
    ROLES,
    ProfilingConfig,
)
from verlprof.errors import ConfigError


@dataclass
class RoleDraft:
    """One role's selection and the keys it was read from."""

    ranks: Tuple[int, ...] = ()
    all_ranks: bool = False
    discrete: bool = False
    ranks_key: str = ""
    all_ranks_key: str = ""
    discrete_key: str = ""

    @property
    def selects_any(self) -> bool:
        return self.all_ranks or bool(self.ranks)

    @property
    def selection_key(self) -> str:
        """The key that makes this role select ranks (for messages)."""
        return self.all_ranks_key if self.all_ranks and not self.ranks else self.ranks_key


@dataclass
class Draft:
    """Every ProfilingConfig field, plus where it came from."""

    source: str = "seed"
    steps: Tuple[int, ...] = ()
    steps_key: str = "trainer.profile_steps"
    steps_given: bool = False
    """The steps key was present and not null (``[]`` counts as given)."""
    continuous: bool = False
    continuous_key: str = "trainer.profile_continuous_steps"
    tool: str = "nsys"
    tool_key: str = "trainer.profiler.tool"
    enabled: bool = True
    enabled_key: str = "trainer.profiler.enabled"
    disabled_reason: str = ""
    """Why ``enabled`` is false, for the warning (``trainer.profiler.enabled is false``)."""
    output_dir: str = ""
    filename_template: str = DEFAULT_FILENAME_TEMPLATE
    roles: Dict[str, RoleDraft] = field(default_factory=lambda: {r: RoleDraft() for r in ROLES})
    phases: Dict[str, Tuple[str, ...]] = field(default_factory=dict)
    worker_options: Optional[Dict[str, Any]] = None
    """None: the user gave none, so the topology's defaults apply."""
    worker_options_key: str = "trainer.worker_nsight_options"
    worker_flags: Tuple[str, ...] = ()
    worker_flags_key: str = "trainer.profiler.nsys.worker_flags"
    controller_options: Dict[str, Any] = field(default_factory=dict)
    controller_options_key: str = "trainer.controller_nsight_options"
    controller_flags: Tuple[str, ...] = ()
    controller_flags_key: str = "trainer.profiler.nsys.controller_flags"
    trigger: str = "auto"
    nsys_executable: str = "nsys"
    torch: Dict[str, Any] = field(default_factory=dict)
    torch_contents: List[str] = field(default_factory=list)
    """verl's torch ``contents`` items collected from the global_profiler layout."""
    rocprof_sys: Dict[str, Any] = field(default_factory=dict)
    rpc_timeout_s: float = 120.0
    finalize_timeout_s: float = 300.0
    on_rank_failure: str = "continue"
    warnings: List[str] = field(default_factory=list)

    def warn(self, message: str) -> None:
        """Record a one-line warning (deduplicated when the config is frozen)."""
        self.warnings.append(" ".join(message.split()))


def to_profiling(draft: Draft) -> ProfilingConfig:
    """Freeze the draft with dacite (strict: a field the schema lacks is a bug caught here)."""
    data = {
        "steps": draft.steps,
        "continuous_steps": draft.continuous,
        "tool": draft.tool,
        "enabled": draft.enabled,
        "output_dir": draft.output_dir,
        "filename_template": draft.filename_template,
        "components": {
            role: {"ranks": r.ranks, "all_ranks": r.all_ranks, "discrete": r.discrete,
                   "ranks_key": r.ranks_key, "discrete_key": r.discrete_key}
            for role, r in draft.roles.items()
        },
        "phases": dict(draft.phases),
        "nsys": {
            "worker_options": dict(draft.worker_options or {}),
            "worker_flags": draft.worker_flags,
            "controller_options": dict(draft.controller_options),
            "controller_flags": draft.controller_flags,
            "trigger": draft.trigger,
            "executable": draft.nsys_executable,
            "worker_options_key": draft.worker_options_key,
            "controller_options_key": draft.controller_options_key,
        },
        "torch": dict(draft.torch),
        "rocprof_sys": dict(draft.rocprof_sys),
        "rpc_timeout_s": draft.rpc_timeout_s,
        "finalize_timeout_s": draft.finalize_timeout_s,
        "on_rank_failure": draft.on_rank_failure,
        "source": draft.source,
    }
    try:
        return dacite.from_dict(ProfilingConfig, data,
                                config=dacite.Config(cast=[tuple], strict=True))
    except dacite.DaciteError as err:  # values were validated before: this names the field
        raise ConfigError("config", f"internal conversion error: {err}") from None
