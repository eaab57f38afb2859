"""Load a trainer YAML the way verl does, then hand it to :func:`.build.config_from_dict`.

A YAML without a ``defaults`` list is loaded with OmegaConf and the overrides are applied by
:mod:`.overrides`. A YAML with one (verl's ``ppo_trainer.yaml`` composes
``actor@actor_rollout_ref.actor: dp_actor`` and friends) is composed by Hydra from its own
directory, exactly as ``python -m verl.trainer.main_ppo`` would, with the overrides passed to
Hydra. Either way interpolations are resolved before anything is read, and every failure is a
one-line :class:`ConfigError` naming the key (or ``config`` / the override's key).
"""

from __future__ import annotations

import os
import re
from typing import Any, Mapping, Optional, Sequence

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from verlprof.config import guard
from verlprof.config import overrides as ov
from verlprof.config.build import MAX_DEPTH, LoadedConfig, config_from_dict, to_plain
from verlprof.errors import ConfigError
from verlprof.safe_text import one_line

_OVERRIDE_ERRORS = (OmegaConfBaseException, ValueError, TypeError, KeyError, IndexError)


def load_config(path: Optional[str], overrides: Sequence[str] = (),
                env: Optional[Mapping[str, str]] = None) -> LoadedConfig:
    """Load ``path`` (None: start from an empty config), apply ``overrides``, read profiling.

    ``env`` holds NeMo RL's ``NRL_*`` variables (None: ``os.environ``); they win over the YAML.
    """
    parsed = ov.parse(list(overrides) if not isinstance(overrides, (str, bytes)) else overrides)
    if path is None:
        cfg = OmegaConf.create({})
        _apply(cfg, parsed)
    else:
        cfg = _read_yaml(path)
        if "defaults" in cfg:
            cfg = _compose(path, overrides, parsed)
        else:
            _apply(cfg, parsed)
    return config_from_dict(to_plain(cfg), env=env)


def _read_yaml(path: Any) -> DictConfig:
    if not isinstance(path, (str, os.PathLike)):
        raise ConfigError("config", f"path must be a string, got {type(path).__name__}")
    if not os.path.isfile(path):
        raise ConfigError("config", f"no such file: {path}")
    # measured before OmegaConf parses it: an alias bomb must be refused, never expanded
    guard.check_yaml_file(os.fspath(path), MAX_DEPTH)
    try:
        cfg = OmegaConf.load(os.fspath(path))
    except Exception as err:  # yaml, OS, decoding and OmegaConf errors all mean "cannot read"
        raise ConfigError("config", f"cannot read {path}: {_first_line(err)}") from None
    if not isinstance(cfg, DictConfig):
        raise ConfigError("config", f"{path} must hold a mapping of sections, not a "
                                    f"{type(cfg).__name__}")
    return cfg


def _apply(cfg: DictConfig, parsed: Sequence[ov.Override]) -> None:
    try:
        ov.apply(cfg, parsed)
    except ov.MissingKeyError as err:
        raise _valid_to_add(cfg, err) from None
    except ConfigError:
        raise
    except _OVERRIDE_ERRORS as err:  # an override that OmegaConf cannot merge
        key = parsed[0].key if len(parsed) == 1 else "overrides"
        raise ConfigError(key, f"cannot apply overrides: {_first_line(err)}") from None


def _valid_to_add(cfg: DictConfig, err: ov.MissingKeyError) -> ConfigError:
    """``err`` (which says "to add it write +key") when the key is one verlprof accepts there;
    else the error reading the config with the key added gives (an unknown key, with its
    did-you-mean from the schema): a typo is never recommended as a key to add."""
    item = err.override
    if item is None:
        return err
    probe = OmegaConf.create(OmegaConf.to_container(cfg))
    assert isinstance(probe, DictConfig)  # made from a DictConfig's container
    try:
        ov.apply(probe, [ov.Override(text="++" + item.text, key=item.key, kind="force_add",
                                     value=item.value, has_value=True)])
        config_from_dict(to_plain(probe), env={})
    except ConfigError as refused:
        if refused.key == item.key or refused.key.startswith(item.key + "."):
            return ConfigError(refused.key, refused.message)
    except _OVERRIDE_ERRORS:
        pass
    return ConfigError(err.key, err.message)


def _compose(path: str, overrides: Sequence[str], parsed: Sequence[ov.Override]) -> DictConfig:
    """Compose with Hydra from the YAML's directory (verl's configs need their groups)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    config_dir = os.path.dirname(os.path.abspath(path))
    name = os.path.splitext(os.path.basename(path))[0]
    # Hydra keeps one global instance; a caller that is itself a Hydra app must get its own
    # instance back afterwards, so set it aside rather than failing or clobbering it.
    saved = GlobalHydra.instance().hydra
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=config_dir, version_base=None):
            return compose(config_name=name, overrides=list(overrides))
    except Exception as err:  # Hydra raises many types; all mean "cannot compose"
        message = _first_line(err)
        # name the override Hydra complains about, when its message mentions one
        key = next((o.key for o in parsed if o.key and re.search(
            rf"(?<![\w.]){re.escape(o.key)}(?!\w)", str(err))), "config")
        raise ConfigError(key, f"cannot compose {path}: {message}") from None
    finally:
        GlobalHydra.instance().hydra = saved


def _first_line(err: BaseException, limit: int = 300) -> str:
    """The error's text on one line (YAML and Hydra spread theirs over several)."""
    text = one_line(err) or type(err).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."
