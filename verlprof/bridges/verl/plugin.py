"""Imported by verl in every process that imports verl (its ``verl.plugins`` entry points and
``VERL_USE_EXTERNAL_MODULES``). verlprof declares this module as such an entry point, so
importing it must cost and change nothing unless the bridge was asked for: the launcher
(``python -m verlprof.bridges.verl``), :func:`verlprof.bridges.verl.attach`, or a worker's
environment set ``VERLPROF_VERL_BRIDGE=1``.
"""

from __future__ import annotations

import os

from verlprof.bridges.verl.env import ENABLE_ENV

if os.environ.get(ENABLE_ENV) == "1":
    from verlprof.bridges.verl.bridge import install

    install()
