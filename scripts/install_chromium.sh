#!/usr/bin/env bash
# Installs Debian's Chromium for the browser test of timeline.html
# (tests/integration/test_hostile_names.py: a page made from hostile range names runs no script
# from them). Idempotent: does nothing when
# a headless Chromium already runs. Needs root and apt; elsewhere it explains what to do and
# exits 0, so that the test can skip (or fail under CI=true), as scripts/install_nsys.sh does.
set -euo pipefail

find_chromium() {
  for exe in chromium chromium-browser google-chrome google-chrome-stable; do
    if command -v "$exe" >/dev/null 2>&1; then command -v "$exe"; return 0; fi
  done
  return 1
}

smoke() {
  # the test's own way of running it: headless, no sandbox (root in a container), DOM out
  local page out
  page=$(mktemp --suffix=.html)
  echo '<html><body><script>document.body.textContent="ok"</script></body></html>' > "$page"
  out=$(timeout 120 "$1" --headless --no-sandbox --disable-gpu --dump-dom "file://$page" \
    2>/dev/null || true)
  rm -f "$page"
  [[ "$out" == *"<body>ok"* ]]
}

if exe=$(find_chromium); then
  if smoke "$exe"; then
    echo "install_chromium: $("$exe" --version 2>/dev/null | head -n1) already installed"
    exit 0
  fi
  echo "install_chromium: $exe is installed but does not run headless" >&2
  exit 1
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "install_chromium: chromium is missing; install it (as root on Debian: sudo $0)" >&2
  exit 0
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium \
  >/dev/null
exe=$(find_chromium)
if smoke "$exe"; then
  echo "install_chromium: $("$exe" --version | head -n1) installed and runs headless"
else
  echo "install_chromium: chromium installed but the headless smoke test failed" >&2
  exit 1
fi
