#!/usr/bin/env bash
# Installs real Nsight Systems from Debian's non-free component (see ../shared/NSYS_ON_CPU.md).
# Idempotent: does nothing when nsys already produces reports. Needs root and apt; elsewhere it
# explains what to do and exits 0, so that the test suite can skip (or fail under CI=true).
set -euo pipefail

LIBDIR=/usr/lib/x86_64-linux-gnu/nsight-systems
HOSTDIR=/usr/lib/nsight-systems/host-linux-x64

link_importer() {
  # Debian's layout hides the importer from nsys: without this link only a .qdstrm appears.
  if [ -d "$HOSTDIR" ] && [ -d "$LIBDIR" ] && [ ! -e "$LIBDIR/host-linux-x64" ]; then
    ln -s "$HOSTDIR" "$LIBDIR/host-linux-x64"
  fi
}

if command -v nsys >/dev/null 2>&1; then
  [ "$(id -u)" = 0 ] && link_importer
  echo "install_nsys: $(nsys --version 2>/dev/null | head -n1) already installed"
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "install_nsys: nsys is missing; install Nsight Systems (as root on Debian: sudo $0)" >&2
  exit 0
fi
. /etc/os-release
SUITE=${VERSION_CODENAME:-bookworm}
cat > /etc/apt/sources.list.d/verlprof-nonfree.sources <<SRC
Types: deb
URIs: http://deb.debian.org/debian
Suites: ${SUITE}
Components: contrib non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
  nsight-systems-target nsight-systems >/dev/null
link_importer
smoke=$(mktemp -d)
# nsys leaves an agent (`nsys --start-agent`) behind its run; the smoke's carries this mark in
# its environment, so only the smoke's own agent is ended (never another job's)
mark="verlprof-nsys-smoke-$$-$RANDOM"
end_smoke_agents() {
  for pid in $(pgrep -f -- '--start-agent' || true); do
    if tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qx "VERLPROF_NSYS_SMOKE=$mark"; then
      kill "$pid" 2>/dev/null || true
    fi
  done
}
if VERLPROF_NSYS_SMOKE="$mark" timeout 120 nsys profile -t nvtx --sample=none --cpuctxsw=none \
     -f true -o "$smoke/smoke" python3 -c pass >/dev/null 2>&1 \
     && [ -f "$smoke/smoke.nsys-rep" ]; then
  end_smoke_agents
  echo "install_nsys: $(nsys --version | head -n1) installed and writes reports"
else
  end_smoke_agents
  echo "install_nsys: nsys installed but the smoke test wrote no report" >&2
  exit 1
fi
rm -rf "$smoke"
