#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine with Rust: installs Chromium when missing,
# runs every test (unit and end-to-end, real Chromium/SQLite/gRPC), then checks that no
# Chromium process is left running.
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/lib.sh
ensure_chromium

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
cargo test --workspace --locked -- --test-threads=2 2>&1 | tee "$log"

# Every worker the suite started must be gone (zombies awaiting their reaper do not count).
for _ in $(seq 1 50); do
    left=$(pgrep -r R,S,D,T -c chromium || true)
    [ "$left" -eq 0 ] && break
    sleep 0.2
done
if [ "$left" -ne 0 ]; then
    echo "FAIL: $left chromium processes left after the suite:" >&2
    pgrep -a -r R,S,D,T chromium >&2 || true
    exit 1
fi
echo "no chromium process left behind"

# One closing line for the whole run (cargo prints one `test result` per test binary).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed;?$/) p += $i; if ($(i+1) ~ /^failed;?$/) f += $i } }
     END { printf "summary: %d passed, %d failed\n", p, f }' "$log"
