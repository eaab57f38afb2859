"""Reports summarised on the Ray node that holds them (verlprof/runtime/summarise.py), on a
two-node ``ray.cluster_utils.Cluster`` (each node its own raylet and node id; a report is read
only by its node's task): each summary records the node it was made on and holds, value for
value, what ``verlprof report`` computes alone; a second ``verlprof report`` reads only the
summaries (no export is made); a report replaced after its summary was made is summarised
again. The reports are real nsys reports (test_report_real.py's run, copied)."""

from __future__ import annotations

import dataclasses
import glob
import os
import shutil

import pytest

from tests.helpers import require_nsys
from tests.integration.test_report_real import nsys_run  # noqa: F401,F811 - the shared run
from verlprof.backends.summary import SUMMARY_SUFFIX, load_summary, summary_path
from verlprof.manifest import read_manifest, write_manifest
from verlprof.runtime.summarise import summarise_on_nodes

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def two_nodes():
    require_nsys()
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1,
                                                            "include_dashboard": False})
    cluster.add_node(num_cpus=1)  # two raylets: a third one timed out starting here, under load
    ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    cluster.wait_for_nodes()
    head = ray.get_runtime_context().get_node_id()
    others = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != head)
    yield [head, *others]
    ray.shutdown()
    cluster.shutdown()


def _summary(out, entry):
    return load_summary(os.path.join(out, entry.path), entry.backend, entry.window_start_ns)


def _exports(out):
    return {os.path.relpath(p, out)
            for p in glob.glob(os.path.join(out, "**", "*.sqlite"), recursive=True)}


def _values(summary):
    return summary.ranges, summary.marks, summary.window


def test_summaries_made_on_the_nodes_equal_the_head_only_path(two_nodes, nsys_run,  # noqa: F811
                                                              tmp_path):
    from rich.console import Console

    from verlprof.report import summarize

    out = str(tmp_path / "run")
    shutil.copytree(nsys_run["out"], out)  # times kept: the head-only summaries still match
    manifest = read_manifest(out)
    readable = [i for i, e in enumerate(manifest.reports) if e.status == "ok"]
    head_only = {i: _summary(out, manifest.reports[i]) for i in readable}
    truncated = next(i for i in readable if head_only[i] is None)  # unreadable: no summary
    for made in glob.glob(os.path.join(out, "**", "*" + SUMMARY_SUFFIX), recursive=True) + \
            glob.glob(os.path.join(out, "**", "*.sqlite"), recursive=True):
        os.unlink(made)
    manifest = dataclasses.replace(manifest, reports=tuple(  # spread over the two nodes
        dataclasses.replace(e, node_id=two_nodes[k % 2]) for k, e in enumerate(manifest.reports)))

    summed, results, problems = summarise_on_nodes(manifest, out, timeout_s=300,
                                                   local_node=two_nodes[0])
    assert sorted(r.index for r in results) == readable
    for result in results:
        entry = manifest.reports[result.index]
        assert result.node_id == entry.node_id  # made where the report is
        if result.index == truncated:
            assert result.outcome == "unreadable" and summed.reports[truncated].summary is None
            continue
        assert result.outcome == "made", result
        made = _summary(out, entry)
        assert made is not None and made.node_id == entry.node_id
        assert _values(made) == _values(head_only[result.index])
        assert summed.reports[result.index].summary == summary_path(entry.path)
    assert {r.node_id for r in results} == set(two_nodes)
    assert len(problems) == 1 and manifest.reports[truncated].path in problems[0]

    # a second report of the unchanged directory reads only the summaries: no export made
    write_manifest(summed, out)
    for export in _exports(out):  # the nodes' exports (kept for verlprof trace)
        os.unlink(os.path.join(out, export))
    again = summarize(out, console=Console(quiet=True), progress=False, write=False,
                      threshold=2.5)
    assert again.records == nsys_run["summary"].records
    assert _exports(out) <= {os.path.splitext(manifest.reports[truncated].path)[0] + ".sqlite"}

    # a report replaced after its summary was made: summarised again, never the old summary
    step2 = [i for i in readable if i != truncated and manifest.reports[i].steps == (2,)
             and manifest.reports[i].group == "actor_rollout_ref"]
    target, source = (manifest.reports[i] for i in step2[:2])
    shutil.copyfile(os.path.join(out, source.path), os.path.join(out, target.path))
    assert _summary(out, target) is None
    # (and one entry whose size no node sees: asked of its node, then of this one, named)
    odd = next(e for i, e in enumerate(summed.reports) if e.node_id != two_nodes[0]
               and i in readable and i != truncated and e.path != target.path)
    summed = dataclasses.replace(summed, reports=tuple(  # the size a collection would record
        dataclasses.replace(e, bytes=os.path.getsize(os.path.join(out, e.path)))
        if e.path == target.path else dataclasses.replace(e, bytes=e.bytes + 1)
        if e.path == odd.path else e for e in summed.reports))
    _, results, problems = summarise_on_nodes(summed, out, timeout_s=300,
                                              local_node=two_nodes[0])
    outcomes = {manifest.reports[r.index].path: r for r in results}
    assert outcomes.pop(target.path).outcome == "made"
    assert (outcomes[odd.path].outcome, outcomes.pop(odd.path).node_id) == \
        ("not_here", two_nodes[0])
    assert {r.outcome for r in outcomes.values()} == {"current", "unreadable"}
    assert any(odd.path in line and "neither its node" in line for line in problems)
    assert _values(_summary(out, target)) == _values(head_only[step2[1]])
