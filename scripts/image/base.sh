# Part 1 of the image check: the host's tools (podman, runc, debootstrap) and
# the base images the Dockerfile names, made locally since none can be pulled. Sourced by
# scripts/check-image.sh after scripts/image/common.sh; sets `lend_toolchain` for the build.

ensure_host_tools() {
    local missing=() cmd
    # `type -P`: only a file on PATH counts (`podman` is also the function above).
    for cmd in podman runc debootstrap; do
        type -P "$cmd" >/dev/null 2>&1 || missing+=("$cmd")
    done
    [ "${#missing[@]}" -eq 0 ] || apt_install "${missing[@]}"
}

# debian:bookworm-slim from Debian's packages, when no such image is in podman's store.
ensure_debian_base() {
    podman image exists debian:bookworm-slim && return
    if [ ! -f "$rootfs_tar" ]; then
        echo "making a bookworm root filesystem (debootstrap --variant=minbase, once)" >&2
        mkdir -p "$tools"
        local root
        root="$(mktemp -d "$tools/.rootfs.XXXXXX")"
        debootstrap --variant=minbase bookworm "$root/fs" http://deb.debian.org/debian >"$root.log" 2>&1 \
            || { tail -20 "$root.log" >&2; rm -rf "$root" "$root.log"; exit 1; }
        # The real image's sources: security updates (Chromium's come that way) included.
        rm -f "$root/fs/etc/apt/sources.list"
        cat >"$root/fs/etc/apt/sources.list.d/debian.sources" <<'EOF'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
        # The real slim image's dpkg filter: no documentation, manuals or translations.
        cat >"$root/fs/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/overrides/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/man/*
EOF
        rm -rf "$root/fs/var/cache/apt/archives/"*.deb "$root/fs/var/lib/apt/lists/"*
        # Renamed into place last, so an interrupted run is never taken for a finished one.
        tar -C "$root/fs" -cf "$root/fs.tar" .
        mv "$root/fs.tar" "$rootfs_tar"
        rm -rf "$root" "$root.log"
    fi
    podman import --quiet --change 'CMD ["bash"]' "$rootfs_tar" debian:bookworm-slim >/dev/null
    say "made debian:bookworm-slim from $rootfs_tar"
}

# rust:1-bookworm: the real image when present, else the stand-in (rebuilt from podman's layer
# cache each run, so a change of the host's CAs reaches it). Sets lend_toolchain.
lend_toolchain=()
ensure_rust_base() {
    if podman image exists rust:1-bookworm \
        && [ -z "$(podman image inspect --format '{{index .Labels "org.browserpool.stand-in"}}' rust:1-bookworm)" ]; then
        return
    fi
    local rustup_home="${RUSTUP_HOME:-$HOME/.rustup}" cargo_bin="${CARGO_HOME:-$HOME/.cargo}/bin"
    if [ ! -x "$cargo_bin/cargo" ] || [ ! -d "$rustup_home/toolchains" ]; then
        echo "FAIL: no rust:1-bookworm image and no host toolchain to lend ($cargo_bin/cargo, $rustup_home)" >&2
        exit 1
    fi
    local ctx
    ctx="$(mktemp -d)"
    cp /etc/ssl/certs/ca-certificates.crt "$ctx/host-ca-certificates.crt"
    cat >"$ctx/Containerfile" <<'EOF'
FROM debian:bookworm-slim
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends gcc libc6-dev pkg-config ca-certificates \
    && apt-get clean && rm -rf /var/lib/apt/lists/*
COPY host-ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
# Where the real image keeps its toolchain; check-image.sh mounts the host's there.
ENV RUSTUP_HOME=/usr/local/rustup CARGO_HOME=/usr/local/cargo \
    PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
LABEL org.browserpool.stand-in="rust:1-bookworm made by scripts/check-image.sh; cargo and rustc lent by the host"
EOF
    if ! podman build --quiet --pull=never --network host "${limits[@]}" -t rust:1-bookworm "$ctx" >"$ctx/log" 2>&1; then
        cat "$ctx/log" >&2
        rm -rf "$ctx"
        echo "FAIL: could not build the rust:1-bookworm stand-in" >&2
        exit 1
    fi
    rm -rf "$ctx"
    lend_toolchain=(--volume "$rustup_home:/usr/local/rustup:ro" --volume "$cargo_bin:/usr/local/cargo/bin:ro")
    say "rust:1-bookworm stand-in with the host's toolchain ($("$cargo_bin/cargo" --version))"
}

ensure_host_tools
ensure_debian_base
ensure_rust_base
