"""`verlprof report --json` matches its published schema (verlprof/report/summary.schema.json,
checked with jsonschema), `--strict` exits 3 when a report is not ok, and the next-step hints
never point at a report that could not be read."""

from __future__ import annotations

import json
import os

import jsonschema

from tests.helpers import report_main as main
from tests.torch_runs import write_torch_run
from verlprof.report import json_out


def report(argv, capsys):
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def schema() -> dict:
    with open(json_out.SCHEMA_PATH, encoding="utf-8") as handle:
        return json.load(handle)


def test_json_matches_the_schema_with_figures_stragglers_and_statuses(tmp_path, capsys):
    write_torch_run(tmp_path)
    rc, out, _ = report([str(tmp_path), "--json", "--no-picture", "--jobs", "1"], capsys)
    assert rc == 0
    data = json.loads(out)  # stdout is the JSON alone
    jsonschema.validate(data, schema())
    assert (data["schema"], data["schema_version"], data["ok"]) == ("verlprof.report", 1, True)
    update = next(p for p in data["phases"] if p["phase"] == "update_actor")
    assert update["ranks"] == {"0": 100.0, "1": 100.0, "2": 900.0}
    assert [(s["rank"], s["phase"]) for s in data["stragglers"]] == [(2, "update_actor")]
    assert {r["status"] for r in data["reports"]} == {"ok"} and len(data["reports"]) == 3
    assert os.path.isfile(data["files"]["summary.csv"])


def test_strict_exits_3_when_a_report_is_unreadable_and_hints_skip_it(tmp_path, capsys):
    paths = write_torch_run(tmp_path, slow_ms=100.0)  # no straggler: the hint is rank 0's
    with open(paths[0], "wb") as handle:  # rank 0's trace, the first to open: not gzip
        handle.write(b"not a trace")
    rc, out, err = report([str(tmp_path), "--no-picture", "--jobs", "1"], capsys)
    assert rc == 0  # without --strict a bad report is listed, not fatal
    hints = out[out.index("next steps:"):]
    assert "r0.pt.trace.json.gz" not in hints and "r1.pt.trace.json.gz" in hints
    rc, out, err = report([str(tmp_path), "--no-picture", "--jobs", "1", "--strict", "--json"],
                          capsys)
    assert rc == 3 and "--strict: 1 report(s) not ok" in err
    data = json.loads(out)
    jsonschema.validate(data, schema())
    assert data["ok"] is False
    bad = [r for r in data["reports"] if r["status"] != "ok"]
    assert [(r["rank"], r["status"]) for r in bad] == [(0, "unreadable")] and bad[0]["reason"]
