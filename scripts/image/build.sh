# Part 2 of the image check: `podman build` of the Dockerfile, and the image's --version naming
# this revision. Sourced by scripts/check-image.sh after scripts/image/base.sh; sets `rev`.

rev="$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
mkdir -p "$cache"
build_log="$(mktemp)"
t0=$SECONDS
# --format docker: OCI image configs have no HEALTHCHECK. TMPDIR: where buildah keeps the
# Dockerfile's cache mounts. The toolchain is lent to the build stage alone: that stage is
# built first with it, then the whole image without it, taking the build stage from the layer
# cache (whose key ignores --volume), so no mount point of the loan is left in the image.
build() { TMPDIR="$cache" podman build --pull=never --format docker --network host "${limits[@]}" \
    --build-arg GIT_REV="$rev" -f Dockerfile "$@" . >>"$build_log" 2>&1; }
old_ids="$(for i in "$image" "$image-build"; do podman image inspect --format '{{.Id}}' "$i" 2>/dev/null || true; done)"
if ! { build "${lend_toolchain[@]}" --target build -t "$image-build" && build -t "$image"; }; then
    tail -60 "$build_log" >&2
    rm -f "$build_log"
    echo "FAIL: podman build" >&2
    exit 1
fi
rm -f "$build_log"
# The images of the previous build, now untagged, would pile up run after run (a layer of the
# build stage per revision): removed, with the layers nothing else uses.
for id in $old_ids; do
    podman image exists "$id" && [ -z "$(podman image inspect --format '{{join .RepoTags ","}}' "$id")" ] \
        && { podman rmi "$id" >/dev/null 2>&1 || true; }
done
say "built $image (rev $rev) in $((SECONDS - t0)) s, $(podman image inspect --format '{{.Size}}' "$image" | awk '{ printf "%d MB", $1 / 1e6 }')"

version="$(podman run --rm --network host "${limits[@]}" --no-healthcheck "$image" --version)"
case "$version" in
    *"(rev $rev)"*) say "--version: $version" ;;
    *) echo "FAIL: --version says \"$version\", not rev $rev" >&2; exit 1 ;;
esac
