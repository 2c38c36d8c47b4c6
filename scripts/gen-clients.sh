#!/usr/bin/env bash
# Regenerates the checked-in clients from proto/browserpool/v1/*.proto:
#   clients/python/browserpool/v1/      grpcio-tools (protoc and the gRPC plugin, from PyPI)
#   clients/typescript/gen/             buf + protoc-gen-es (npm), JavaScript and .d.ts
#   clients/typescript/dist/            tsc of the hand-written helper clients/typescript/src/
# Tools come pinned from clients/python/requirements.txt and clients/typescript/package-lock.json
# and are installed when missing (ensure_client_deps in scripts/lib.sh). The output carries no
# timestamps or absolute paths, so the same protos and pins give the same bytes.
#
#   scripts/gen-clients.sh           regenerate in place
#   scripts/gen-clients.sh --check   regenerate into a temp dir and fail, naming the stale
#                                    files, when the checked-in output differs
set -euo pipefail
cd "$(dirname "$0")/.."

check=false
case "${1:-}" in
    --check) check=true ;;
    "") ;;
    *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

source scripts/lib.sh
ensure_client_deps

# Everything is generated under $out with the repository's layout, then compared or copied.
tmp="$(mktemp -d /tmp/browserpool-gen.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
out="$tmp/out"
generated=(clients/python/browserpool/v1 clients/typescript/gen clients/typescript/dist)

# Python: messages, type stubs and gRPC stubs. They import each other as `browserpool.v1`,
# which is the package clients/python/browserpool/v1.
mkdir -p "$out/clients/python"
"$BROWSERPOOL_PYVENV/bin/python" -m grpc_tools.protoc -I proto \
    --python_out="$out/clients/python" --pyi_out="$out/clients/python" \
    --grpc_python_out="$out/clients/python" proto/browserpool/v1/*.proto
printf '"""Generated from proto/browserpool/v1 by scripts/gen-clients.sh. DO NOT EDIT."""\n' \
    >"$out/clients/python/browserpool/v1/__init__.py"

# TypeScript: buf generates gen/ beside a copy of the helper's sources, then tsc compiles the
# helper against that fresh gen/ into dist/.
ts="$tmp/ts"
mkdir -p "$ts"
cp -r clients/typescript/src clients/typescript/tsconfig.json clients/typescript/package.json "$ts/"
ln -s "$PWD/clients/typescript/node_modules" "$ts/node_modules"
(cd clients/typescript && PATH="$PWD/node_modules/.bin:$PATH" buf generate --template buf.gen.yaml -o "$ts")
(cd "$ts" && node_modules/.bin/tsc -p tsconfig.json)
mkdir -p "$out/clients/typescript"
cp -r "$ts/gen" "$ts/dist" "$out/clients/typescript/"

if $check; then
    stale=()
    for dir in "${generated[@]}"; do
        if [ ! -d "$dir" ]; then
            stale+=("$dir/ (not checked in)")
            continue
        fi
        # Files that differ or exist on one side only; bytecode caches are not output.
        while IFS= read -r line; do
            case "$line" in
                "Files $out/"*" differ") line="${line#"Files $out/"}"; stale+=("${line%% and *} (differs)") ;;
                "Only in $out/"*) line="${line#"Only in $out/"}"; stale+=("${line/: //} (generated, not checked in)") ;;
                "Only in "*) line="${line#"Only in "}"; stale+=("${line/: //} (checked in, no longer generated)") ;;
                *) stale+=("$line") ;;
            esac
        done < <(diff -rq -x __pycache__ "$out/$dir" "$dir" || true)
    done
    if [ "${#stale[@]}" -ne 0 ]; then
        echo "FAIL: the generated clients are stale; run scripts/gen-clients.sh and commit:" >&2
        printf '  %s\n' "${stale[@]}" >&2
        exit 1
    fi
    echo "generated clients are up to date (${generated[*]})"
else
    for dir in "${generated[@]}"; do
        rm -rf "$dir"
        cp -r "$out/$dir" "$dir"
    done
    echo "regenerated ${generated[*]}"
fi
