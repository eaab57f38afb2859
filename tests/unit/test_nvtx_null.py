"""verlprof.backends.nsys.nvtx outside a profiler: the null emitter, the cache, the switches."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from verlprof.backends.nsys import nvtx as vnvtx

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for key in (vnvtx.INJECTION_ENV, vnvtx.FORCE_ENV, vnvtx.BACKEND_ENV):
        monkeypatch.delenv(key, raising=False)
    vnvtx.reset_emitter()
    yield
    vnvtx.reset_emitter()


def test_no_profiler_gives_the_null_emitter():
    em = vnvtx.get_emitter()
    assert type(em) is vnvtx.NullEmitter
    assert em.enabled is False and em.backend == "null"
    assert vnvtx.get_emitter() is em  # cached
    assert em.range_start("actor/update_actor") is None
    assert em.range_start("x", domain="other") is None
    assert em.range_end(None) is None and em.range_end(object()) is None
    assert vnvtx.capture_open() is None
    vnvtx.capture_close(None)
    vnvtx.capture_close(vnvtx.capture_open())


def test_constants_kept():
    assert vnvtx.NVTX_DOMAIN == "verlprof"
    assert vnvtx.CAPTURE_RANGE == "VERLPROF_CAPTURE"


def test_decision_is_cached_until_reset(monkeypatch):
    assert type(vnvtx.get_emitter()) is vnvtx.NullEmitter
    monkeypatch.setenv(vnvtx.FORCE_ENV, "1")
    assert type(vnvtx.get_emitter()) is vnvtx.NullEmitter  # cached at first use
    vnvtx.reset_emitter()
    assert vnvtx.get_emitter().enabled is True


def test_force_off_wins_over_an_attached_profiler(monkeypatch):
    monkeypatch.setenv(vnvtx.INJECTION_ENV, "/nonexistent/libToolsInjection64.so")
    monkeypatch.setenv(vnvtx.FORCE_ENV, "off")
    assert type(vnvtx.get_emitter()) is vnvtx.NullEmitter
    assert vnvtx.profiler_attached() is True


def test_unknown_backend_is_rejected_and_falls_back_to_null(monkeypatch):
    with pytest.raises(ValueError, match="unknown NVTX backend"):
        vnvtx.make_emitter("bogus")
    monkeypatch.setenv(vnvtx.FORCE_ENV, "1")
    monkeypatch.setenv(vnvtx.BACKEND_ENV, "bogus")
    assert type(vnvtx.get_emitter()) is vnvtx.NullEmitter


def test_injection_variable_selects_a_real_emitter():
    """In a child process (NVTX initialises once per process): the variable set to a library
    that does not exist gives a real emitter whose calls are harmless."""
    code = (
        "from verlprof.backends.nsys import nvtx as v\n"
        "import threading\n"
        "em = v.get_emitter()\n"
        "assert em.enabled and isinstance(em, v.NvtxEmitter), em\n"
        "h = v.capture_open()\n"
        "r = em.range_start('r'); t = threading.Thread(target=em.range_end, args=(r,))\n"
        "t.start(); t.join(); v.capture_close(h); em.range_end(None)\n"
        "print(em.backend)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env[vnvtx.INJECTION_ENV] = "/nonexistent/libToolsInjection64.so"
    env.pop(vnvtx.FORCE_ENV, None)
    env.pop(vnvtx.BACKEND_ENV, None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() in ("nvtx", "ctypes", "torch")
