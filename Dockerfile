# syntax=docker/dockerfile:1
#
# browserpool: the server and Debian's Chromium, run as uid 10001 under tini, with every
# writable path on a volume or tmpfs so the root filesystem can be read-only (see the README's
# "Container image"). The build context has no .git, so pass the revision:
#
#   docker build --build-arg GIT_REV="$(git rev-parse --short=12 HEAD)" -t browserpool .
#
# scripts/check-image.sh builds this same file with podman where no registry is reachable.

FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
# Baked into `--version` and /metrics browserpool_build_info by server/build.rs.
ARG GIT_REV=""
# Downloaded crates and the compile cache live in cache mounts (BuildKit and buildah both keep
# them between builds), so a rebuild after a source change compiles only this workspace. The
# binary is copied out of the cache before the step ends.
RUN --mount=type=cache,id=browserpool-cargo-registry,target=/usr/local/cargo/registry \
    --mount=type=cache,id=browserpool-target,target=/src/target \
    BROWSERPOOL_GIT_REV="$GIT_REV" cargo build --release --locked -p browserpool-server \
    && install -D -m 0755 target/release/browserpool /out/browserpool

FROM debian:bookworm-slim
# chromium-headless-shell: the workers (Chromium's engine without the browser's windows; the
# server picks it first). Without Recommends, so without the setuid chromium-sandbox: as a
# non-root user Chromium sandboxes itself with user namespaces, and a read-only root with
# no-new-privileges could not run a setuid helper anyway. The full browser (`--chrome
# chromium`) is not in the image: an image built FROM this one can add Debian's `chromium`.
# Fonts, so pages and screenshots are not tofu: DejaVu (Debian's default), Liberation (metric
# twins of Arial, Times New Roman and Courier New, which pages name), Noto Color Emoji.
# tini: PID 1, hands SIGTERM to the server and reaps what is reparented to it.
# curl: the HEALTHCHECK, plain or TLS. ffmpeg: encodes session recordings.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        chromium-headless-shell fonts-dejavu-core fonts-liberation fonts-noto-color-emoji \
        tini curl ca-certificates ffmpeg \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/*
# The uid and paths the Helm chart uses (runAsUser 10001; the state volume at
# /var/lib/browserpool, the data dir inside it).
RUN groupadd --gid 10001 browserpool \
    && useradd --uid 10001 --gid 10001 --home-dir /var/lib/browserpool --no-create-home \
        --shell /usr/sbin/nologin browserpool \
    && install -d -o 10001 -g 10001 -m 0700 /var/lib/browserpool /var/lib/browserpool/data
COPY --from=build /out/browserpool /usr/local/bin/browserpool

# Both listeners on every address of the container (the server's own default is 127.0.0.1).
# The data dir holds the SQLite file, signing keys, admin.token and the worker profiles; /tmp
# (a tmpfs or emptyDir) holds the port locks, each worker's temp dir and Chromium's shared
# memory (the server passes --disable-dev-shm-usage, so a small /dev/shm does not matter).
ENV BROWSERPOOL_LISTEN=0.0.0.0:50051 \
    BROWSERPOOL_HTTP_LISTEN=0.0.0.0:50052 \
    BROWSERPOOL_DATA_DIR=/var/lib/browserpool/data \
    BROWSERPOOL_LOCK_DIR=/tmp/browserpool-locks \
    HOME=/var/lib/browserpool
VOLUME ["/var/lib/browserpool"]
WORKDIR /var/lib/browserpool
# Numeric, so Kubernetes' runAsNonRoot can check it. Workers run as this uid too (only a root
# server gives them uids of their own), with Chromium's sandbox on.
USER 10001:10001
EXPOSE 50051 50052

# /healthz on the HTTP listener the environment names (set the listeners with the
# BROWSERPOOL_* variables, not flags, for this to follow them). --insecure: under TLS this only
# asks whether the process answers; the certificate need not name 127.0.0.1.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD addr="${BROWSERPOOL_HTTP_LISTEN:-127.0.0.1:50052}"; host="${addr%:*}"; \
        case "$host" in 0.0.0.0|"[::]"|"") host=127.0.0.1 ;; esac; \
        scheme=http; [ -z "${BROWSERPOOL_TLS_CERT:-}" ] || scheme=https; \
        exec curl -fsS -o /dev/null --max-time 4 --insecure "$scheme://$host:${addr##*:}/healthz"

ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/browserpool"]
CMD ["serve"]
