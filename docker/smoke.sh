#!/usr/bin/env bash
# verlprof-smoke: does Nsight Systems record verlprof's NVTX ranges here?
#
# Runs a tiny program under `nsys profile` exactly as verlprof wraps a worker (capture window
# = the NVTX range VERLPROF_CAPTURE@verlprof, --capture-range-end=repeat:1), exports the report
# to sqlite and checks that the phase range is in it. With a GPU (torch.cuda available) it
# also checks the cuda trigger: a window opened by torch.cuda.profiler.start() holds kernels.
# Exit 0 and one line per check on success; a non-zero exit and the reason otherwise.
#
# Environment: NSYS (default nsys), PYTHON (default python3), VERLPROF_SMOKE_GPU=0 to skip the
# GPU check.
set -euo pipefail

NSYS=${NSYS:-nsys}
PYTHON=${PYTHON:-python3}
work=$(mktemp -d)
# every process of this smoke's `nsys profile` runs carries this mark in its environment (the
# variable verlprof's own nsys runs are marked by): nsys may leave its agent (`nsys
# --start-agent`) behind its run, and on exit the smoke ends what it left, never another job's
mark="verlprof-smoke-$$-$RANDOM"
cleanup() {
  "$PYTHON" - "$mark" <<'PY' >/dev/null 2>&1 || true
import sys

from verlprof.backends.nsys.cli import DEFAULT_LINGER_S
from verlprof.backends.nsys.procs import settle_marked

settle_marked(sys.argv[1], DEFAULT_LINGER_S)
PY
  rm -rf "$work"
}
trap cleanup EXIT

fail() { echo "verlprof-smoke: $*" >&2; exit 1; }

command -v "$NSYS" >/dev/null 2>&1 || fail "$NSYS not found"
echo "verlprof-smoke: $("$NSYS" --version | head -n1)"

cat > "$work/nvtx_app.py" <<'PY'
from verlprof.backends.nsys import nvtx

emitter = nvtx.get_emitter()
assert emitter.enabled, f"no NVTX emitter under nsys: {emitter!r}"
window = nvtx.capture_open()
handle = emitter.range_start("smoke/phase")
sum(range(200_000))
emitter.range_end(handle)
nvtx.capture_close(window)
print(f"verlprof-smoke: NVTX binding {emitter.backend}")
PY

cat > "$work/read.py" <<'PY'
import sqlite3
import sys

db = sqlite3.connect(sys.argv[1])
want = sys.argv[2]
names = [row[0] for row in db.execute(
    "SELECT coalesce(e.text, s.value) FROM NVTX_EVENTS e "
    "LEFT JOIN StringIds s ON e.textId = s.id")]
if want not in names:
    sys.exit(f"verlprof-smoke: range {want!r} not in the report (found {sorted(set(map(str, names)))})")
if len(sys.argv) > 3:
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    kernels = 0
    if "CUPTI_ACTIVITY_KIND_KERNEL" in tables:
        kernels = db.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    if not kernels:
        sys.exit("verlprof-smoke: the cuda window recorded no kernel")
    print(f"verlprof-smoke: {kernels} CUDA kernel(s) recorded")
PY

profile() {  # profile <name> <trigger options...> -- <program>
  local name=$1; shift
  local opts=()
  while [ "$1" != "--" ]; do opts+=("$1"); shift; done
  shift
  VERLPROF_NSYS_RUN="$mark" NSYS_NVTX_PROFILER_REGISTER_ONLY=0 timeout 180 "$NSYS" profile --sample=none --cpuctxsw=none \
    "${opts[@]}" --capture-range-end=repeat:1 --force-overwrite=true \
    --output="$work/$name" "$@" >"$work/$name.log" 2>&1 || true
  local reports=("$work/$name"*.nsys-rep)
  local report=${reports[0]}
  [ -f "$report" ] || { tail -n 20 "$work/$name.log" >&2; fail "$name: nsys wrote no report"; }
  timeout 180 "$NSYS" export --type sqlite --force-overwrite=true --output "$work/$name.sqlite" \
    "$report" >/dev/null 2>&1 || fail "$name: nsys export failed"
}

profile nvtx --trace=nvtx,osrt --capture-range=nvtx --nvtx-capture=VERLPROF_CAPTURE@verlprof \
  -- "$PYTHON" "$work/nvtx_app.py"
"$PYTHON" "$work/read.py" "$work/nvtx.sqlite" smoke/phase
grep -ho 'verlprof-smoke: NVTX binding [a-z]*' "$work/nvtx.log" || true
echo "verlprof-smoke: nvtx trigger ok (one window, phase range recorded)"

if [ "${VERLPROF_SMOKE_GPU:-1}" != 0 ] && \
   "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  cat > "$work/cuda_app.py" <<'PY'
import torch

from verlprof.backends.nsys import nvtx

x = torch.randn(1024, 1024, device="cuda")
torch.cuda.synchronize()
torch.cuda.profiler.start()
handle = nvtx.get_emitter().range_start("smoke/matmul")
(x @ x).sum().item()
nvtx.get_emitter().range_end(handle)
torch.cuda.synchronize()
torch.cuda.profiler.stop()
PY
  profile cuda --trace=cuda,nvtx --capture-range=cudaProfilerApi -- "$PYTHON" "$work/cuda_app.py"
  "$PYTHON" "$work/read.py" "$work/cuda.sqlite" smoke/matmul kernels
  echo "verlprof-smoke: cuda trigger ok"
else
  echo "verlprof-smoke: no GPU here: cuda trigger not checked"
fi
echo "verlprof-smoke: ok"
