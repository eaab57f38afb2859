"""The demo trainer's own settings (steps, batch, planted faults and stragglers) are checked on
the driver: a bad value is one line naming its key and exit 2, before the run claims its
output directory or starts Ray; before, it came back as a Ray traceback from the TaskRunner."""

from __future__ import annotations

import os

import pytest

from verlprof.cli import main
from verlprof.demo.settings import DemoSettings, Fault, Straggler, demo_settings
from verlprof.errors import ConfigError


def test_defaults_and_what_each_rank_gets():
    assert demo_settings({}) == DemoSettings()
    settings = demo_settings({
        "trainer": {"total_training_steps": 4}, "data": {"batch_size": 16},
        "demo": {"on_worker_death": "continue", "worker_start_timeout_s": 5,
                 "stragglers": [{"group": "critic", "rank": 1, "phase": "update_critic",
                                 "seconds": 0.6}],
                 "faults": [{"group": "critic", "rank": 0, "phase": "compute_values",
                             "step": 2, "action": "sleep", "seconds": 3,
                             "release": "/tmp/go"}],
                 "worker_resources": {"critic": {"second_node": 1}},
                 "controller_resources": {"head_node": 1}}})
    assert (settings.total_steps, settings.batch_size) == (4, 16)
    assert settings.on_worker_death == "continue"
    assert settings.worker_start_timeout_s == 5.0
    assert settings.delays("critic", 1) == {"update_critic": 0.6}
    assert settings.delays("critic", 0) == {}
    assert settings.faults_of("critic", 0) == (
        Fault(group="critic", rank=0, phase="compute_values", action="sleep", step=2,
              seconds=3.0, release="/tmp/go"),)
    assert settings.faults_of("critic", 1) == ()
    assert settings.stragglers == (Straggler(group="critic", rank=1, phase="update_critic",
                                             seconds=0.6),)
    assert settings.worker_resources == {"critic": {"second_node": 1.0}}
    assert settings.controller_resources == {"head_node": 1.0}


@pytest.mark.parametrize("raw, message", [
    ({"trainer": {"total_training_steps": "abc"}},
     "trainer.total_training_steps: an integer at least 1 expected, not 'abc'"),
    ({"trainer": {"total_training_steps": True}},
     "trainer.total_training_steps: an integer at least 1 expected, not True"),
    ({"data": {"batch_size": 0}}, "data.batch_size: an integer at least 1 expected, not 0"),
    ({"demo": {"worker_start_timeout_s": 0}},
     "demo.worker_start_timeout_s: a number over 0 expected, not 0"),
    ({"demo": {"on_worker_death": "maybe"}},
     "demo.on_worker_death: stop or continue, not 'maybe'"),
    ({"demo": {"faults": [{"group": "critic", "rank": 0, "phase": "p", "action": "boom"}]}},
     "demo.faults[0].action: one of kill, raise, sleep, not 'boom'"),
    ({"demo": {"faults": [{"group": "critic", "rank": 0, "phase": "p"}]}},
     "demo.faults[0].action: required"),
    ({"demo": {"faults": [{"group": "critic", "rank": -1, "phase": "p", "action": "kill"}]}},
     "demo.faults[0].rank: an integer at least 0 expected, not -1"),
    ({"demo": {"faults": [{"group": "critic", "rank": 0, "phase": "p", "action": "kill",
                           "step": 0}]}},
     "demo.faults[0].step: an integer at least 1 expected, not 0"),
    ({"demo": {"stragglers": [{"group": "critic", "rnak": 0, "phase": "p"}]}},
     "demo.stragglers[0].rnak: not a key here (keys: group, rank, phase, seconds)"),
    ({"demo": {"stragglers": [{"group": "", "rank": 0, "phase": "p"}]}},
     "demo.stragglers[0].group: a name expected, not ''"),
    ({"demo": {"stragglers": "critic"}}, "demo.stragglers: a list expected, not 'critic'"),
    ({"demo": {"worker_resources": {"critic": {"node": -1}}}},
     "demo.worker_resources.critic.node: a number over 0 expected, not -1"),
    ({"demo": [1]}, "demo: a mapping expected, not [1]"),
])
def test_a_bad_value_names_its_key(raw, message):
    with pytest.raises(ConfigError) as info:
        demo_settings(raw)
    assert str(info.value) == message


def test_the_demo_refuses_a_bad_value_in_one_line_before_anything_starts(tmp_path, capsys,
                                                                         monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "never"
    code = main(["demo", f"trainer.profiler.output_dir={out}", "data.batch_size=abc"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1] == "verlprof: data.batch_size: an integer at least 1 expected, not 'abc'"
    assert not os.path.exists(out)  # the output directory was never claimed
