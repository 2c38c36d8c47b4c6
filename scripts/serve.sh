#!/usr/bin/env bash
# Runs browserpool on its embedded defaults (SQLite in ./.browserpool, gRPC on 127.0.0.1:50051,
# HTTP on 127.0.0.1:50052), installing Chromium first when it is missing. Extra arguments go
# to `browserpool serve`, e.g. `scripts/serve.sh --warm 4`.
set -euo pipefail

source "$(dirname "$0")/lib.sh"
ensure_chromium
ensure_ffmpeg

repo="$(cd "$(dirname "$0")/.." && pwd)"
cargo build --release --locked --manifest-path "$repo/Cargo.toml" -p browserpool-server --bin browserpool
exec "$CARGO_TARGET_DIR/release/browserpool" serve "$@"
