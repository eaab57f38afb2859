"""The demo's own Ray cluster: which address it uses, and token authentication chosen
explicitly (as Ray would by default) so that Ray does not warn about its default."""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys

import pytest

from verlprof.demo import local_ray
from verlprof.demo.local_ray import AUTH_MODE, LOCAL, choose_token_auth, ray_address


def test_address_asked_for_then_ray_address_then_a_new_local_cluster(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert ray_address(None) == LOCAL
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert ray_address(None) == "10.0.0.1:6379"
    assert ray_address("auto") == "auto"


def test_detection_agrees_with_ray_itself():
    """Read from Ray's source without importing it; this asks the imported module."""
    setup = importlib.import_module("ray._private.authentication.authentication_token_setup") \
        if importlib.util.find_spec("ray") else None
    has_default = setup is not None and hasattr(setup, "enable_token_auth_by_default")
    assert local_ray._ray_enables_token_auth_by_default() is has_default


@pytest.fixture
def fresh(monkeypatch):
    """A process where Ray is not imported yet and the user set no mode."""
    monkeypatch.delenv(AUTH_MODE, raising=False)
    monkeypatch.delitem(sys.modules, "ray", raising=False)
    monkeypatch.setattr(local_ray, "_ray_enables_token_auth_by_default", lambda: True)
    return monkeypatch


def test_token_mode_is_set_for_a_new_local_cluster(fresh):
    assert choose_token_auth(LOCAL) is True
    assert os.environ[AUTH_MODE] == "token"


def test_the_users_mode_is_left_alone(fresh):
    fresh.setenv(AUTH_MODE, "disabled")
    assert choose_token_auth(LOCAL) is False
    assert os.environ[AUTH_MODE] == "disabled"


@pytest.mark.parametrize("address", ["auto", "10.0.0.1:6379"])
def test_an_existing_clusters_mode_is_its_own(fresh, address):
    assert choose_token_auth(address) is False
    assert AUTH_MODE not in os.environ


def test_nothing_is_set_once_ray_is_imported(fresh):
    fresh.setitem(sys.modules, "ray", object())  # Ray has cached the mode already
    assert choose_token_auth(LOCAL) is False
    assert AUTH_MODE not in os.environ


def test_a_ray_without_the_default_is_left_as_it_was(fresh):
    fresh.setattr(local_ray, "_ray_enables_token_auth_by_default", lambda: False)
    assert choose_token_auth(LOCAL) is False
    assert AUTH_MODE not in os.environ


def test_in_a_fresh_process_ray_is_not_imported_to_decide():
    env = {k: v for k, v in os.environ.items() if k != AUTH_MODE}
    code = ("import sys; from verlprof.demo.local_ray import choose_token_auth; "
            "print(choose_token_auth('local'), 'ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out[1] == "False"
    assert out[0] == str(local_ray._ray_enables_token_auth_by_default())
