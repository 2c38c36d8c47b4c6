#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine with Rust: installs Chromium, and Node with
# the CDP clients (puppeteer-core, playwright-core) when missing, the generated clients' tools
# (a Python venv, npm ci in clients/typescript) and moto's S3 server (a venv), checks
# formatting and lints (rustfmt, clippy -D warnings) and that the generated clients are
# current (scripts/gen-clients.sh --check), runs every test (unit and end-to-end, real
# Chromium/SQLite/gRPC, tinyproxy and microsocks as upstream proxies), then the server's tests
# again on PostgreSQL (a local cluster is started when stopped; the half is skipped, saying so, when none is installed), checks that
# no Chromium process is left running, then lints and validates the Helm chart and the
# manifests (scripts/check-deploy.sh), then builds the container image with podman and
# smoke-tests it (scripts/check-image.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/lib.sh
# Each clone builds its own crates into the shared target dir (their paths differ), so their
# incremental state is never reused there, only piled up (tens of GB over many clones).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
bound_target_cache
ensure_chromium
ensure_ffmpeg
ensure_upstream_proxies
ensure_cdp_clients
ensure_client_deps
ensure_moto
ensure_mcp_client

# The host-wide port lock dir (--lock-dir, /tmp/browserpool-locks) is root's once a root
# server made it: the suite's servers that are not root keep theirs apart.
if [ "$(id -u)" -ne 0 ]; then
    export BROWSERPOOL_LOCK_DIR="${BROWSERPOOL_LOCK_DIR:-/tmp/browserpool-locks-$(id -u)}"
fi
# Every data dir, profile and lock of the suite lives under one directory, so the checks
# below see only what the suite started (other Chromiums on the host are not ours).
suite_tmp="$(mktemp -d /tmp/browserpool-suite.XXXXXX)"
# Workers run as uids of their own (the suite runs as root) and pass through it to their
# profiles (`<TMPDIR>/browserpool-profiles-*`): others may pass, not list.
chmod 0711 "$suite_tmp"
log="$suite_tmp.log"
# Tests that cannot run here say so in this file (see `skip` in server/tests/e2e/helpers.rs);
# the summary lists them.
export BROWSERPOOL_TEST_SKIP_LOG="$suite_tmp.skips"
: >"$BROWSERPOOL_TEST_SKIP_LOG"
trap 'rm -rf "$suite_tmp" "$log" "$BROWSERPOOL_TEST_SKIP_LOG"; drop_scratch_databases' EXIT
# Style and lints first: they take seconds, and a red one needs no browser to find.
echo "== cargo fmt --check and cargo clippy -D warnings"
ensure_rust_components
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# The checked-in Python and TypeScript clients must be what their protos generate now.
echo "== the generated clients are up to date (scripts/gen-clients.sh --check)"
bash scripts/gen-clients.sh --check

# A failing test's message, not a backtrace of tokio's frames, is what ends a CI log's excerpt
# (its file and line say where it failed).
export RUST_BACKTRACE=0
echo "== the whole suite on SQLite"
BROWSERPOOL_TEST_POSTGRES= TMPDIR="$suite_tmp" cargo test --workspace --locked -- --test-threads=2 2>&1 | tee "$log"
if ensure_postgres; then
    echo "== the server's tests again on PostgreSQL ($(echo "$BROWSERPOOL_TEST_POSTGRES" | sed 's#//[^@]*@#//#'))"
    TMPDIR="$suite_tmp" cargo test -p browserpool-server --locked -- --test-threads=2 2>&1 | tee -a "$log"
else
    echo "SKIP: the server's tests on PostgreSQL: no PostgreSQL could be started (see above)" >>"$BROWSERPOOL_TEST_SKIP_LOG"
fi
# The feature modules again with every session of the `default` tenant a browser context of
# one shared Chromium: actions, dialogs, envelopes, the policy, the CDP proxy and session files
# must work the same in context isolation (the modules about worker processes themselves are
# not rerun).
echo "== actions, dialogs, envelopes, egress, CDP and session files again in context isolation"
BROWSERPOOL_DEFAULT_ISOLATION=context BROWSERPOOL_TEST_POSTGRES= TMPDIR="$suite_tmp" \
    cargo test -p browserpool-server --locked --test e2e -- --test-threads=2 actions:: dialogs:: context:: egress:: cdp:: files:: 2>&1 | tee -a "$log"

# Every worker the suite started must be gone (zombies awaiting their reaper do not count).
for _ in $(seq 1 50); do
    left=$(pgrep -r R,S,D,T -c -f -- "$suite_tmp" || true)
    [ "$left" -eq 0 ] && break
    sleep 0.2
done
if [ "$left" -ne 0 ]; then
    echo "FAIL: $left chromium processes of the suite left running:" >&2
    pgrep -a -r R,S,D,T -f -- "$suite_tmp" >&2 || true
    exit 1
fi
profiles=$(find "$suite_tmp" -mindepth 2 -maxdepth 2 -path '*/browserpool-profiles-*/*' 2>/dev/null | wc -l)
if [ "$profiles" -ne 0 ]; then
    echo "FAIL: $profiles worker profile directories left behind:" >&2
    find "$suite_tmp" -mindepth 2 -maxdepth 2 -path '*/browserpool-profiles-*/*' >&2
    exit 1
fi
# A root server's profiles are tmpfs mounts: none may outlive the server that made it.
mounts=$(awk '$5 ~ /\/browserpool-profiles-/ { print $5 }' /proc/self/mountinfo)
if [ -n "$mounts" ]; then
    echo "FAIL: worker profile mounts left behind:" >&2
    echo "$mounts" >&2
    exit 1
fi
echo "no chromium process, no profile directory and no profile mount left behind"

# The Helm chart and the kustomize manifests, rendered and validated without a cluster.
echo "== the chart and the manifests (scripts/check-deploy.sh)"
bash scripts/check-deploy.sh

# The image, built from the Dockerfile with podman (base images made locally) and run as the
# chart runs it: health, a session navigating a loopback page, SIGTERM, nothing left behind.
echo "== the container image (scripts/check-image.sh)"
bash scripts/check-image.sh 2>&1 | tee -a "$log"

# One closing line for the whole run (cargo prints one `test result` per test binary).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed;?$/) p += $i; if ($(i+1) ~ /^failed;?$/) f += $i } }
     END { printf "summary: %d passed, %d failed\n", p, f }' "$log"
# Every test that could not run, by name and why (sorted, once each).
skips=$(sort -u "$BROWSERPOOL_TEST_SKIP_LOG")
if [ -n "$skips" ]; then
    echo "$skips"
fi
echo "skipped: $(printf '%s' "$skips" | grep -c '^SKIP' || true)"
