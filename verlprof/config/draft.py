"""The working copy of a profiling config while it is read, with the key each value came from.

Each layout reader fills a :class:`Draft`; the NeMo RL environment then overwrites parts of it
(environment wins); the last checks and warnings read it; :func:`to_profiling` freezes it into a
:class:`~verlprof.config.schema.ProfilingConfig`. Keeping the source key next to each value is
what lets every later message name the exact key the user wrote (``global_profiler.steps``,
``critic.profiler.ranks``, ``NRL_NSYS_PROFILE_STEP_RANGE``) whatever the layout.

The values themselves live in a frozen ``ProfilingConfig`` (:attr:`Draft.config`), replaced
field by field as readers go: the draft declares no field or default of its own, so a new
schema field needs nothing here. Only what the schema cannot hold yet is kept apart: per-role
selections with their extra key, worker options not given (their default needs the topology),
the ``trainer.profiler.torch`` keys given (verl's torch ``contents`` fill the others), and the
provenance of values.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import dacite

from verlprof.config.schema import ROLES, ComponentConfig, ProfilingConfig
from verlprof.config.verl_release import VerlTraits
from verlprof.errors import ConfigError


@dataclass(frozen=True)
class RoleDraft(ComponentConfig):
    """One role's selection (the schema's :class:`ComponentConfig`) and the keys it came from."""

    all_ranks_key: str = ""
    """Full key the all-ranks flag was read from (the schema keeps only the ranks' key)."""
    given: bool = False
    """The role's ``profiler`` block is in the config (False: the role sets nothing)."""

    @property
    def selection_key(self) -> str:
        """The key that makes this role select ranks (for messages)."""
        return self.all_ranks_key if self.all_ranks and not self.ranks else self.ranks_key

    def component(self) -> Dict[str, Any]:
        """The schema's fields of this selection, as :func:`to_profiling` freezes them."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(ComponentConfig)}


@dataclass
class Draft:
    """The schema's values read so far, plus where they came from."""

    config: ProfilingConfig = field(default_factory=ProfilingConfig)
    """Every value read so far; a field no reader set keeps the schema's default. Its
    ``components``, ``nsys.worker_options`` and ``torch`` are filled from the fields below
    when the draft is frozen."""
    roles: Dict[str, RoleDraft] = field(default_factory=lambda: {r: RoleDraft() for r in ROLES})
    worker_options: Optional[Dict[str, Any]] = None
    """None: the user gave none, so the topology's defaults apply."""
    torch: Dict[str, Any] = field(default_factory=dict)
    """The ``trainer.profiler.torch`` keys given; the others come from verl's torch ``contents``
    (global_profiler layout), else the schema's defaults."""
    torch_contents: Optional[List[str]] = None
    """verl's torch ``contents`` items collected from the global_profiler layout (None: no
    ``contents`` key given, as in verl 0.6/0.7)."""
    torch_contents_seen: Dict[str, Tuple[str, ...]] = field(default_factory=dict)
    """Each enabled role's ``contents`` by key (they are merged: differences are reported)."""
    steps_key: str = ""
    """Key the steps were read from (every layout reader sets it)."""
    steps_given: bool = False
    """The steps key was present and not null (``[]`` counts as given)."""
    continuous_key: str = ""
    """Key the continuous flag was read from (every layout reader sets it)."""
    disabled_reason: str = ""
    """Why ``enabled`` is false, for the warning (``trainer.profiler.enabled is false``)."""
    worker_flags_key: str = ""
    controller_flags_key: str = ""
    verl: Optional[VerlTraits] = None
    """The verl release this config's keys belong to, with its semantics; None for the seed
    layout."""
    warnings: List[str] = field(default_factory=list)

    def set(self, **values: Any) -> None:
        """Replace fields of :attr:`config` (a name the schema lacks is a TypeError: a bug)."""
        self.config = dataclasses.replace(self.config, **values)

    def set_nsys(self, **values: Any) -> None:
        """Replace fields of ``config.nsys``."""
        self.set(nsys=dataclasses.replace(self.config.nsys, **values))

    def warn(self, message: str) -> None:
        """Record a one-line warning (deduplicated when the config is frozen)."""
        self.warnings.append(" ".join(message.split()))


def to_profiling(draft: Draft) -> ProfilingConfig:
    """Freeze the draft with dacite, which fills every field not given with the schema's default
    and checks each value against its field's type (strict: a wrong one is a bug caught here)."""
    data = dataclasses.asdict(draft.config)
    data["components"] = {role: r.component() for role, r in draft.roles.items()}
    data["nsys"]["worker_options"] = dict(draft.worker_options or {})
    data["torch"] = dict(draft.torch)
    if not draft.config.enabled:  # the key that turned profiling off, for `verlprof plan`
        data["disabled_reason"] = draft.disabled_reason or "profiling is disabled"
    try:
        return dacite.from_dict(ProfilingConfig, data,
                                config=dacite.Config(cast=[tuple], strict=True))
    except dacite.DaciteError as err:  # values were validated before: this names the field
        raise ConfigError("config", f"internal conversion error: {err}") from None
