#!/usr/bin/env bash
# Installs Debian's nodejs for the tests that run timeline.html's script under a small DOM stub
# (tests/unit/test_report_outputs.py, tests/unit/test_report_scale.py). Idempotent: does
# nothing when node already runs. Needs root and apt; elsewhere it explains what to do and exits
# 0, so that the tests can skip (or fail under CI=true), as scripts/install_chromium.sh does.
set -euo pipefail

find_node() { command -v node 2>/dev/null || command -v nodejs 2>/dev/null; }

if exe=$(find_node); then
  echo "install_node: node $("$exe" --version) already installed"
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "install_node: node is missing; install it (as root on Debian: sudo $0)" >&2
  exit 0
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs >/dev/null
exe=$(find_node)
echo "install_node: node $("$exe" --version) installed"
