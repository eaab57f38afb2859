"""verlprof's errors cross Ray intact: one raised in the controller actor (preflight, a rank
failure) reaches the driver as itself, so the CLI prints its one line, not Ray's
"Failed to deserialize exception" traceback."""

from __future__ import annotations

import pickle

from verlprof.errors import ConfigError, ProfilingRuntimeError


def test_config_error_pickles_with_its_key_and_message():
    err = pickle.loads(pickle.dumps(ConfigError("trainer.profiler.output_dir", "is full")))
    assert isinstance(err, ConfigError)
    assert (err.key, err.message, str(err)) == (
        "trainer.profiler.output_dir", "is full", "trainer.profiler.output_dir: is full")


def test_runtime_error_pickles_with_its_rank():
    err = pickle.loads(pickle.dumps(ProfilingRuntimeError("critic rank 1: died", "critic", 1)))
    assert (str(err), err.group, err.rank) == ("critic rank 1: died", "critic", 1)
