"""Where the step went (verlprof/report/anatomy.py) on synthetic ranges: the rows sum to the
step, dispatch/compute/collect are measured on the aligned clocks, a gap under the clock error
says so, skew names the slowest rank, weight sync and replicas get their rows, an unprofiled
phase shows only its controller side, and every output (console in 80 columns, summary.md,
--json) carries it."""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from verlprof.manifest import Manifest, ProcessInfo, ServedGroup
from verlprof.report.anatomy import anatomize
from verlprof.report.anatomy_view import anatomy_json, console_lines
from verlprof.report.model import PhaseRecord, StepSpan

MS = 1_000_000
T0 = 1_700_000_000_000_000_000
GROUP = "actor_rollout_ref"


def rec(group: str, rank: int, role: str, phase: str, start_ms: float, end_ms: float,
        step: int = 1) -> PhaseRecord:
    return PhaseRecord(step=step, group=group, rank=rank, role=role, phase=phase,
                       start_ns=T0 + int(start_ms * MS), end_ns=T0 + int(end_ms * MS))


def ctl(phase: str, start_ms: float, end_ms: float, step: int = 1) -> PhaseRecord:
    return rec("controller", 0, "controller", phase, start_ms, end_ms, step)


def manifest(clocks: Optional[Dict[Tuple[str, int], Tuple[int, int]]] = None,
             served: Optional[Dict[str, ServedGroup]] = None) -> Manifest:
    clocks = clocks or {}
    processes = tuple(ProcessInfo(group=g, rank=r, host="h", pid=1, clock_offset_ns=off,
                                  clock_error_ns=err) for (g, r), (off, err) in clocks.items())
    controller = ProcessInfo(group="controller", rank=0, host="h", pid=1)
    return Manifest(tool="nsys", output_dir="/x", step_windows=((1,),), reports=(),
                    controller=controller, processes=processes, served=served or {})


def step(start_ms: float, end_ms: float, n: int = 1) -> StepSpan:
    return StepSpan(n, T0 + int(start_ms * MS), T0 + int(end_ms * MS), "controller")


def test_rows_sum_to_the_step_and_split_each_phase_at_its_slowest_rank():
    records = [ctl("gen", 10, 110), rec(GROUP, 0, "rollout", "gen", 15, 90),
               rec(GROUP, 1, "rollout", "gen", 20, 100), ctl("update", 130, 180),
               rec(GROUP, 0, "actor", "update", 132, 170),
               rec(GROUP, 1, "actor", "update", 131, 171)]
    clocks = {(GROUP, 0): (0, 100_000), (GROUP, 1): (0, 100_000)}
    anatomy = anatomize(records, [step(0, 200)], manifest(clocks))
    (s,) = anatomy.steps
    assert sum(r.ns for r in s.rows()) == s.wall_ns == 200 * MS
    gen = s.phases[0]
    assert (gen.rank, gen.dispatch_ns, gen.compute_ns, gen.collect_ns) == \
        (1, 10 * MS, 80 * MS, 10 * MS)
    assert gen.skew_ns == 5 * MS  # 80 - 75: rank 1 against the median of the others
    assert s.driver_ns == 200 * MS - 100 * MS - 50 * MS
    rows = {(r.label, r.part): r for r in s.rows()}
    assert "r1, skew 5.0 ms" in rows[("gen", "compute")].detail
    assert rows[("update", "compute")].ns == 40 * MS


def test_offsets_are_applied_and_a_gap_below_the_error_says_so():
    # rank 0's clock runs 30 ms ahead: on its own clock its call starts at 40, really at 10.2
    records = [ctl("gen", 10, 60), rec(GROUP, 0, "rollout", "gen", 40.2, 89.9)]
    anatomy = anatomize(records, [step(0, 100)], manifest({(GROUP, 0): (30 * MS, MS // 2)}))
    gen = anatomy.steps[0].phases[0]
    assert abs(gen.dispatch_ns - int(0.2 * MS)) <= 1 and abs(gen.collect_ns - int(0.1 * MS)) <= 1
    notes = {r.part: r.detail for r in anatomy.steps[0].rows() if r.label == "gen"}
    assert notes["dispatch"] == notes["collect"] == "within clock error"
    # unmeasured clocks: said, never guessed
    bare = anatomize([ctl("gen", 10, 60), rec(GROUP, 0, "rollout", "gen", 20, 50)],
                     [step(0, 100)], manifest())
    assert bare.steps[0].rows()[0].detail == "clock not measured"
    assert bare.steps[0].error_ns is None


def test_a_rank_that_started_before_the_controller_s_range_is_clipped_to_it():
    records = [ctl("gen", 10, 60), rec(GROUP, 0, "rollout", "gen", 5, 50)]
    gen = anatomize(records, [step(0, 100)], manifest({(GROUP, 0): (0, 10)})).steps[0].phases[0]
    assert (gen.dispatch_ns, gen.compute_ns, gen.collect_ns) == (0, 40 * MS, 10 * MS)
    assert gen.dispatch_gap_ns == -5 * MS
    rows = anatomize(records, [step(0, 100)], manifest({(GROUP, 0): (0, 10)})).steps[0].rows()
    assert rows[0].detail == "rank began first"  # as the demo's controller opens its range


def test_an_unprofiled_phase_shows_only_its_controller_side_and_driver_work_is_the_rest():
    records = [ctl("gen", 10, 60), ctl("compute_values", 70, 90),
               rec(GROUP, 0, "rollout", "gen", 20, 50)]
    (s,) = anatomize(records, [step(0, 100)], manifest()).steps
    values = [r for r in s.rows() if r.label == "compute_values"]
    assert [(r.part, r.ns, r.detail) for r in values] == \
        [("controller", 20 * MS, "ranks not profiled")]
    assert s.driver_ns == 30 * MS and sum(r.ns for r in s.rows()) == 100 * MS


def test_weight_sync_outside_the_phases_is_its_own_row_and_replicas_are_beside():
    served = {"rollout_replicas": ServedGroup(engine="vllm", gpus_per_replica=1)}
    records = [ctl("update", 10, 40), rec(GROUP, 0, "actor", "update", 12, 38),
               rec(GROUP, 0, "rollout", "update_weights", 45, 55),
               rec(GROUP, 0, "rollout", "wake_up", 50, 60),
               rec(GROUP, 0, "rollout", "update_weights", 20, 25),  # inside a phase: there
               rec("rollout_replicas", 0, "rollout", "generate", 30, 80),
               rec("rollout_replicas", 0, "rollout", "generate", 70, 90),
               rec("rollout_replicas", 1, "rollout", "generate", 0, 5)]
    (s,) = anatomize(records, [step(0, 100)], manifest(served=served)).steps
    assert s.weight_sync_ns == 15 * MS
    assert s.driver_ns == 100 * MS - 30 * MS - 15 * MS
    assert [(r.replica, r.busy_ns, r.alongside_ns) for r in s.replicas] == \
        [(0, 60 * MS, 8 * MS + 15 * MS), (1, 5 * MS, 0)]


def test_steps_from_records_nested_phases_and_the_outputs():
    records = [ctl("outer", 0, 50, step=2), ctl("inner", 10, 20, step=2),
               rec(GROUP, 0, "actor", "outer", 5, 45, step=2),
               ctl("gen", 0, 30, step=3), rec(GROUP, 0, "rollout", "gen", 1, 29, step=3),
               rec(GROUP, 1, "rollout", "gen", 1, 20, step=3)]
    spans = [step(0, 60, n=2), StepSpan(3, T0, T0 + 30 * MS, "records")]
    anatomy = anatomize(records, spans, manifest())
    two, three = anatomy.steps
    assert [p.phase for p in two.phases] == ["outer"]  # inner is inside outer: counted there
    assert sum(r.ns for r in two.rows()) == two.wall_ns
    assert three.wall_ns == 30 * MS and three.phases[0].skew_ns == 9 * MS
    assert three.rows()[-1].detail == "no controller report" and two.rows()[-1].detail == ""
    lines = console_lines(anatomy)
    assert all(len(line) <= 80 for line in lines), lines
    assert "where the steps went: median and worst of 2 steps (ms)" in lines
    data = anatomy_json(anatomy)
    assert data["schema_version"] == 1 and [s["step"] for s in data["steps"]] == [2, 3]
    wall = next(a for a in data["across"] if a["part"] == "wall")
    assert (wall["worst_ms"], wall["worst_step"]) == (60.0, 2)
    long = [ctl("x" * 60, 0, 50), rec(GROUP, 0, "actor", "x" * 60, 1, 49)]
    assert all(len(line) <= 80 for line in console_lines(anatomize(long, [step(0, 60)],
                                                                   manifest())))


def test_the_trace_draws_an_arrow_from_each_controller_phase_to_its_slowest_rank(tmp_path):
    from tests.trace_reader import decode
    from verlprof.manifest import ReportEntry, write_manifest
    from verlprof.report.anatomy import trace_links
    from verlprof.trace.build import write_trace

    records = [ctl("gen", 10, 110), rec(GROUP, 0, "rollout", "gen", 15, 90),
               rec(GROUP, 1, "rollout", "gen", 20, 100), ctl("update", 120, 150),
               rec(GROUP, 0, "actor", "update", 121, 149)]
    clocks = {(GROUP, 0): (0, 1000), (GROUP, 1): (0, 1000)}
    links = trace_links(anatomize(records, [step(0, 200)], manifest(clocks)))
    entries = tuple(ReportEntry(steps=(1,), group=GROUP, rank=r, component=GROUP,
                                backend="nsys", path=f"step1/r{r}.nsys-rep", status="missing",
                                reason="not needed here", roles=("rollout",)) for r in (0, 1))
    base = manifest(clocks)
    write_manifest(Manifest(tool="nsys", output_dir=str(tmp_path), step_windows=((1,),),
                            reports=entries, controller=base.controller,
                            processes=base.processes), str(tmp_path))
    trace = decode(write_trace(str(tmp_path), links=links).path)
    ends = {}
    for rank in (0, 1):
        process = trace.process_named(f"{GROUP} rank {rank}")
        for s in trace.slices_of_process(process):
            ends.update({f: (rank, s) for f in s.flow_in})
    controller = trace.process_named("controller")
    starts = [s for s in trace.slices_of_process(controller) if s.flow_out]
    assert [s.name for s in starts] == ["gen (step 1)", "update (step 1)"]
    gen_rank, gen_end = ends[starts[0].flow_out[0]]
    assert gen_rank == 1 and (gen_end.start, gen_end.end) == (T0 + 20 * MS, T0 + 100 * MS)
    assert ends[starts[1].flow_out[0]][0] == 0


def test_a_short_call_the_clock_error_moved_out_of_its_phase_still_matches_inside_it():
    # rank 0's 0.5 ms call lands 1 ms before the controller's phase on the aligned clocks,
    # within its 2 ms error: it is still the phase's call, placed inside the phase
    records = [ctl("log_prob", 10, 20), rec(GROUP, 0, "actor", "log_prob", 8.5, 9),
               rec(GROUP, 1, "actor", "log_prob", 12, 13)]
    clocks = {(GROUP, 0): (0, 2 * MS), (GROUP, 1): (0, 2 * MS)}
    split = anatomize(records, [step(0, 30)], manifest(clocks)).steps[0].phases[0]
    assert (split.ranks, split.rank, split.skew_ns) == (2, 1, MS // 2)
    # two calls of one phase in a step: each is matched by time, widened by the error
    twice = [ctl("log_prob", 10, 20), ctl("log_prob", 40, 50),
             rec(GROUP, 0, "actor", "log_prob", 8.5, 9), rec(GROUP, 0, "actor", "log_prob",
                                                             41, 49)]
    first, second = anatomize(twice, [step(0, 60)], manifest(clocks)).steps[0].phases
    assert (first.dispatch_ns, first.compute_ns) == (0, MS // 2)
    assert (second.dispatch_ns, second.compute_ns, second.collect_ns) == (MS, 8 * MS, MS)
