#!/bin/sh
# Stands in for rocprof-sys-python (no AMD GPU here): records its argv and the ROCPROFSYS_*
# environment in the output path the plan gave it, then runs the program after "--".
log="${ROCPROFSYS_OUTPUT_PATH:?}/fake_rocprof_argv_$$.txt"
mkdir -p "$ROCPROFSYS_OUTPUT_PATH"
printf '%s\n' "$0" "$@" > "$log"
env | grep '^ROCPROFSYS_' | sort > "$log.env"
while [ "$#" -gt 0 ]; do
  arg="$1"; shift
  [ "$arg" = "--" ] && exec "$@"
done
echo "fake rocprof-sys-python: no -- in argv" >&2
exit 2
