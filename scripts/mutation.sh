#!/usr/bin/env bash
# Mutation check (`make mutation`, not part of `make test`; docs/reliability.md has the last
# score and why each survivor lives). mutmut 2 mutates the files in place, one mutant at a
# time, and runs the given unit tests against each: a surviving mutant is a change to the code
# that no test notices. One module at a time, each run bounded by MUTATION_TIMEOUT_S.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
LIMIT=${MUTATION_TIMEOUT_S:-1800}
# A mutant's cost is mostly pytest start-up: the autoloaded plugins (hydra's, hypothesis's,
# anyio's...) take ~1-2 s per run and none of these unit tests needs them (hypothesis's
# @given works without its plugin). pytest-timeout alone is loaded, by name: a mutant that
# makes a test wait (an RPC timeout, a lost stop) fails that test after TEST_TIMEOUT_S
# instead of holding the run for mutmut's own limit (10x the whole suite's time).
export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
TEST_TIMEOUT_S=${MUTATION_TEST_TIMEOUT_S:-30}
if [ -n "$(git status --porcelain -- verlprof)" ]; then
  echo "mutation: verlprof/ has uncommitted changes; commit or stash them first" >&2
  exit 2
fi
# module | the unit tests that cover it (plan/render.py's served-replica row is also covered by
# test_verl_replicas.py, left out: collecting it imports verl, 8 s a mutant)
RUNS=(
  "verlprof/report/stragglers.py|tests/unit/test_report_stragglers.py tests/unit/test_report_analysis.py"
  "verlprof/report/matrix.py|tests/unit/test_report_matrix_cells.py tests/unit/test_report_analysis.py tests/unit/test_report_gpu_columns.py tests/unit/test_report_outputs.py"
  "verlprof/plan/build.py|tests/unit/test_plan.py tests/unit/test_plan_edges.py tests/unit/test_launch.py tests/unit/test_on_demand.py tests/unit/test_finish_hook.py tests/unit/test_time_windows.py"
  "verlprof/plan_model.py|tests/unit/test_plan.py tests/unit/test_plan_edges.py tests/unit/test_launch.py tests/unit/test_on_demand.py tests/unit/test_time_windows.py"
  "verlprof/plan/request_plan.py|tests/unit/test_on_demand.py tests/unit/test_on_demand_lines.py tests/unit/test_plan.py"
  "verlprof/plan/render.py|tests/unit/test_plan_render_lines.py tests/unit/test_plan_render_tables.py tests/unit/test_plan_render_hostile.py tests/unit/test_verl_pools.py tests/unit/test_verl_keys.py tests/unit/test_on_demand.py::test_the_plan_shows_the_armed_ranks_and_their_launch_command tests/unit/test_time_windows.py::test_the_plan_carries_the_bounds_to_every_process_and_shows_them tests/docs/test_messages.py"
  "verlprof/runtime/controller.py|tests/unit/test_controller.py tests/unit/test_controller_defaults.py tests/unit/test_controller_edges.py tests/unit/test_controller_identity.py tests/unit/test_on_demand.py tests/unit/test_manifest_disk_full.py tests/unit/test_held_signal_driver.py tests/unit/test_finish_hook.py tests/unit/test_storage.py::test_no_window_opens_once_output_dir_cannot_be_written_and_training_goes_on tests/unit/test_storage.py::test_with_on_rank_failure_raise_the_run_stops_at_the_next_window"
)
# One cache for every module: a run stopped by the timeout resumes where it was (killed mutants
# stay killed; survivors are tried again once the tests change). MUTATION_FRESH=1 starts over.
[ -n "${MUTATION_FRESH:-}" ] && rm -f .mutmut-cache
status=0
for run in "${RUNS[@]}"; do
  module=${run%%|*}
  tests=${run#*|}
  if [ -n "${MUTATION_ONLY:-}" ] && [[ "$module" != *"$MUTATION_ONLY"* ]]; then continue; fi
  echo "== mutation: $module ($tests)"
  # mutmut 2 counts only exit status 1 as a kill: pytest's 2 (a mutant that breaks collection
  # or raises KeyboardInterrupt, e.g. in finalize) would pass for a survivor. Any failure is 1.
  pytest="$BIN/python -m pytest -x -q -p no:cacheprovider -p pytest_timeout --timeout=$TEST_TIMEOUT_S"
  timeout "$LIMIT" nice -n 10 "$BIN/mutmut" run --paths-to-mutate "$module" --tests-dir tests/unit \
    --runner "bash -c '$pytest $tests || exit 1'" --simple-output \
    | tr "\r" "\n" | tail -n 1
  [ "${PIPESTATUS[0]}" = 124 ] && { echo "mutation: $module: stopped after ${LIMIT}s"; status=1; }
  git checkout -- "$module"  # a run stopped by the timeout may leave a mutant in place
  rm -f "$module.bak"  # mutmut's copy of the original, when it was stopped
done
"$BIN/mutmut" results
exit $status
