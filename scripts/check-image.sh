#!/usr/bin/env bash
# Builds the container image (Dockerfile) with podman and smoke-tests it, on a machine with no
# container registry: checks --version, then runs the e2e test
# `image::the_image_runs_as_the_chart_runs_it` (server/tests/e2e/image.rs) against it, which
# starts it as its non-root user on a read-only root filesystem, checks /healthz, the
# HEALTHCHECK and build_info, acquires a session over gRPC, navigates it to a page the test
# serves on loopback, releases it, stops the container with SIGTERM and checks it exited 0 and
# left no Chromium and no profile behind. It runs under the chart's seccomp profile
# (helm/browserpool/files/seccomp.json), then once more under that profile with the kubelet
# RuntimeDefault's rule for namespaces (created only with CAP_SYS_ADMIN, as containerd's and
# CRI-O's defaults have it), where workers must fail to boot, saying so.
#
# Needs root (rootful podman, debootstrap). Installs podman, runc and debootstrap with apt-get
# when missing. Base images are made locally, since none can be pulled:
# - debian:bookworm-slim: `debootstrap --variant=minbase bookworm` with the real image's apt
#   sources, imported with `podman import` (the root filesystem's tarball is kept in the tools
#   directory);
# - rust:1-bookworm: a stand-in (that base plus gcc, libc6-dev, pkg-config, and this host's
#   trusted CAs so cargo reaches crates.io as the host does) whose cargo and rustc are the
#   host's own toolchain, lent read-only to the build with `podman build --volume`. The real
#   image, where present, is used as it is. The Dockerfile is the one docker builds anywhere.
#
# Caches, all outside the clone so a fresh clone builds warm: the rootfs tarball in
# ${BROWSERPOOL_TOOLS:-/var/tmp/browserpool-tools}; the build's cache mounts
# (crates.io downloads and cargo's target dir) in ${BROWSERPOOL_IMAGE_CACHE:-/var/tmp/browserpool-image-cache}
# (buildah keeps them under $TMPDIR, which the build gets pointed there); podman's own image
# store and layer cache.
#
# Prints one `ok` line per step; on a failure, the test's failure and the container's log, and
# exits non-zero. Every container, process and temporary directory it starts is removed on exit.
#   BROWSERPOOL_IMAGE=NAME   the tag built and tested (default localhost/browserpool:check; its
#                            build stage is tagged NAME-build, kept as the layer cache)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

if [ "$(id -u)" -ne 0 ]; then
    note_skip "the container image check (scripts/check-image.sh): it needs root (rootful podman to build and run the image, debootstrap for its base)"
    exit 0
fi

# Three parts, each in scripts/image/, run in order in this one shell (they share the image's
# name and the toolchain the build borrows): base images, the build, the smoke test.
source scripts/image/common.sh
source scripts/image/base.sh
source scripts/image/build.sh
source scripts/image/smoke.sh
