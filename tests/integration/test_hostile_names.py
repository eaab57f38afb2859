"""Issue 19, part 1, end to end: a real run whose range names are hostile, then
``verlprof report`` on it, then its timeline.html in a real browser.

The run is real: the controller plans and drives one rank of a worker whose ``annotate``
labels carry markup, HTML with an event handler and quotes, formulas, an empty role and a
100,000-character phase, and the torch profiler records them (``record_function``) into the
trace the report reads. The controller runs over in-process ranks (no Ray: the window logic is
the same, tests/unit/test_controller.py), so the whole run takes seconds. torch's trace writer
turns a name with a control or non-ASCII character into ``unknown``, so three placeholder
names are then rewritten in the real trace, as tests/integration/test_report_real.py does:
a tab, terminal codes with a bidi override, and bytes that are not UTF-8 (as NVTX can carry
them into an nsys report). ``verlprof report`` then runs as a user runs it, in a subprocess.
"""

from __future__ import annotations

import csv
import gzip
import os
import re
import subprocess
import sys
from typing import Dict

import pytest

from tests.helpers import require_chromium
from tests.unit.test_safe_text import evaluates
from verlprof.config.schema import ComponentConfig, ComponentsConfig, ProfilingConfig
from verlprof.config.topology import Topology
from verlprof.plan import build_plan
from verlprof.runtime.controller import ProfileController
from verlprof.runtime.local_rpc import InProcessRanks
from verlprof.safe_text import csv_raw, stand_in, visible
from verlprof.worker import ProfilingWorkerMixin, annotate

pytestmark = pytest.mark.integration

GROUP = "actor_rollout_ref"
PWN = "document.title='pwned';document.documentElement.setAttribute('data-pwned','1')"
XSS = f'values<img src=x onerror="{PWN}">'
LONG = "L" * 100_000
NAMES = {  # method -> (role, phase) as annotate gets them
    "xss": ("critic", XSS),
    "close_tag": ("actor", "[/]"),
    "brackets": ("actor", "attn[mask]"),
    "formula": ('=HYPERLINK("x","update")', "update"),
    "plus": ("actor", "+cmd|' /C calc'!A0"),
    "at": ("@SUM(1+1)", "x"),
    "tab": ("TABROLE", "y"),
    "terminal": ("actor", "TERMINAL"),
    "bytes": ("actor", "NOTUTF8"),
    "empty_role": ("", "lonely"),
    "long": ("actor", LONG),
}
REWRITES = {b"TABROLE": b"\\tTAB", b"TERMINAL": b"\\u001b[31mred\\u001b[0m\\u202eevil",
            b"NOTUTF8": b"bad\xff\xfebytes"}
"""Placeholder in the trace -> its bytes in the rewritten trace (JSON escapes, raw bytes)."""
SHOWN = {"TABROLE": "\tTAB", "TERMINAL": "\x1b[31mred\x1b[0m\u202eevil",
         "NOTUTF8": "bad\ufffd\ufffdbytes"}
"""Placeholder -> the name the report reads."""


def _rewrite(path: str) -> None:
    with gzip.open(path, "rb") as handle:
        raw = handle.read()
    for placeholder, replacement in REWRITES.items():
        assert placeholder in raw, placeholder
        raw = raw.replace(placeholder, replacement)
    with gzip.open(path, "wb") as handle:
        handle.write(raw)


def _names(role: str, phase: str):
    """A (role, phase) of NAMES as the report reads it."""
    return SHOWN.get(role, role), SHOWN.get(phase, phase)


def _phase(method: str, role: str, phase: str):
    def run(self) -> int:
        return self.rank

    run.__name__ = method
    return annotate(role, phase)(run)


HostileRank = type("HostileRank", (ProfilingWorkerMixin,), {
    "__init__": lambda self, rank: setattr(self, "rank", rank),
    **{m: _phase(m, role, phase) for m, (role, phase) in NAMES.items()}})


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory) -> Dict[str, str]:
    out = str(tmp_path_factory.mktemp("hostile"))
    config = ProfilingConfig(steps=(1,), tool="torch", output_dir=out,
                             components=ComponentsConfig(actor=ComponentConfig(ranks=(0,))))
    plan = build_plan(config, Topology.of({GROUP: 2}, cuda=False))
    controller = ProfileController(plan, rpc=InProcessRanks(), echo=False, preflight=False,
                                   handle_signals=False)
    ranks = [HostileRank(0), HostileRank(1)]
    controller.register_group(GROUP, ranks)
    with controller.step(1):
        for rank in ranks:
            for method in NAMES:
                getattr(rank, method)()
    manifest = controller.finalize()
    assert [e.status for e in manifest.reports] == ["ok"]
    _rewrite(os.path.join(out, manifest.reports[0].path))
    report = subprocess.run([sys.executable, "-m", "verlprof.cli", "report", out],
                            capture_output=True, text=True, timeout=240,
                            env=dict(os.environ, COLUMNS="250"))
    return {"out": out, "rc": str(report.returncode), "stdout": report.stdout,
            "stderr": report.stderr}


def test_report_ends_0_with_every_output_written(hostile_run):
    assert hostile_run["rc"] == "0", hostile_run["stderr"]
    summary = os.path.join(hostile_run["out"], "summary")
    for name in ("summary.csv", "summary.md", "timeline.png", "timeline.html"):
        assert os.path.getsize(os.path.join(summary, name)) > 0, name
    assert "Traceback" not in hostile_run["stderr"]


def test_the_terminal_shows_every_name_as_written_and_no_code_reaches_it(hostile_run):
    text = hostile_run["stdout"]
    for role, phase in (_names(*names) for names in NAMES.values()):
        if stand_in(role) is None and stand_in(phase) is None:
            assert visible(phase) in text, phase
    assert "critic/values<img" in text and "actor/[/]" in text and "attn[mask]" in text
    assert "\x1b" not in text and "\u202e" not in text
    assert re.search(r"warning: a range name .* cannot be shown \(empty\): shown as "
                     r"\(empty name\)", text)
    assert "100000 characters long" in text and LONG not in text


def test_summary_csv_has_no_cell_a_spreadsheet_evaluates(hostile_run):
    path = os.path.join(hostile_run["out"], "summary", "summary.csv")
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert not [cell for row in rows for cell in row.values() if evaluates(cell)]
    roles = {csv_raw(r["role"]) for r in rows}
    phases = {csv_raw(r["phase"]) for r in rows}
    assert {'=HYPERLINK("x","update")', "@SUM(1+1)", "\tTAB",
            "(empty name)"} <= roles  # the raw names, one ' away
    assert {XSS, "[/]", "+cmd|' /C calc'!A0", "\x1b[31mred\x1b[0m\u202eevil",
            "bad\ufffd\ufffdbytes"} <= phases
    assert stand_in(LONG) in phases


# -- the page in a browser ---------------------------------------------------------------------


def _dump_dom(chromium: str, page: str, profile: str) -> str:
    """The page's DOM after its scripts ran and its images failed (virtual time lets every
    pending event fire), as headless Chromium serialises it."""
    argv = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            f"--user-data-dir={profile}", "--virtual-time-budget=5000", "--dump-dom",
            "file://" + page]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "<html" in done.stdout, done.stderr[-2000:]
    return done.stdout


def _variant(tmp_path, source: str, name: str, change) -> str:
    path = tmp_path / name
    path.write_text(change(source), encoding="utf-8")
    return str(path)


def _no_csp(page: str) -> str:
    return re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>\n', "", page)


def test_timeline_html_in_chromium_runs_no_script_from_the_names(hostile_run, tmp_path):
    chromium = require_chromium()
    path = os.path.join(hostile_run["out"], "summary", "timeline.html")
    with open(path, encoding="utf-8") as handle:
        source = handle.read()
    profile = str(tmp_path / "profile")
    title = re.search(r"<title>(.*?)</title>", source).group(1)

    # as written, and with its Content-Security-Policy removed: escaping alone must suffice
    for page in (path, _variant(tmp_path, source, "no_csp.html", _no_csp)):
        dom = _dump_dom(chromium, page, profile)
        assert f"<title>{title}</title>" in dom and "pwned" not in dom.split("</title>")[0]
        assert 'data-pwned="1"' not in dom and "<img" not in dom  # as text only
        assert dom.count('class="bar"') == len(NAMES)  # the page's own script ran
        legend = dom.split('<p id="legend">')[1].split("</p>")[0]
        assert XSS.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") in legend
        assert "[/]" in legend and "(empty name)" not in legend  # a role, not a phase

    # the control: the same page with the legend built the way it was (innerHTML) runs the
    # handler, so the checks above would see a script that ran
    def old_legend(page: str) -> str:
        return _no_csp(page).replace(
            "for (const [name, colour] of D.phases) swatch(name, {background: colour});",
            'document.getElementById("legend").innerHTML = D.phases.map(p => p[0]).join("");')

    dom = _dump_dom(chromium, _variant(tmp_path, source, "old.html", old_legend), profile)
    assert "<title>pwned</title>" in dom and 'data-pwned="1"' in dom
