#!/usr/bin/env bash
# Runs the cargo-fuzz targets (fuzz/fuzz_targets/) for a bounded time each and prints the
# executions per target and in all. A crash stops the run with its reproducer under
# fuzz/artifacts/TARGET/ and exit code 1.
#
# Usage: fuzz/run.sh [--seconds N] [--jobs N] [TARGET...]
#   --seconds  time per target (default 60; ./scripts/test runs each for 3)
#   --jobs     parallel fuzzing processes per target (default 1)
#   TARGET     image_header superblock checkpoint oob nbd_connection (default: all)
#
# Builds with the machine's stable toolchain: cargo-fuzz needs unstable compiler flags
# (sanitizer coverage, AddressSanitizer), which RUSTC_BOOTSTRAP=1 allows on stable. Installs
# cargo-fuzz from crates.io (cargo install) when it is missing. Seeds: fuzz/corpus/TARGET (in
# the repository; fuzz/make_seeds.py remakes them); what a run finds goes to a scratch copy.
set -euo pipefail
FUZZ="$(cd "$(dirname "$0")" && pwd)"
SECONDS_PER=60
JOBS=1
TARGETS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) SECONDS_PER="$2"; shift ;;
        --jobs) JOBS="$2"; shift ;;
        -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
        -*) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
        *) TARGETS+=("$1") ;;
    esac
    shift
done
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(image_header superblock checkpoint oob frame_table nbd_connection)

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz/run.sh: installing cargo-fuzz from crates.io" >&2
    cargo install --locked cargo-fuzz --version 0.13.2 >&2 ||
        { echo "fuzz/run.sh: cannot install cargo-fuzz (cargo install cargo-fuzz)" >&2; exit 1; }
fi
export RUSTC_BOOTSTRAP=1
# Apart from the project's own build: other compiler flags.
if [ -n "${CARGO_TARGET_DIR:-}" ]; then
    export CARGO_TARGET_DIR="$CARGO_TARGET_DIR/fuzz"
else
    export CARGO_TARGET_DIR="$FUZZ/target"
fi
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

cd "$FUZZ"
total=0
printf '%-16s %12s %10s %8s\n' target executions exec/s seconds
for t in "${TARGETS[@]}"; do
    [ -f "fuzz_targets/$t.rs" ] || { echo "no target $t" >&2; exit 2; }
    # New inputs go to the scratch copy; the seeds in the repository stay as they are.
    mkdir -p "$WORK/$t"
    cp corpus/"$t"/* "$WORK/$t/"
    log="$WORK/$t.log"
    if ! cargo fuzz run --release "$t" "$WORK/$t" -- -max_total_time="$SECONDS_PER" \
        -jobs="$JOBS" -workers="$JOBS" -print_final_stats=1 -rss_limit_mb=4096 >"$log" 2>&1; then
        cat "$log" >&2
        ls fuzz/artifacts/"$t" artifacts/"$t" 2>/dev/null >&2 || true
        echo "fuzz/run.sh: target $t failed (reproducer above, under fuzz/artifacts/$t/)" >&2
        exit 1
    fi
    # With -jobs the statistics are in fuzz-N.log files of the working directory.
    execs=$(cat "$log" fuzz-*.log 2>/dev/null | awk '/stat::number_of_executed_units/ { s += $NF } END { print s + 0 }')
    rm -f fuzz-*.log
    total=$((total + execs))
    printf '%-16s %12d %10d %8d\n' "$t" "$execs" "$((execs / SECONDS_PER))" "$SECONDS_PER"
done
printf '%-16s %12d\n' all "$total"
