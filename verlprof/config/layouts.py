"""Recognise which config layout a trainer config uses and read it into a :class:`Draft`.

Three layouts describe the same ideas (which steps, which ranks of which role, discrete or not):

``seed`` (primary, documented)
    ``trainer.profile_steps``, ``trainer.profile_continuous_steps``, ``trainer.profiler``,
    ``trainer.controller_nsight_options`` / ``worker_nsight_options``, and per role
    ``profile_ranks``, ``profile_ranks_all``, ``profile_discrete``.
``verl_profiler`` (verl 2025-06/07)
    the same ``trainer`` keys, but per role a block ``profiler: {discrete, all_ranks, ranks}``.
``verl_global_profiler`` (verl 2025-08+)
    ``global_profiler: {tool, steps, ...}`` and per role ``profiler: {enable, ranks, ...}``;
    read by :mod:`verlprof.config.global_profiler`.

Detection: ``global_profiler`` present → the last; else any role ``profiler`` block holding
``ranks``/``all_ranks``/``discrete`` → ``verl_profiler``; else ``seed``. The first two share the
trainer keys, so they share one reader; a role may not mix the seed's ``profile_*`` keys with a
``profiler`` block (one of them would be silently ignored, a complaint verl users have).

Role sections and their aliases (first one that sets profile keys is read; the others are
reported in a warning): ``critic`` ← ``actor_rollout_ref.critic``; ``reward_model`` ← ``rm``,
``actor_rollout_ref.rm``.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

from verlprof.config import (
    global_profiler,
    profiler_block,
    topology,
    verl_keys,
    verl_pools,
    verl_release,
    verl_roles,
)
from verlprof.config import validate as v
from verlprof.config.draft import Draft, RoleDraft
from verlprof.config.schema import ROLES, ComponentConfig, ProfilingConfig
from verlprof.errors import ConfigError

SEED = "seed"
VERL_PROFILER = "verl_profiler"
VERL_GLOBAL_PROFILER = "verl_global_profiler"

SEED_ROLE_FIELDS: Dict[str, str] = {"profile_ranks": "ranks", "profile_ranks_all": "all_ranks",
                                    "profile_discrete": "discrete"}
"""The seed layout's per-role keys → the field of
:class:`~verlprof.config.schema.ComponentConfig` each sets."""

SEED_ROLE_KEYS: Tuple[str, ...] = tuple(SEED_ROLE_FIELDS)
"""The seed layout's per-role keys."""

PROFILER_KEYS: Tuple[str, ...] = ("_target_", "discrete", "all_ranks", "ranks")
"""Keys of a per-role ``profiler`` block in verl's 2025-06/07 layout."""

TRAINER_FIELDS: Dict[str, str] = {
    "profile_steps": "steps",
    "profile_continuous_steps": "continuous_steps",
    "profiler": "",  # not one field: verlprof's own block (profiler_block), in every layout
    "controller_nsight_options": "nsys.controller_options",
    "worker_nsight_options": "nsys.worker_options",
}
"""Profiling keys of ``trainer`` (the seed and 2025-06/07 layouts) → the schema field each sets
(a path in :class:`ProfilingConfig`)."""

TRAINER_PROFILE_KEYS: Tuple[str, ...] = tuple(TRAINER_FIELDS)
"""Profiling keys of ``trainer`` (the seed and 2025-06/07 layouts)."""

ROLE_SECTIONS: Dict[str, Tuple[str, ...]] = {
    "actor": ("actor_rollout_ref.actor",),
    "rollout": ("actor_rollout_ref.rollout",),
    "ref": ("actor_rollout_ref.ref",),
    "critic": ("critic", "actor_rollout_ref.critic"),
    "rm": ("reward_model", "rm", "actor_rollout_ref.rm"),
}
"""Where each role's settings may live, main section first, then its aliases."""

_V3_ONLY = "needs a global_profiler section (verl 2025-08+ layout); without one this block " \
           "is verl's 2025-06/07 profiler: {discrete, all_ranks, ranks}"


@dataclass(frozen=True)
class Section:
    """One existing role section: its full key and its contents."""

    key: str
    block: Mapping[Any, Any]

    def has_seed_keys(self) -> bool:
        return any(k in self.block for k in SEED_ROLE_KEYS)

    def has_profiler(self) -> bool:
        return self.block.get("profiler") is not None

    def seed_keys(self) -> List[str]:
        return [f"{self.key}.{k}" for k in SEED_ROLE_KEYS if k in self.block]


def read(raw: Mapping[Any, Any]) -> Draft:
    """Read ``raw`` (a plain dict) in whichever layout it uses; no environment applied yet."""
    _check_top_level(raw)
    trainer = v.mapping(raw.get("trainer"), "trainer")
    _check_trainer_keys(trainer)
    sections = role_sections(raw)
    draft = Draft(config=ProfilingConfig(source=detect(raw, sections)))
    if draft.config.source != SEED:
        draft.verl = verl_release.detect(raw, draft.config.source)
        draft.set(verl_release=draft.verl.release)
    tool, output_dir = profiler_block.read(trainer.get("profiler"), draft)
    if draft.config.source == VERL_GLOBAL_PROFILER:
        _read_global_layout(raw, trainer, sections, draft, tool, output_dir)
    else:
        _read_trainer(trainer, draft)
        draft.set(output_dir=output_path(output_dir, trainer))
        single = _single_block(raw, sections)
        for role in ROLES:
            draft.roles[role] = (single if single is not None and role in HYBRID_ROLES
                                 else _read_role(role, sections[role], draft))
    if draft.verl is not None:
        verl_roles.apply(draft, draft.verl)
    return draft


HYBRID_ROLES: Tuple[str, ...] = ("actor", "rollout", "ref")
"""The roles verl 0.5.0's one ``actor_rollout_ref.profiler`` block selects."""


def _single_block(raw: Mapping[Any, Any], sections: Dict[str, List[Section]]
                  ) -> Optional[RoleDraft]:
    """verl 0.5.0: ``actor_rollout_ref.profiler`` is the block of the hybrid worker (actor and
    rollout) and of the separate ref group alike; a role block next to it is ambiguous."""
    arr = v.mapping(raw.get("actor_rollout_ref"), "actor_rollout_ref")
    if not isinstance(arr.get("profiler"), Mapping):
        return None
    for role in HYBRID_ROLES:
        for section in sections[role]:
            if section.has_profiler() or section.has_seed_keys():
                key = (f"{section.key}.profiler" if section.has_profiler()
                       else section.seed_keys()[0])
                raise ConfigError(key, "next to actor_rollout_ref.profiler (verl 0.5.0's one block "
                                  "for actor, rollout and ref); use one of them")
    return _read_section(Section("actor_rollout_ref", arr), Draft())


def role_sections(raw: Mapping[Any, Any]) -> Dict[str, List[Section]]:
    """Existing sections per role, in priority order; each checked for unknown ``profile*`` keys
    and for mixing the seed's keys with a ``profiler`` block."""
    arr = v.mapping(raw.get("actor_rollout_ref"), "actor_rollout_ref")
    out: Dict[str, List[Section]] = {}
    for role, keys in ROLE_SECTIONS.items():
        out[role] = []
        for key in keys:
            parent, _, name = key.rpartition(".")
            block = (arr if parent else raw).get(name)
            if block is None:
                continue
            section = Section(key, v.mapping(block, key))
            _check_role_keys(section)
            out[role].append(section)
    return out


def detect(raw: Mapping[Any, Any], sections: Dict[str, List[Section]]) -> str:
    """The layout name (see the module docstring for the rule)."""
    if raw.get("global_profiler") is not None:
        return VERL_GLOBAL_PROFILER
    arr = raw.get("actor_rollout_ref")
    if isinstance(arr, Mapping) and isinstance(arr.get("profiler"), Mapping):
        return VERL_PROFILER  # verl 0.5.0's one block for the hybrid worker
    for found in sections.values():
        for section in found:
            block = section.block.get("profiler")
            if isinstance(block, Mapping) and any(k in block for k in
                                                  ("ranks", "all_ranks", "discrete")):
                return VERL_PROFILER
    return SEED


def output_path(given: Optional[str], trainer: Mapping[Any, Any]) -> str:
    """The absolute output directory (Ray workers run in other working directories).

    Default: ``<trainer.default_local_dir or "outputs">/<trainer.experiment_name>/profiling``;
    the experiment name is not repeated when ``default_local_dir`` already ends with it (verl's
    own default is ``checkpoints/<project>/<experiment>``).
    """
    if given is None:
        base = trainer.get("default_local_dir")
        base = "outputs" if base is None else v.text(base, "trainer.default_local_dir")
        parts = [base]
        name = trainer.get("experiment_name")
        if name is not None:
            if v.is_int(name):
                name = str(name)
            name = v.text(name, "trainer.experiment_name")
            if os.path.basename(os.path.normpath(base)) != name:
                parts.append(name)
        given = os.path.join(*parts, "profiling")
    return os.path.abspath(os.path.expanduser(given))


_MISPLACED = ("profiling keys live in trainer (trainer.profile_steps, trainer.profiler) or in "
              "a role section (actor_rollout_ref.actor.profile_ranks, critic.profile_ranks)")


def _read_global_layout(raw: Mapping[Any, Any], trainer: Mapping[Any, Any],
                        sections: Dict[str, List[Section]], draft: Draft, tool: Optional[str],
                        output_dir: Optional[str]) -> None:
    global_profiler.check_no_trainer_keys(trainer)
    gp = global_profiler.read_global(raw.get("global_profiler"), draft, tool)
    if output_dir is not None and gp.save_path is not None and output_dir != gp.save_path:
        draft.warn("read trainer.profiler.output_dir; ignored global_profiler.save_path")
    draft.set(output_dir=output_path(output_dir or gp.save_path, trainer))
    for role in ROLES:
        for section in sections[role]:
            if section.has_seed_keys():
                raise ConfigError(section.seed_keys()[0], "seed-layout key, but this config "
                                  "uses global_profiler (verl 2025-08+); use one layout: set "
                                  f"{section.key}.profiler.ranks instead")
        read_role = functools.partial(global_profiler.read_role, ROLE_SECTIONS[role][0], gp=gp)
        # a role that follows the actor's block interpolates the actor's values: a warning that
        # only repeats the actor's, under the role's key, is said once (under the actor's)
        into = draft if not _follows_actor(draft, role) else dataclasses.replace(draft,
                                                                                  warnings=[])
        draft.roles[role] = (_pick(sections[role], into, Section.has_profiler, read_role)
                             or read_role(None, into))
        if into is not draft:
            # the rollout's own torch block still runs verl's engine profiler (its servers)
            draft.set(rollout_engine=into.config.rollout_engine)
            own, actor = f"{ROLE_SECTIONS[role][0]}.", f"{ROLE_SECTIONS['actor'][0]}."
            draft.warnings += [w for w in into.warnings
                               if w.replace(own, actor) not in draft.warnings]
    _read_teachers(raw, draft, gp)
    global_profiler.finish(draft)


def _read_teachers(raw: Mapping[Any, Any], draft: Draft,
                   gp: global_profiler.GlobalSettings) -> None:
    """Each distillation teacher's ``inference.profiler`` block selects its replicas (GPU
    ranks of the teacher's pool); a teacher without one is not profiled."""
    selections = {}
    distillation = topology.section(raw, "distillation")
    models = topology.section(distillation, "teacher_models")
    if distillation.get("enabled") is not True:
        for name in models:  # a selection nothing will run: say so
            inference = topology.section(topology.section(models, name), "inference")
            block = topology.section(inference, "profiler")
            if any(block.get(k) for k in ("enable", "ranks", "all_ranks")):
                draft.warn(f"distillation.teacher_models.{name}.inference.profiler: "
                           "distillation.enabled is not true, so no teacher runs and this "
                           "block selects nothing")
    for teacher in verl_pools.teachers(raw):
        section = Section(teacher.prefix, teacher.inference)
        if section.has_profiler():
            block = teacher.inference["profiler"]
            if isinstance(block, Mapping) and "_target_" not in block:
                # verl's servers would get a dict and fail reading its .tool (vLLM, SGLang)
                draft.warn(f"{teacher.prefix}.profiler has no _target_: verl's rollout servers "
                           "read it as a plain dict and fail; add "
                           f"{teacher.prefix}.profiler._target_=verl.utils.profiler.ProfilerConfig")
            role = global_profiler.read_role(teacher.prefix, section, draft, gp)
            selections[teacher.group] = ComponentConfig(**role.component())
    draft.set(teachers=selections)


def _follows_actor(draft: Draft, role: str) -> bool:
    traits = draft.verl
    return traits is not None and ((role == "rollout" and traits.rollout_follows_actor)
                                   or (role == "ref" and traits.ref_follows_actor))


def _check_top_level(raw: Mapping[Any, Any]) -> None:
    """Misspelt or misplaced profiling sections would be silently ignored: refuse them."""
    for name in raw:
        if not isinstance(name, str):
            continue
        if name.startswith("global_prof") and name != "global_profiler":
            v.unknown(name, ("global_profiler",), "")
        if name.startswith("profil"):
            raise ConfigError(name, f"unknown key here; {_MISPLACED}")
    arr = raw.get("actor_rollout_ref")
    if isinstance(arr, Mapping):
        for name in arr:
            if name == "profiler" and isinstance(arr[name], Mapping):
                if raw.get("global_profiler") is not None:
                    raise ConfigError("actor_rollout_ref.profiler", "verl 0.5.0's block next to "
                                      "global_profiler (verl 0.6.0+); use one layout: set "
                                      "actor_rollout_ref.actor.profiler instead")
                continue  # verl 0.5.0's one block for the hybrid worker
            if isinstance(name, str) and name.startswith("profil"):
                raise ConfigError(f"actor_rollout_ref.{name}", "unknown key here; set it per "
                                  "role, e.g. actor_rollout_ref.actor.profile_ranks")


def _check_trainer_keys(trainer: Mapping[Any, Any]) -> None:
    """Typos of profiling keys would otherwise be silently ignored: refuse them."""
    for name in trainer:
        if not isinstance(name, str) or name in TRAINER_PROFILE_KEYS:
            continue
        if name.startswith("profil") or "nsight" in name:
            v.unknown(name, TRAINER_PROFILE_KEYS, "trainer")


def _check_role_keys(section: Section) -> None:
    for name in section.block:
        if name == "profile" and isinstance(section.block[name], Mapping) \
                and "use_profile" in section.block[name]:
            # verl 0.4.1/0.5.0 Megatron's own torch profiler block
            verl_keys.check_megatron_profile(section.block[name], f"{section.key}.profile")
            continue
        if (isinstance(name, str) and name.startswith("profil") and name != "profiler"
                and name not in SEED_ROLE_KEYS):
            v.unknown(name, SEED_ROLE_KEYS + ("profiler",), section.key)
    if section.has_seed_keys() and section.has_profiler():
        raise ConfigError(section.seed_keys()[0], f"seed-layout key next to {section.key}."
                            "profiler (verl's layout); use one layout, not both")


def _pick(found: List[Section], draft: Draft, sets_keys, reader) -> Optional[RoleDraft]:
    """Read the first section that sets profile keys; the others are still validated (a typo
    there is still a typo) but ignored, with a warning naming both."""
    setting = [s for s in found if sets_keys(s)]
    if not setting:
        return None
    chosen = setting[0]
    for other in setting[1:]:
        reader(other, dataclasses.replace(draft, warnings=[]))  # validate only
        draft.warn(f"read {', '.join(_profile_keys(chosen))}; "
                   f"ignored {', '.join(_profile_keys(other))}")
    return reader(chosen, draft)


def _profile_keys(section: Section) -> List[str]:
    return section.seed_keys() + ([f"{section.key}.profiler"] if section.has_profiler() else [])


def _read_trainer(trainer: Mapping[Any, Any], draft: Draft) -> None:
    """The trainer keys shared by the seed and 2025-06/07 layouts."""
    draft.set(steps=v.steps(trainer.get("profile_steps"), "trainer.profile_steps"))
    draft.steps_key = "trainer.profile_steps"
    draft.steps_given = trainer.get("profile_steps") is not None
    draft.set(continuous_steps=v.boolean(trainer.get("profile_continuous_steps"),
                                         "trainer.profile_continuous_steps"))
    draft.continuous_key = "trainer.profile_continuous_steps"
    draft.set_nsys(controller_options=v.mapping(trainer.get("controller_nsight_options"),
                                                "trainer.controller_nsight_options"),
                   controller_options_key="trainer.controller_nsight_options",
                   worker_options_key="trainer.worker_nsight_options")
    given = profiler_block.given_options(trainer.get("worker_nsight_options"),
                                         "trainer.worker_nsight_options")
    draft.worker_options = None if given is None else dict(given)


def _read_role(role: str, found: List[Section], draft: Draft) -> RoleDraft:
    """One role in the seed or 2025-06/07 layout (whichever the role's section uses)."""
    out = _pick(found, draft, lambda s: s.has_seed_keys() or s.has_profiler(), _read_section)
    if out is not None:
        return out
    # Nothing set: still name the key a user would set, in the layout the config uses.
    main = ROLE_SECTIONS[role][0]
    if draft.config.source == VERL_PROFILER:
        return RoleDraft(ranks_key=f"{main}.profiler.ranks",
                         all_ranks_key=f"{main}.profiler.all_ranks",
                         discrete_key=f"{main}.profiler.discrete")
    return RoleDraft(ranks_key=f"{main}.profile_ranks", all_ranks_key=f"{main}.profile_ranks_all",
                     discrete_key=f"{main}.profile_discrete")


def _read_section(section: Section, draft: Draft) -> RoleDraft:
    block: Mapping[Any, Any]
    if section.has_profiler():
        key = f"{section.key}.profiler"
        block = v.mapping(section.block["profiler"], key)
        v.known_keys(block, PROFILER_KEYS, key, {k: _V3_ONLY for k in global_profiler.ROLE_KEYS})
        names = {"ranks": "ranks", "all": "all_ranks", "discrete": "discrete"}
    else:
        key, block = section.key, section.block
        names = {"ranks": "profile_ranks", "all": "profile_ranks_all",
                 "discrete": "profile_discrete"}
    out = RoleDraft(
        ranks=v.ranks(block.get(names["ranks"]), f"{key}.{names['ranks']}"),
        all_ranks=v.boolean(block.get(names["all"]), f"{key}.{names['all']}"),
        discrete=v.boolean(block.get(names["discrete"]), f"{key}.{names['discrete']}"),
        ranks_key=f"{key}.{names['ranks']}", all_ranks_key=f"{key}.{names['all']}",
        discrete_key=f"{key}.{names['discrete']}")
    if (not section.has_profiler() and "profile_ranks" in block
            and block["profile_ranks"] is None and not out.all_ranks
            and any(block.get(k) is not None for k in SEED_ROLE_KEYS[1:])):
        # The seed document once commented "profile_ranks: null # Profile all ranks": say what
        # null really means, and how to ask for all ranks.
        draft.warn(f"{out.ranks_key} is null (no ranks); to profile all ranks set "
                   f"{out.all_ranks_key}: true")
    return out
