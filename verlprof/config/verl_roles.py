"""A verl release's role semantics, applied once every role block of a verl config is read.

The layout readers read each role's block as written; which block really decides a role, and
what verl does with it, depends on the release (:class:`~verlprof.config.verl_release.VerlTraits`):

* rollout follows the actor from 0.6.0 on (the hybrid worker reads the actor's block; the
  rollout's own block interpolates it), and so does the reference policy where verl fuses it
  into the actor's worker (0.8.0+): a role block that says otherwise is ignored, with a warning;
* a reward model verl serves (0.7.0's reward loop, 0.8.0+) has no verl worker any profiler can
  reach: selecting it is an error;
* where verl's behaviour is a bug (0.4.1's FSDP hybrid worker reads only the rollout's block,
  0.8.0 never passes ``critic.profiler`` on, 0.6/0.7 crash with ``tool: torch``), verlprof does
  what the keys ask and says so in one line naming the key;
* the phases that open discrete windows are the methods that release's workers annotate;
  ``trainer.profiler.phases`` still overrides them per role.
"""

from __future__ import annotations

import dataclasses

from verlprof.config.draft import Draft, RoleDraft
from verlprof.config.schema import ComponentConfig
from verlprof.config.verl_release import VerlTraits


def apply(draft: Draft, traits: VerlTraits) -> None:
    """Apply the release's semantics (``draft.verl``) to ``draft.roles`` and its phases."""
    verl = f"verl {traits.release}"
    roles = draft.roles
    if traits.hybrid_reads_rollout_block and roles["actor"].selects_any \
            and _selection(roles["actor"]) != _selection(roles["rollout"]):
        draft.warn(f"{_block(roles['actor'])}: {verl}'s FSDP hybrid worker reads only "
                   f"{_block(roles['rollout'])} (the last block it assigns wins), so verl itself "
                   "would not profile what this block selects; verlprof profiles it")
    own, actor = roles["rollout"], roles["actor"]
    if traits.rollout_follows_actor and traits.at_least("0.7.0") and own.given \
            and _selection(own) != _selection(actor):
        # the block was set apart from the actor's: verl's rollout servers read it
        draft.set(rollout_replicas=ComponentConfig(**own.component()))
        draft.warn(f"{_block(own)} ({_describe(own)}) selects the rollout replicas, as "
                   f"{verl}'s rollout servers read it; the hybrid worker's rollout phases "
                   f"follow {_block(actor)}")
        roles["rollout"] = dataclasses.replace(actor)
    elif traits.rollout_follows_actor:
        _follow(draft, "rollout", f"{verl}'s hybrid worker profiles actor and rollout with "
                                  f"{_block(actor)}")
    if traits.ref_follows_actor:
        _follow(draft, "ref", f"{verl} runs the reference policy inside the actor's worker, "
                              f"which it profiles with {_block(roles['actor'])}")
    if traits.critic_block_ignored and roles["critic"].selects_any:
        draft.warn(f"{_block(roles['critic'])}: {verl} never passes this block to its critic "
                   "worker (fixed in verl 0.9.0), so verl itself would not profile the critic; "
                   "verlprof profiles the ranks it selects")
    if traits.torch_broken and draft.config.tool == "torch" and draft.config.active:
        draft.warn(f"global_profiler.tool: torch: {verl}'s own start_profile raises TypeError "
                   "with this tool (its torch Profiler.start takes no arguments); verlprof runs "
                   "the torch profiler itself")
    draft.set(phases={**traits.phases, **draft.config.phases})


def _follow(draft: Draft, role: str, why: str) -> None:
    own, actor = draft.roles[role], draft.roles["actor"]
    if own.selects_any and _selection(own) != _selection(actor):
        draft.warn(f"ignored {_block(own)} ({_describe(own)}): {why}")
    draft.roles[role] = dataclasses.replace(actor)


def _selection(role: RoleDraft):
    return (role.all_ranks, tuple(sorted(role.ranks)))


def _block(role: RoleDraft) -> str:
    """The role's ``profiler`` block key (``critic.profiler``), from its ranks key."""
    return role.ranks_key.rpartition(".")[0] or role.ranks_key


def _describe(role: RoleDraft) -> str:
    if role.all_ranks:
        return "all ranks"
    if not role.ranks:
        return "no rank"
    return f"rank{'s' if len(role.ranks) > 1 else ''} {', '.join(map(str, role.ranks))}"
