# Part 3 of the image check: the built image run as the chart runs it, by the e2e test
# `image::the_image_runs_as_the_chart_runs_it` (server/tests/e2e/image.rs): ignored in the
# suite's own runs, run here against the image just built. Sourced by scripts/check-image.sh
# after scripts/image/build.sh.

BROWSERPOOL_TEST_IMAGE="$image" cargo test -p browserpool-server --locked --test e2e -- \
    --ignored --exact image::the_image_runs_as_the_chart_runs_it --nocapture --test-threads=1
say "image check passed in $((SECONDS - started)) s"
