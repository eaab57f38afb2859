"""The demo's default trainer config, shipped inside the package.

Users install verlprof as a wheel, not from a clone, so the one command that shows what
verlprof does (``verlprof demo``) must find its config without a repository: the YAML is
package data next to this module. The repository's ``trainer_configs/ppo_trainer.yaml`` is a
link to the same file, so there is one copy and nothing to drift. ``verlprof init-config``
writes a copy for users who want to start their own config from it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from verlprof.errors import ConfigError

DEFAULT_CONFIG = Path(__file__).resolve().with_name("ppo_trainer.yaml")
"""The demo's trainer config (package data; declared in setup.cfg's ``package_data``)."""

STDOUT = "-"
"""``verlprof init-config -`` prints the config instead of writing a file."""


def default_config_text() -> str:
    """The demo's default trainer config, as shipped."""
    return DEFAULT_CONFIG.read_text(encoding="utf-8")


def write_config_copy(dest: str, force: bool = False) -> None:
    """Write the demo's default config to ``dest`` (``-``: standard output).

    An existing file is kept unless ``force``: it may be the user's edited copy, and losing
    their edits to a re-run of the same command is worse than one more flag.
    """
    text = default_config_text()
    if dest == STDOUT:
        sys.stdout.write(text)
        return
    target = Path(dest)
    if target.is_dir():
        raise ConfigError(dest, "is a directory; name the file to write, e.g. "
                                f"{target / DEFAULT_CONFIG.name}")
    try:
        # "x" refuses an existing file atomically; "w" only when the user said --force
        with open(target, "w" if force else "x", encoding="utf-8") as handle:
            handle.write(text)
    except FileExistsError:
        raise ConfigError(dest, "exists; pass --force to overwrite it, or choose another "
                                "name") from None
    except OSError as err:
        raise ConfigError(dest, f"cannot write it: {err.strerror or err}") from None
