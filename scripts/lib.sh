# Shared by scripts/serve.sh and scripts/test.sh.

# Installs Debian's chromium when no chromium is on PATH.
ensure_chromium() {
    if command -v chromium >/dev/null 2>&1; then
        return
    fi
    echo "installing chromium (apt-get)" >&2
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
}

# Compiled dependencies are reused across clones when this directory survives; an empty one
# just means a full build.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/browserpool-target}"
