# Shared by the scripts: scripts/serve.sh, scripts/test.sh and the checks it runs.

# Installs Debian packages with apt-get (through sudo when not root).
apt_install() {
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "installing $* (apt-get)" >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}

# The caches under /var/tmp are root's when the suite runs as root, and each other user's own
# (`-<uid>`), so a contributor who is not root never meets a directory root made.
own_suffix() {
    [ "$(id -u)" -eq 0 ] || echo "-$(id -u)"
}

# Notes a check that cannot run here, with why, where the suite's summary lists it
# ($BROWSERPOOL_TEST_SKIP_LOG, set by scripts/test.sh), and on stderr.
note_skip() {
    echo "SKIP: $*" >&2
    if [ -n "${BROWSERPOOL_TEST_SKIP_LOG:-}" ]; then
        echo "SKIP: $*" >>"$BROWSERPOOL_TEST_SKIP_LOG"
    fi
}

# rustfmt and clippy come with rustup's default profile; a minimal toolchain gets them added.
ensure_rust_components() {
    local missing=()
    cargo fmt --version >/dev/null 2>&1 || missing+=(rustfmt)
    cargo clippy --version >/dev/null 2>&1 || missing+=(clippy)
    if [ "${#missing[@]}" -gt 0 ]; then
        echo "adding rust components: ${missing[*]}"
        rustup component add "${missing[@]}"
    fi
}

# Installs Debian's Chromium when missing: the headless shell the workers run by default, and
# the full browser (`--chrome chromium`, which the suite also tests).
ensure_chromium() {
    local missing=()
    command -v chromium-headless-shell >/dev/null 2>&1 || missing+=(chromium-headless-shell)
    command -v chromium >/dev/null 2>&1 || missing+=(chromium)
    if [ "${#missing[@]}" -gt 0 ]; then
        apt_install "${missing[@]}"
    fi
}

# Installs Debian's ffmpeg (the encoder of session recordings) when missing.
ensure_ffmpeg() {
    if command -v ffmpeg >/dev/null 2>&1; then
        return
    fi
    apt_install ffmpeg
}

# Installs the upstream proxies the proxy tests route sessions through (tinyproxy for HTTP,
# microsocks for SOCKS5) when missing. Neither is started here: each test runs its own.
ensure_upstream_proxies() {
    if command -v tinyproxy >/dev/null 2>&1 && command -v microsocks >/dev/null 2>&1; then
        return
    fi
    apt_install tinyproxy microsocks
}

# Installs Node (Debian's nodejs and npm) when missing, then the CDP clients the tests drive
# (puppeteer-core and playwright-core, pinned by server/tests/cdp/package-lock.json). Neither
# downloads a browser: they attach to the pool's.
ensure_cdp_clients() {
    if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
        apt_install nodejs npm
    fi
    local dir=server/tests/cdp
    if [ ! -d "$dir/node_modules/puppeteer-core" ] || [ ! -d "$dir/node_modules/playwright-core" ] \
        || [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
        echo "installing the CDP clients (npm ci in $dir)" >&2
        (cd "$dir" && PUPPETEER_SKIP_DOWNLOAD=1 PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 \
            npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    fi
}

# A Python venv at $1 with the packages pinned by requirements file $2 (made again when that
# file changes; $3 is a program the venv must have, $4 what it is, for the log line).
ensure_venv() {
    local venv="$1" req="$2" stamp="$1/requirements.txt"
    if [ ! -x "$venv/bin/$3" ] || ! cmp -s "$req" "$stamp"; then
        echo "installing $4 (venv in $venv)" >&2
        rm -rf "$venv"
        # Debian's python3 makes venvs (with pip) only once python3-venv is installed.
        if ! python3 -m venv "$venv" >/dev/null 2>&1; then
            apt_install python3-venv
            rm -rf "$venv"
            python3 -m venv "$venv"
        fi
        "$venv/bin/pip" install -q --disable-pip-version-check --no-input -r "$req"
        cp "$req" "$stamp"
    fi
}

# The generated clients' tools and runtimes (scripts/gen-clients.sh, the e2e tests in
# server/tests/e2e/clients.rs): a Python venv at $BROWSERPOOL_PYVENV with grpcio, protobuf and
# grpcio-tools pinned by clients/python/requirements.txt (made again when that file changes),
# and `npm ci` in clients/typescript (buf, protoc-gen-es, the connect runtime, typescript;
# pinned by its package-lock.json). Installs python3-venv, node and npm with apt-get when
# missing.
BROWSERPOOL_PYVENV="${BROWSERPOOL_PYVENV:-/var/tmp/browserpool-tools$(own_suffix)/pyvenv}"
export BROWSERPOOL_PYVENV
ensure_client_deps() {
    ensure_venv "$BROWSERPOOL_PYVENV" clients/python/requirements.txt python "the Python client's tools"
    if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
        apt_install nodejs npm
    fi
    local dir=clients/typescript
    if [ ! -x "$dir/node_modules/.bin/buf" ] || [ ! -d "$dir/node_modules/@connectrpc/connect-node" ] \
        || [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
        echo "installing the TypeScript client's tools (npm ci in $dir)" >&2
        (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    fi
}

# moto's S3-compatible server (from PyPI), which server/tests/e2e/stored.rs runs on loopback as
# the object store: a venv at $BROWSERPOOL_MOTOVENV pinned by server/tests/s3/requirements.txt
# (made again when that file changes); exports BROWSERPOOL_TEST_MOTO, its moto_server.
BROWSERPOOL_MOTOVENV="${BROWSERPOOL_MOTOVENV:-/var/tmp/browserpool-tools$(own_suffix)/motovenv}"
ensure_moto() {
    ensure_venv "$BROWSERPOOL_MOTOVENV" server/tests/s3/requirements.txt moto_server "moto's S3 server"
    export BROWSERPOOL_TEST_MOTO="$BROWSERPOOL_MOTOVENV/bin/moto_server"
}

# The official MCP Python SDK in a venv, for server/tests/e2e/mcp.rs (pinned by
# server/tests/mcp/requirements.txt); the tests find its python in BROWSERPOOL_TEST_MCP_PYTHON.
BROWSERPOOL_MCPVENV="${BROWSERPOOL_MCPVENV:-/var/tmp/browserpool-tools$(own_suffix)/mcpvenv}"
ensure_mcp_client() {
    ensure_venv "$BROWSERPOOL_MCPVENV" server/tests/mcp/requirements.txt python "the MCP Python SDK"
    export BROWSERPOOL_TEST_MCP_PYTHON="$BROWSERPOOL_MCPVENV/bin/python"
    # The TypeScript SDK and @playwright/mcp (pinned by server/tests/mcp/node/package-lock.json;
    # neither downloads a browser: @playwright/mcp attaches to a session's cdp_url).
    if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
        apt_install nodejs npm
    fi
    local dir=server/tests/mcp/node
    if [ ! -d "$dir/node_modules/@modelcontextprotocol/sdk" ] || [ ! -d "$dir/node_modules/@playwright/mcp" ] \
        || [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
        echo "installing the MCP clients for Node (npm ci in $dir)" >&2
        (cd "$dir" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    fi
}

# Compiled dependencies are reused across clones when this directory survives; an empty one
# just means a full build.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/browserpool-target$(own_suffix)}"

# Every clone builds its own crates into that directory (their paths are part of the hash), so
# it grows by a few GB per clone, until the disk is full and the build fails. Empties it when it
# holds more than BROWSERPOOL_TARGET_CACHE_MAX_GB (16) or its disk has less than
# BROWSERPOOL_TARGET_MIN_FREE_GB (8) free: the next build starts from scratch (minutes).
bound_target_cache() {
    local dir="$CARGO_TARGET_DIR" max_gb="${BROWSERPOOL_TARGET_CACHE_MAX_GB:-16}"
    local min_free_gb="${BROWSERPOOL_TARGET_MIN_FREE_GB:-8}" used_gb free_gb
    [ -d "$dir" ] || return 0
    used_gb=$(($(du -sk "$dir" | cut -f1) / 1048576))
    free_gb=$(($(df -Pk "$dir" | awk 'NR==2 {print $4}') / 1048576))
    if [ "$used_gb" -gt "$max_gb" ] || [ "$free_gb" -lt "$min_free_gb" ]; then
        echo "emptying the build cache $dir (${used_gb} GB, ${free_gb} GB free on its disk;" \
            "bounds ${max_gb} GB and ${min_free_gb} GB free): this build starts from scratch" >&2
        rm -rf "$dir"
    fi
}

# Runs a command as the postgres system user (peer authentication on the local socket).
as_postgres() {
    if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else sudo -n -u postgres -- "$@"; fi
}

# Sets BROWSERPOOL_TEST_POSTGRES to a server the suite's PostgreSQL half may create databases
# on: the caller's own when already set; else the first local cluster (started when stopped,
# with a `browserpool` role created when missing). Returns 1, saying why, when there is none.
ensure_postgres() {
    if [ -n "${BROWSERPOOL_TEST_POSTGRES:-}" ]; then
        return 0
    fi
    if ! command -v pg_lsclusters >/dev/null 2>&1; then
        echo "SKIP: the PostgreSQL half of the suite: no PostgreSQL is installed (apt-get install -y postgresql, or set BROWSERPOOL_TEST_POSTGRES=postgres://user:password@host/db)" >&2
        return 1
    fi
    local version name port status
    read -r version name port status _ < <(pg_lsclusters --no-header | head -n 1) || true
    if [ -z "${version:-}" ]; then
        echo "SKIP: the PostgreSQL half of the suite: PostgreSQL is installed but has no cluster (pg_createcluster)" >&2
        return 1
    fi
    local url="postgres://browserpool:browserpool@127.0.0.1:$port/postgres"
    # A running cluster where the role exists already needs nothing of root (nor of sudo).
    if [ "$status" = "online" ] && psql "$url" -qtAc "SELECT 1" >/dev/null 2>&1; then
        export BROWSERPOOL_TEST_POSTGRES="$url"
        return 0
    fi
    if [ "$(id -u)" -ne 0 ] && ! sudo -n true >/dev/null 2>&1; then
        echo "SKIP: the PostgreSQL half of the suite: PostgreSQL $version/$name is $status and starting it or creating the browserpool role needs root (run the suite as root or with passwordless sudo, or set BROWSERPOOL_TEST_POSTGRES)" >&2
        return 1
    fi
    if [ "$status" != "online" ]; then
        echo "starting PostgreSQL $version/$name (pg_ctlcluster $version $name start)" >&2
        local sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo -n"
        if ! $sudo pg_ctlcluster "$version" "$name" start; then
            echo "FAIL: could not start PostgreSQL $version/$name (set BROWSERPOOL_TEST_POSTGRES to use another server)" >&2
            exit 1
        fi
    fi
    if ! as_postgres psql -p "$port" -qtAc "DO \$\$ BEGIN
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'browserpool') THEN
            CREATE ROLE browserpool LOGIN CREATEDB PASSWORD 'browserpool';
        END IF; END \$\$;" >/dev/null; then
        echo "FAIL: could not create the browserpool role on PostgreSQL $version/$name" >&2
        exit 1
    fi
    export BROWSERPOOL_TEST_POSTGRES="$url"
}

# Names this run's scratch databases: tests create them as `bp_test_<run>_<uuid>` (see
# `store::scratch_postgres`), so a run drops its own and never another's going on at the same
# time.
BROWSERPOOL_TEST_RUN="${BROWSERPOOL_TEST_RUN:-$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')}"
export BROWSERPOOL_TEST_RUN

# Drops the scratch databases this run's tests created on BROWSERPOOL_TEST_POSTGRES
# (bp_test_<run>_*); never fails the run.
drop_scratch_databases() {
    [ -n "${BROWSERPOOL_TEST_POSTGRES:-}" ] || return 0
    local db
    for db in $(psql "$BROWSERPOOL_TEST_POSTGRES" -qtAc "SELECT datname FROM pg_database WHERE datname LIKE 'bp\_test\_${BROWSERPOOL_TEST_RUN}\_%'" || true); do
        psql "$BROWSERPOOL_TEST_POSTGRES" -qtAc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null || true
    done
}
