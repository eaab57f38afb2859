#!/bin/sh
# Stands in for rocprof-sys-python (no AMD GPU here): records its argv and the ROCPROFSYS_*
# environment in the output path the plan gave it, then runs the program after "--" with
# rocprof_sys_site/ first on PYTHONPATH: its sitecustomize answers the rocprof-sys user API
# and writes the process's output at exit, named as rocprof-sys names it. Before that, one
# short-lived python child runs under it, as a worker's helper process would under the real
# tool: it writes its own pid-suffixed output next to the worker's (collection must leave it).
log="${ROCPROFSYS_OUTPUT_PATH:?}/fake_rocprof_argv_$$.txt"
mkdir -p "$ROCPROFSYS_OUTPUT_PATH"
printf '%s\n' "$0" "$@" > "$log"
env | grep '^ROCPROFSYS_' | sort > "$log.env"
PYTHONPATH="$(cd "$(dirname "$0")" && pwd)/rocprof_sys_site${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONPATH
while [ "$#" -gt 0 ]; do
  arg="$1"; shift
  if [ "$arg" = "--" ]; then
    "$1" -c "import os; print(os.getpid())" > "$log.child" || exit 2
    exec "$@"
  fi
done
echo "fake rocprof-sys-python: no -- in argv" >&2
exit 2
