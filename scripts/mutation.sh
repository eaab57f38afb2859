#!/usr/bin/env bash
# Mutation check (`make mutation`, not part of `make test`; docs/reliability.md has the last
# score and why each survivor lives). mutmut 2 mutates the files in place, one mutant at a
# time, and runs the given unit tests against each: a surviving mutant is a change to the code
# that no test notices. One module at a time, each run bounded by MUTATION_TIMEOUT_S.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
LIMIT=${MUTATION_TIMEOUT_S:-1800}
if [ -n "$(git status --porcelain -- verlprof)" ]; then
  echo "mutation: verlprof/ has uncommitted changes; commit or stash them first" >&2
  exit 2
fi
# module | the unit tests that cover it
RUNS=(
  "verlprof/report/stragglers.py|tests/unit/test_report_analysis.py"
  "verlprof/report/matrix.py|tests/unit/test_report_analysis.py tests/unit/test_report_gpu_columns.py tests/unit/test_report_outputs.py"
  "verlprof/plan/build.py|tests/unit/test_plan.py tests/unit/test_launch.py"
  "verlprof/plan/model.py|tests/unit/test_plan.py tests/unit/test_launch.py"
  "verlprof/plan/render.py|tests/unit/test_plan_render_tables.py tests/unit/test_plan_render_hostile.py"
  "verlprof/runtime/controller.py|tests/unit/test_controller.py tests/unit/test_controller_identity.py"
)
status=0
for run in "${RUNS[@]}"; do
  module=${run%%|*}
  tests=${run#*|}
  if [ -n "${MUTATION_ONLY:-}" ] && [[ "$module" != *"$MUTATION_ONLY"* ]]; then continue; fi
  echo "== mutation: $module ($tests)"
  rm -f .mutmut-cache
  timeout "$LIMIT" "$BIN/mutmut" run --paths-to-mutate "$module" --tests-dir tests/unit \
    --runner "$BIN/python -m pytest -x -q -p no:cacheprovider $tests" --simple-output \
    | tail -n 1
  [ "${PIPESTATUS[0]}" = 124 ] && { echo "mutation: $module: stopped after ${LIMIT}s"; status=1; }
  git checkout -- "$module"  # a run stopped by the timeout may leave a mutant in place
  "$BIN/mutmut" results
done
exit $status
