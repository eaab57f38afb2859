"""The walk-throughs run as written, in order, after `make demo`: README.md's "Profile steps 3
and 4 of actor rank 0", then docs/user_guide.md's ten-minute version of it.

Every command of their ``bash`` blocks runs for real, in a directory laid out like a clean
clone, with the demo's output directory already holding a run, as `make demo` leaves it (a
real nsys run of the demo: tests/docs/fixtures/quickstart_run). `verlprof demo` runs for real
(nsys, Ray), once: the user guide's demo line must be the README's, so that one run serves
both (a demo costs 40-90 s on 2 cores). The report paths the prose names must then exist.
The demo uses this module's Ray cluster through ``RAY_ADDRESS``, which it honours as
documented (a Ray start costs 10-15 s more).

tests/docs/test_snippets.py checks each block on its own (and the output shown after it); this
module checks the order: what one command leaves is what the next one needs.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
from typing import Dict, List, Optional, Tuple

import pytest

from tests.docs import snippets
from tests.docs.snippets import ROOT, Block
from tests.helpers import require_nsys

pytestmark = pytest.mark.integration

FIXTURE = os.path.join(ROOT, "tests", "docs", "fixtures", "quickstart_run")
DEMO_OUTPUT = os.path.join("outputs", "ppo_demo", "profiling")
WALKTHROUGHS: Tuple[Tuple[str, str], ...] = (
    ("README.md", "## Profile steps 3 and 4 of actor rank 0"),
    ("docs/user_guide.md", "## Profile steps 3 and 4 of actor rank 0 in ten minutes"),
)
"""(file, heading) of each walk-through, in the order a new user reads them."""
_DOCUMENTED_PATH = re.compile(r"`(outputs/ppo_demo/profiling/[^`\s]+)`")


def section_blocks(path: str, heading: str) -> Tuple[List[Block], str]:
    """The ``bash`` blocks under ``heading`` (up to the next heading of its level) and the
    section's text."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    start = lines.index(heading)
    level = heading.split(" ")[0] + " "
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith(level)),
               len(lines))
    inside = [b for b in snippets.blocks(path) if start < b.line <= end and b.lang == "bash"]
    return inside, "\n".join(lines[start:end])


@pytest.fixture(scope="module")
def ray_address():
    """A Ray head for the demo, in its own process (``ray start``), which every command of the
    walkthrough joins: no cluster of this test process outlives the module."""
    from tests.faults.harness import RayHead

    head = RayHead()
    try:
        head.wait_ready()
        yield head.address
    finally:
        head.stop()


def _workspace(tmp_path) -> str:
    """A clean clone's layout, after `make demo`: its output directory holds one run."""
    ws = str(tmp_path / "clone")
    os.makedirs(ws)
    shutil.copytree(os.path.join(ROOT, "trainer_configs"), os.path.join(ws, "trainer_configs"))
    shutil.copytree(FIXTURE, os.path.join(ws, DEMO_OUTPUT))
    return ws


def test_the_walkthroughs_run_in_order_after_make_demo(tmp_path, ray_address):
    require_nsys()
    ws = _workspace(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NRL_")}
    env.update(RAY_ADDRESS=ray_address, PYTHONPATH=os.pathsep.join(
        p for p in (ROOT, env.get("PYTHONPATH")) if p))
    demo_ran: Optional[List[str]] = None
    outputs: Dict[str, str] = {}
    for path, heading in WALKTHROUGHS:
        blocks, prose = section_blocks(path, heading)
        assert blocks, f"{path}: no bash block under {heading!r}"
        for block in blocks:
            for command in snippets.commands(block.text):
                where = f"{block.where}: {command.text}"
                program, args = command.argv[0], command.argv[1:]
                if program == "make":
                    assert args == ["demo"], f"{where}: only `make demo` comes before"
                    continue  # its result is the workspace's (see the module docstring)
                if program == "nsys-ui":
                    for pattern in args:
                        assert glob.glob(os.path.join(ws, pattern)), f"{where}: no {pattern}"
                    continue
                assert program == "verlprof", f"{where}: no rule for {program!r}"
                if args[:1] == ["demo"] and demo_ran is not None:
                    assert args == demo_ran, (
                        f"{where}: not the README's demo line, so the demo run cannot be "
                        "shared; make the two walk-throughs run the same demo")
                    continue
                proc = subprocess.run([sys.executable, "-m", "verlprof.cli", *args], cwd=ws,
                                      env=dict(env, **command.env), capture_output=True,
                                      text=True, timeout=600)
                assert proc.returncode == command.expect_rc, (
                    f"{where}: exit {proc.returncode}\n{proc.stdout[-4000:]}\n"
                    f"{proc.stderr[-4000:]}")
                outputs[command.text] = proc.stderr + proc.stdout
                if args[:1] == ["demo"]:
                    demo_ran = args
        for documented in _DOCUMENTED_PATH.findall(prose):
            pattern = documented.replace("<its run id>", "*")
            assert glob.glob(os.path.join(ws, pattern)), \
                f"{path}: the documented {documented} is not there after the walk-through"
    assert demo_ran is not None, "no walk-through ran the demo"
    demo_output = next(v for k, v in outputs.items() if k.startswith("verlprof demo"))
    assert "moved to" in demo_output, "the run of `make demo` was not kept beside the new one"
    for step in (3, 4):  # the new run is where the plan said, the earlier one beside it
        assert glob.glob(os.path.join(ws, DEMO_OUTPUT, f"step000{step}", "actor_rollout_ref",
                                      "rank0", "*.nsys-rep"))
    kept = [d for d in os.listdir(os.path.join(ws, DEMO_OUTPUT))
            if os.path.isfile(os.path.join(ws, DEMO_OUTPUT, d, "manifest.json"))]
    assert len(kept) == 1, kept
