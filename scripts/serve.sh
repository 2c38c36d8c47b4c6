#!/usr/bin/env bash
# Runs browserpool on its embedded defaults (SQLite in ./.browserpool, gRPC on 127.0.0.1:50051,
# HTTP on 127.0.0.1:50052), installing Chromium first when it is missing. Extra arguments go
# to `browserpool serve`, e.g. `scripts/serve.sh --warm 4`.
set -euo pipefail

source "$(dirname "$0")/lib.sh"
ensure_chromium
ensure_ffmpeg

repo="$(cd "$(dirname "$0")/.." && pwd)"
if [ -x "$CARGO_TARGET_DIR/release/browserpool" ]; then
    echo "serve.sh: building browserpool into $CARGO_TARGET_DIR/release (seconds, unless the source changed)" >&2
else
    echo "serve.sh: building browserpool into $CARGO_TARGET_DIR/release for the first time:" \
        "about 5 to 10 minutes on 2 cores (cargo's lines follow); later starts take seconds" >&2
fi
cargo build --release --locked --manifest-path "$repo/Cargo.toml" -p browserpool-server --bin browserpool
echo "serve.sh: starting the server; it says what to try next once it listens" >&2
exec "$CARGO_TARGET_DIR/release/browserpool" serve "$@"
