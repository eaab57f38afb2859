"""The benchmarks import and run at tiny sizes; their result rows are well formed. Nothing here
asserts on a time: only on shapes, verdict logic and behaviour."""

import json
import os
import random
import statistics

import pytest

from benchmarks import common, demo_runs, memory, p1_annotate, p2_fanout, p3_unselected, p4_report
from benchmarks.__main__ import METRICS, summary, table
from verlprof.records import ProcessIdentity, SessionStatus


def test_result_verdicts_and_line():
    assert common.Result("m", 1.2, 1.25).verdict == "PASS"
    assert common.Result("m", 1.3, 1.25).verdict == "MISS"
    assert common.Result("m", None, 1.25).verdict == "N/A"
    assert common.Result("m", 1.1, None).verdict == "INFO"
    line = common.Result("P9 thing", 1.3, 1.25).line()
    assert line.startswith("P9 thing: 1.300x") and "goal <= 1.25x" in line and "MISS" in line


def test_a_row_whose_spread_holds_its_goal_is_within_noise():
    # fixed per-round samples: the goal 1.03 lies between the least and the largest round
    noisy = common.Result("P3 x", 1.01, 1.03, samples=[0.95, 1.01, 1.08])
    assert noisy.verdict == "WITHIN NOISE"
    assert "spread 0.950 / 1.010 / 1.080 (n=3)" in noisy.line()
    assert common.Result("P3 x", 1.01, 1.03, samples=[0.95, 1.01, 1.02]).verdict == "PASS"
    assert common.Result("P3 x", 1.10, 1.03, samples=[1.04, 1.10, 1.2]).verdict == "MISS"
    assert common.Result("P3 x", 1.10, None, samples=[0.9, 1.2]).verdict == "INFO"
    assert common.Result("P3 x", 1.0, 1.03, samples=[1.0]).verdict == "PASS"  # one round
    text = table([noisy])
    assert text.splitlines()[0].split() == ["metric", "ratio", "min", "/", "median", "/", "max",
                                            "(rounds)", "goal", "verdict", "holds"]
    assert text.splitlines()[2].endswith(f"WITHIN NOISE  {noisy.holds_text}")
    assert "0.950 / 1.010 / 1.080" in text
    assert "1 WITHIN NOISE: P3" in summary([noisy, common.Result("P4 y", 2.0, 1.3)])
    assert common.ratios([2.0, 3.0], [1.0, 2.0]) == [2.0, 1.5]
    assert common.block_ratios([[1, 2, 3], [4]], [[1, 1, 1], [2]]) == [2.0, 2.0]


def test_how_often_a_verdict_holds_follows_the_rows_own_noise():
    # every round just under the goal: PASS, but runs like it often put one round over
    close = common.Result("P5 x", 0.96, 1.0, samples=[0.92, 0.96, 0.96, 0.99])
    assert close.verdict == "PASS" and close.holds is not None and 0.4 < close.holds < 0.9
    # the same spread far from the goal: every run like it passes
    far = common.Result("C x", 7.4, 8.8, samples=[7.36, 7.4, 7.4, 7.43])
    assert far.verdict == "PASS" and far.holds == 1.0 and far.holds_text == "100%"
    # a goal in the middle of a wide spread of nine rounds: WITHIN NOISE nearly always
    wide = common.Result("P2 x", 1.2, 1.2, samples=[0.6 + 0.15 * i for i in range(9)])
    assert wide.verdict == "WITHIN NOISE" and wide.holds is not None and wide.holds > 0.9
    # seeded: the same samples, the same figure; no goal or one sample: no figure
    assert common.verdict_holds(0.96, 1.0, (0.92, 0.96, 0.96, 0.99)) == close.holds
    assert common.Result("m", 1.0, None, samples=[1.0, 1.1]).holds_text == "-"
    assert common.Result("m", 1.0, 1.03, samples=[1.0]).holds is None
    assert "verdict holds" in close.line() and "verdict holds" not in \
        common.Result("m", 1.0, 1.03).line()
    text = summary([close, far, wide])
    assert "1 whose verdict holds in under 90% of runs like this: P5;" in text
    assert text.splitlines()[0].startswith("3 rows, 0 MISS")
    # what another run is expected to change: the rows' 1 - holds summed, and the chance that
    # every row keeps its verdict: their product
    left = 3 - (close.holds + far.holds + wide.holds)
    assert f"expected to change {left:.1f} verdicts" in text
    assert f"same one in {close.holds * far.holds * wide.holds:.0%} of runs" in text
    # 14 rows like ``close`` (58% each): 0.05%, with its decimals rather than "0%"
    assert "every row the same one in 0.05% of runs" in summary([close] * 14)


def test_holds_counts_that_a_run_does_not_know_its_own_centre_or_spread():
    # 120 runs of a row whose true law sits 1.25 deviations under its goal: about half of
    # two such runs agree. Taking each run's median and deviation as the truth called
    # that 0.73 on average; drawing them from what the samples say of them is nearer
    rng = random.Random(7)
    runs = []
    for _ in range(120):
        samples = tuple(rng.gauss(0.95, 0.04) for _ in range(4))
        runs.append((common.judge(common.median(samples), 1.0, samples),
                     common.verdict_holds(common.median(samples), 1.0, samples, draws=400)))
    agree = statistics.mean(a[0] == b[0] for i, a in enumerate(runs) for b in runs[i + 1:])
    predicted = statistics.mean(h for _, h in runs)
    assert 0.45 < agree < 0.65 and abs(predicted - agree) < 0.15
    assert common.same_everywhere([0.5, 0.5, 1.0]) == 0.25


def test_a_row_left_out_on_purpose_says_how_to_run_it():
    row = common.Result("P4 100 MB", None, 1.3, not_run="runs under --large")
    assert row.verdict == "NOT RUN (runs under --large)" and row.ratio_text == "-"
    assert "n/a" not in table([row]) and summary([row]).startswith("1 rows, 0 MISS")


def test_interleave_alternates_sides_in_rounds():
    calls = []
    out = common.interleave({"a": lambda: calls.append("a") or 1.0,
                             "b": lambda: calls.append("b") or 2.0}, rounds=3)
    assert calls == ["a", "b"] * 3 and out == {"a": [1.0] * 3, "b": [2.0] * 3}


def test_machine_names_every_version():
    info = common.machine()
    assert {"nproc", "cpu", "ram", "os", "python", "torch", "ray", "nsys"} <= set(info)


def test_p1_runs_at_tiny_size():
    result = p1_annotate.run(number=2000, rounds=1)
    assert result.ratio is not None and result.ratio > 0 and result.verdict == "INFO"
    assert len(result.details) == 2


def test_p1_peer_unavailable_is_a_line_not_an_error(monkeypatch):
    import benchmarks.peer as peer

    monkeypatch.setattr(peer, "ensure_peer", lambda **_: (None, "no network"))
    result = p1_annotate.run_peer(number=10, rounds=1, log=lambda _: None)
    assert result.ratio is None and "peer unavailable: no network" in result.line()


def test_p2_result_from_times():
    times = {n: {"verlprof": [1.2e6 * n] * 3, "bare": [1e6 * n] * 3} for n in (8, 16, 32)}
    idle = SessionStatus(identity=ProcessIdentity(host="h", pid=1))
    ratio, growth = p2_fanout._result([times], [idle] * 32)
    assert ratio.ratio == pytest.approx(1.2) and ratio.verdict == "PASS"
    assert growth.ratio == pytest.approx(1.0) and growth.verdict == "PASS"


def test_p2_has_a_ratio_and_a_growth_row_at_32_and_64():
    first = {n: {"verlprof": [1.2e6 * n] * 3, "bare": [1e6 * n] * 3} for n in (8, 16, 32)}
    then = {8: {"verlprof": [1.0e6 * 8] * 3, "bare": [1e6 * 8] * 3},
            64: {"verlprof": [2e6 * 64] * 3, "bare": [1e6 * 64] * 3}}
    idle = SessionStatus(identity=ProcessIdentity(host="h", pid=1))
    rows = p2_fanout._result([first, then], [idle] * 72)
    assert [r.metric.split(",")[-1].split(" (")[0] for r in rows] == [
        " N=32", "P2 growth: ratio at N=32 / ratio at N=8", " N=64",
        "P2 growth: ratio at N=64 / ratio at N=8"]
    assert [r.verdict for r in rows] == ["PASS", "PASS", "MISS", "MISS"]
    assert rows[1].ratio == pytest.approx(1.0) and rows[3].ratio == pytest.approx(2.0)


@pytest.mark.integration
def test_p2_runs_on_real_ray_at_tiny_size(monkeypatch):
    # N=3 comes after N=1 and 2 and takes over the pool of N=2 plus one fresh actor
    monkeypatch.setattr(p2_fanout, "SHARED_ABOVE", 2)
    results = p2_fanout.run(sizes=(1, 2, 3), rounds=2, log=lambda _: None)
    assert [r.metric.split(" (")[0][-3:] for r in results] == ["N=2", "N=1", "N=3", "N=1"]
    assert all(r.ratio is not None for r in results)
    assert "4 actors, every start stopped (left armed: 0)" in results[0].details


def _run(on, wall, rss=100_000):
    return demo_runs.DemoRun(on=on, seconds=1.0, peak_rss_kib=rss, wall_ns=wall,
                             cpu_ns=wall, selected_wall_ns=wall, reports_ok=3, reports=3,
                             wrapped=["actor_rollout_ref rank 0"] if on else [])


def test_p3_helpers_and_memory_result_from_runs():
    runs = [_run(True, [12e6] * 8, 110_000), _run(False, [10e6] * 8, 100_000)]
    assert "= 1.200x" in p3_unselected._whole_runs(runs, warmup=2)
    assert p3_unselected._pick([(1, 10), (2, 20), (3, 30)], [1, 3, 7], 1) == [10, 30]
    mem = memory.result(runs)
    assert mem.ratio == pytest.approx(1.1) and mem.verdict == "INFO"
    assert memory.result([]).ratio is None


def test_p3_cpu_per_step_and_the_side_by_side_row():
    # (phase wall, phase CPU, process CPU so far, clock) per step, as the timed rank writes
    rows = {on: [(w, 0, 100 * s * (1.1 if on else 1.0), 0) for s, w in
                 enumerate([12 if on else 10] * 8, start=1)] for on in (True, False)}
    assert p3_unselected._deltas(rows[False], [1, 2, 3], 2) == [100, 100]  # step 1: no base
    cpu, wall = p3_unselected._side_by_side(rows, first=3, chunk=3, context=["in turns: x"])
    assert cpu.ratio == pytest.approx(1.1) and cpu.verdict == "MISS"
    assert cpu.samples == [pytest.approx(1.1)] * 2 and cpu.details[-1] == "in turns: x"
    assert "process CPU time per step" in cpu.metric and cpu.goal == p3_unselected.GOAL
    assert wall.ratio == pytest.approx(1.2) and wall.verdict == "MISS" and len(wall.samples) == 2
    assert wall.details[2] == "process CPU per step: on 0.00 ms, off 0.00 ms"
    assert "same neighbours" in wall.metric and wall.goal == p3_unselected.GOAL
    # the CPU row's samples may be longer than the wall row's blocks
    cpu, wall = p3_unselected._side_by_side(rows, first=3, chunk=3, cpu_chunk=6)
    assert len(cpu.samples) == 1 and len(wall.samples) == 2 and "one sample per 6" in cpu.details[2]


def test_p3_cpu_row_pairs_each_on_step_with_the_off_step_beside_it():
    def rows_of(costs):  # process CPU so far after each step; step 1's cost has no base
        return [(10, 0, sum(costs[:s]), 0) for s in range(1, len(costs) + 1)]

    # the core's speed moves from step to step (100, 200, 300); ON costs 2% more than the
    # OFF step that ran at the same moment: every pair reads 1.02, whatever the moment
    off = [0, 100, 200, 300, 100, 200, 300]
    cpu, _ = p3_unselected._side_by_side(
        {True: rows_of([c * 1.02 for c in off]), False: rows_of(off)}, first=2, chunk=3)
    assert cpu.ratio == pytest.approx(1.02) and cpu.samples == [pytest.approx(1.02)] * 2
    # the same costs on ON's side at other moments: the medians agree (1.02x, shown), the
    # pairs do not (2.04, 1.53, 0.34 twice: median 1.53)
    on = [0, 204, 306, 102, 204, 306, 102]
    cpu, _ = p3_unselected._side_by_side({True: rows_of(on), False: rows_of(off)}, first=2,
                                         chunk=3)
    assert cpu.ratio == pytest.approx(1.53) and "ratio of the medians 1.020x" in cpu.details[2]


def test_p3_explains_cpu_per_step_by_rays_idle_threads_over_longer_steps():
    # ON steps twice as long (clock column), same work: 10 ms a step more CPU in ON, all of it
    # Ray's idle 1% of a core over the 1,000 ms longer step
    rows = {on: [(0, 0, s * (30_000_000 if on else 20_000_000), s * (2e9 if on else 1e9))
                 for s in range(1, 10)] for on in (True, False)}
    line = p3_unselected._background(rows, {on: [[2, 3, 4], [6, 7, 8]] for on in rows},
                                     {True: 0.01, False: 0.01})
    assert "on 1.00%, off 1.00% of a core" in line and "2000 ms (on) and 1000 ms (off)" in line
    assert "20.00 and 10.00 ms" in line and "net of it, on vs off: 1.000x" in line


def test_demo_run_overrides_leave_rank1_unselected():
    from verlprof.demo.run import plan_demo

    for on in (True, False):
        _, plan, _ = plan_demo(common.DEMO_CONFIG, demo_runs.overrides("/tmp/x", 4, on))
        selected = {(p.group, p.rank) for p in plan.processes}
        assert ("actor_rollout_ref", 1) not in selected
        assert bool(selected) is on


def test_p4_subset_copies_one_step_with_its_manifest(tmp_path):
    src, dst = tmp_path / "run", tmp_path / "small"
    reports = []
    for step in (1, 2):
        rel = f"step000{step}/critic/rank0/r{step}.nsys-rep"
        (src / os.path.dirname(rel)).mkdir(parents=True)
        (src / rel).write_bytes(b"x")
        (src / rel).with_suffix(".sqlite").write_bytes(b"cached")
        reports.append({"steps": [step], "path": rel})
    (src / "manifest.json").write_text(json.dumps({"output_dir": str(src), "reports": reports}))
    copied = p4_report.subset(str(src), str(dst))
    assert [os.path.relpath(p, dst) for p in copied] == ["step0001/critic/rank0/r1.nsys-rep"]
    assert json.loads((dst / "manifest.json").read_text())["output_dir"] == str(dst)
    p4_report.clean(str(src))
    assert not list(src.rglob("*.sqlite"))


def test_p4_result_from_times():
    walls = {k: [2e9] for k in ("report", "report_jobs", "report_no_picture")}
    walls.update(export_parallel=[1e9], export_serial=[1.5e9], report_small=[1.4e9],
                 export_small=[0.4e9])
    cpus = {k: [v[0] * 1.5] for k, v in walls.items()}
    result = p4_report._result(walls, cpus, 16, 4, 2, {"read_s": "0.5"})
    # small reports: the fixed start-up, shown in ms, no goal
    assert result.ratio == pytest.approx(2.0) and result.verdict == "INFO"
    assert "fixed start-up 1200 ms" in result.note and "1.50 of 2 cores" in result.note
    assert result.samples == [2.0]


def test_table_lists_every_row():
    text = table([common.Result("P1 a", 1.5, 2.0), common.Result("Memory b", 1.1, None)])
    assert "PASS" in text and "INFO" in text and len(text.splitlines()) == 4
    assert METRICS == ("p1", "p2", "p3", "memory", "p4", "p5", "scale", "controller", "trace",
                       "on-demand", "replicas", "summaries", "anatomy", "gpu")


def _p5_row() -> tuple:
    """P5's row from fixed timings: every other step's entry stalls 0.5 s, its exit 3 ms."""
    from benchmarks import p5_stall

    steps = range(1, p5_stall.STEPS + 1)
    got = {"enter": {s: (0.5 if s % 2 else 0.001) for s in steps},
           "body": {s: 0.02 for s in steps},
           "exit": {s: (0.003 if s % 2 else 0.001) for s in steps},
           "bare": [0.001] * p5_stall.STEPS}
    return p5_stall._result(got, {"alone": 0.2, "schedule": 0.6}, False, False, []), got


def test_p5_result_compares_entry_and_exit_with_their_own_floors():
    from benchmarks import p5_stall

    row, got = _p5_row()
    # entry +0.499 s vs 0.6 + 2 x 0.001; exit +0.002 s vs 2 x 0.001: the worse one, exit
    assert row.verdict == "PASS" and abs(row.ratio - 1.0) < 1e-9
    late = p5_stall._result(got, {"alone": 0.2, "schedule": 0.3}, False, False, [])
    assert late.verdict == "MISS" and late.ratio > 1.6
    broken = p5_stall._result(got, {"alone": 0.2, "schedule": 0.6}, True, True, ["x: phases []"])
    assert broken.verdict == "N/A" and "discrete, controller under nsys" in broken.metric


def test_report_scale_runs_at_tiny_size():
    from benchmarks import report_scale

    result = report_scale.run(rounds=1, ranks=32, log=lambda line: None)
    assert result.ratio is not None and result.ratio > 0 and result.verdict in ("PASS", "MISS")
    assert "32 ranks x 8 components x 3 steps" in result.details[0]


def test_controller_scale_child_at_tiny_size():
    from benchmarks import controller_scale

    assert controller_scale._plan(16, "/tmp/x", discrete=False).policy.place == "at_end"
    got = controller_scale.child(16)
    assert got["ranks"] == 16 and got["manifest_entries"] == 16 * controller_scale.STEPS
    assert got["whole_step_s"] > 0 and got["discrete_step_s"] > 0 and got["peak_rss_mb"] > 0
    assert got["finalize_s"] > 0 and got["reload_s"] > 0 and got["manifest_bytes"] > 0


def test_controller_scale_reports_finalize_growth_as_info(monkeypatch):
    from benchmarks import controller_scale

    def child(n: int) -> dict:
        return {"ranks": n, "whole_step_s": n * 1e-6, "discrete_step_s": n * 2e-6,
                "whole_wall_s": 1.0, "discrete_wall_s": 1.0, "peak_rss_mb": 10.0,
                "finalize_s": n * 1e-3, "manifest_bytes": n * 100, "reload_s": n * 1e-4,
                "manifest_entries": 3 * n}

    speeds = iter([1.0, 1.5, 0.8])  # each paired process at a speed of its own

    def paired() -> dict:
        speed = next(speeds)
        return {n: {"whole_step_s": speed * n * 1e-6, "discrete_step_s": speed * n * 2e-6}
                for n in controller_scale.SIZES}

    monkeypatch.setattr(controller_scale, "run_child", child)
    monkeypatch.setattr(controller_scale, "run_paired", paired)
    monkeypatch.setattr(controller_scale, "bare_ray_call_s", lambda: 1e-3)
    monkeypatch.setattr(controller_scale, "plan_costs_in_child", lambda: None)
    monkeypatch.setattr(controller_scale, "plan_row", lambda _: common.Result("plan", 1.0, 8.8))
    monkeypatch.setattr(controller_scale, "plan_memory", lambda _: 1.0)
    rows = {r.metric.split(",")[0]: r for r in controller_scale.run(log=lambda _: None)}
    small, large = controller_scale.SIZES
    row = rows["finalize + manifest.json"]
    assert row.ratio == pytest.approx(large / small) and row.verdict == "INFO"
    assert f"({3 * large:,} / {3 * small:,} entries)" in row.metric
    # the growth is taken inside each paired process: its own speed cancels
    growth = rows[f"Controller step cost N={large} / N={small} (whole)"]
    assert growth.samples == pytest.approx([large / small] * 3) and growth.verdict == "PASS"


def test_controller_scale_paired_child_steps_both_sizes_at_tiny_size():
    from benchmarks import controller_scale

    got = controller_scale.paired_child(sizes=(8, 32), steps=2)
    assert set(got) == {"8", "32"}
    assert all(got[n]["whole_step_s"] > 0 and got[n]["discrete_step_s"] > 0 for n in got)


def test_on_demand_launches_the_armed_plan_and_serves_at_tiny_size(tmp_path):
    from benchmarks import on_demand

    armed = on_demand.armed_plan(str(tmp_path))
    assert armed.windows == () and "--capture-range-end=repeat" in armed.launch_argv
    serving, latency = on_demand.run_serving(blocks=2, block_s=1.5, probes=1, log=lambda _: None)
    assert serving.ratio is not None and serving.goal == 1.03
    assert "refused at the desk 0" in serving.details[-1]
    assert latency.ratio is not None and latency.goal_text == "<= 1 step (the next boundary)"


def test_request_latency_counts_from_the_next_boundary():
    from benchmarks import on_demand

    # a request 2 ms into a 10 ms step, its window 0.5 ms into the next boundary
    on_time = on_demand.probe(sent=2.0, boundaries=[0.0, 10.0, 20.0], started=10.5)
    assert (on_time.skipped, on_time.boundary_s, on_time.wait_s) == (0, 0.5, 8.5)
    # taken at the boundary it came in (sent during that boundary's entry, before its poll)
    assert on_demand.probe(sent=10.1, boundaries=[0.0, 10.0], started=10.4).skipped == 0
    # a request that waited past one boundary reads over a step, whatever its step's rest
    late = on_demand.probe(sent=2.0, boundaries=[0.0, 10.0, 20.0], started=20.5)
    assert late.skipped == 1
    row = on_demand.latency_row([on_time] * 5 + [late], step_s=10.0)
    assert row.samples[-1] == 1.05 and row.ratio == 0.05
    assert row.verdict == "WITHIN NOISE" and "5 opened at the next boundary" in row.details[0]
    assert on_demand.latency_row([on_time] * 6, step_s=10.0).verdict == "PASS"


def test_replicas_rows_from_a_run():
    from benchmarks import replicas

    steps, block = 8, 4
    kept = [s for s in range(1, steps + 1) if (s - 1) % block]
    profiled, unprofiled = [s for s in kept if s % 2], [s for s in kept if not s % 2]
    per_step = {str(s): (0.9 if s % 2 else 0.001) for s in range(1, steps + 1)}
    got = {"times": {"enter": per_step, "exit": {str(s): 0.001 for s in range(1, steps + 1)},
                     "body": {str(s): 0.02 for s in range(1, steps + 1)},
                     "on": {str(s): [0.03, 0.012] for s in range(1, steps + 1)},
                     "off": {str(s): [0.02, 0.010] for s in range(1, steps + 1)},
                     "cpu_on": {str(s): 0.008 for s in range(1, steps + 1)},
                     "cpu_off": {str(s): 0.008 for s in range(1, steps + 1)},
                     "pcpu_on": {str(s): 0.0105 for s in range(1, steps + 1)},
                     "pcpu_off": {str(s): 0.010 for s in range(1, steps + 1)},
                     # ON's replicas 0 and 1, then OFF's, generating at once
                     "together": {str(s): [0.03, 0.011, 0.02, 0.010]
                                  for s in range(steps + 1, steps + 9)},
                     # both unselected replicas' process CPU over the same spans; the core
                     # slower in the later steps: each pair still reads 1.02
                     "together_cpu": {str(s): [0.0102 * s, 0.010 * s]
                                      for s in range(steps + 1, steps + 9)},
                     # the side sent first changes every two steps
                     "together_first": {str(s): "off" if (s // 2) % 2 else "on"
                                        for s in range(steps + 1, steps + 9)}},
           "bare": [0.002] * steps,
           "manifest": {"step_windows": [[1], [3], [5], [7]],
                        "processes": [{"group": "rollout_replicas", "rank": 0,
                                       "under_profiler": True}],
                        "reports": [{"group": "rollout_replicas", "path": f"r{s}",
                                     "status": "ok"} for s in (1, 3, 5, 7)]}}
    floor = {"alone": 0.1, "schedule": 0.95}
    p5 = replicas._p5(got, floor, profiled, unprofiled)
    assert p5.verdict == "PASS" and p5.goal == 1.0 and "4/4 replica reports ok" in p5.details[2]
    turns = replicas._in_turns(got, kept, profiled, block)
    # in turns: the process's CPU time (1.05x) and its wall time (1.2x), context
    assert "= 1.050x (per round 1.05, 1.05)" in turns[0] and "= 1.200x" in turns[1]
    # the engine thread's CPU, the same on both sides: the process did 5% more beyond it
    assert "engine thread's, on vs off: 1.050x" in turns[3]
    p3 = replicas._cpu_side_by_side(got, steps, turns)
    # judged side by side, pair by pair over the window-open steps 11, 13, 15 (9: the first)
    assert p3.ratio == pytest.approx(1.02) and p3.verdict == "PASS" and p3.goal == 1.03
    assert p3.samples == [pytest.approx(1.02)] * 3 and p3.details[4:] == turns
    assert "3 steps side by side, one sample per 1" in p3.details[2]
    assert p3.details[3] == ("by the side whose requests went first: on sent first 1.020x "
                             "(1 of 3 pairs); off sent first 1.020x (2 of 3 pairs)")
    both = replicas._together(got, steps)
    assert both.ratio == pytest.approx(1.1) and both.verdict == "MISS"
    assert "same neighbours" in both.metric and len(both.samples) == 3
    got["manifest"]["processes"].append({"group": "rollout_replicas", "rank": 1,
                                         "under_profiler": True})
    assert replicas._p5(got, floor, profiled, unprofiled).verdict == "N/A"


def test_p5_and_p2_rows_carry_their_rounds():
    row, _ = _p5_row()
    assert row.samples == [pytest.approx(1.0)] * 4  # one per profiled step after the first
    times = {n: {"verlprof": [1.2e6 * n] * 16, "bare": [1e6 * n] * 16} for n in (8, 32)}
    idle = SessionStatus(identity=ProcessIdentity(host="h", pid=1))
    ratio, growth = p2_fanout._result([times], [idle] * 32)
    assert ratio.samples == [pytest.approx(1.2)] * 2 and growth.samples == [pytest.approx(1.0)] * 2


def test_p5_placement_row_has_a_sample_per_run_pair_and_half():
    from benchmarks import p5_placement

    steps = range(1, p5_placement.STEPS + 1)
    off = {"wall": {s: 0.05 if s % 2 else 0.01 for s in steps}, "placed": 0,
           "statuses": ["ok"], "bytes": 1000}
    on = dict(off, wall={s: w * (1.1 if s <= 12 else 1.0) for s, w in off["wall"].items()},
              placed=12)
    row = p5_placement._result({False: [off, off], True: [on, on]})
    assert row.samples == [pytest.approx(r) for r in (1.1, 1.0, 1.1, 1.0)]
    assert row.verdict == "WITHIN NOISE"
    assert "placed while running: [12, 12]" in " ".join(row.details)
    assert p5_placement.make_plan("/tmp/x", placing=False).policy.place == "at_end"
    assert p5_placement.make_plan("/tmp/x", placing=True).policy.place == "per_window"


def test_build_plan_row_from_fixed_figures():
    from benchmarks import controller_scale

    got = {"costs": {"64": [[0.2, 10752, 2000], [0.25, 10752, 2000]],
                     "512": [[1.7, 86016, 16000], [2.4, 86016, 16000]]},
           "calls": {"64": 398_016, "512": 3_182_784}}
    row = controller_scale.plan_row(got)
    assert row.samples == [pytest.approx(8.5), pytest.approx(9.6)]
    assert row.verdict == "WITHIN NOISE" and "7.997x" in row.details[-1]
    assert "16,000 minor page faults" in row.details[1]


def test_gpu_rows_without_a_gpu_say_so_in_one_line(monkeypatch, capsys):
    from benchmarks import __main__ as bench
    from benchmarks import gpu

    monkeypatch.setattr(gpu, "missing", lambda: "no NVIDIA GPU on this machine (test)")
    assert bench.main(["--only", "gpu"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "benchmarks --only gpu: not run: no NVIDIA GPU on this machine (test)"]


def test_gpu_kernel_summary_csv_and_plan():
    from benchmarks import gpu

    text = ("Processing [x.sqlite] with [cuda_gpu_kern_sum.py]...\n"
            "Time (%),Total Time (ns),Instances,Avg (ns),Name\n"
            "60.0,600,3,200.0,gemm\n40.0,400,2,200.0,gelu\n")
    rows = gpu._csv_rows(text)
    assert [(r["Total Time (ns)"], r["Instances"]) for r in rows] == [("600", "3"), ("400", "2")]
    assert gpu._csv_rows("no data") is None
    plan = gpu.plan_for("nsys", range(11, 31), "/tmp/verlprof-bench-gpu-plan")
    process = plan.process(gpu.GROUP, 0)
    assert "--capture-range=cudaProfilerApi" in process.launch_argv
    assert any(a.endswith("cuda,nvtx") for a in process.launch_argv)
    assert len(process.windows) == 1


def test_every_import_of_the_benchmarks_resolves_even_inside_functions():
    """A part that imports inside the function it times (what runs only under ``make bench``)
    still names modules and attributes that exist: a rename in the product (``runtime.launch``
    became ``runtime.ray_options``) failed a row of a full run and no test here."""
    import ast
    import importlib
    from pathlib import Path

    unresolved = []
    for path in sorted(Path(common.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom) or node.level or not node.module or \
                    not node.module.startswith(("verlprof", "benchmarks")):
                continue
            module = importlib.import_module(node.module)
            unresolved += [f"{path.name}:{node.lineno}: {node.module}.{a.name}"
                           for a in node.names if not hasattr(module, a.name) and
                           importlib.util.find_spec(f"{node.module}.{a.name}") is None]
    assert not unresolved, unresolved
