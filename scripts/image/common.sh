# What the parts of the image check share: versions, caches, the image's name, podman as this
# host runs it. Sourced by scripts/check-image.sh (after scripts/lib.sh).

tools="${BROWSERPOOL_TOOLS:-/var/tmp/browserpool-tools}"
cache="${BROWSERPOOL_IMAGE_CACHE:-/var/tmp/browserpool-image-cache}"
image="${BROWSERPOOL_IMAGE:-localhost/browserpool:check}"
rootfs_tar="$tools/debian-bookworm-minbase.tar"
started=$SECONDS

# These flags are what makes podman run on this host's cgroups and limits.
podman() { command podman --runtime runc --cgroup-manager cgroupfs "$@"; }
limits=(--ulimit nofile=20000:20000 --ulimit nproc=4096:4096)

say() { echo "ok    $*"; }
