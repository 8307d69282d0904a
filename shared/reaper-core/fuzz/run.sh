#!/usr/bin/env bash
# Runs every fuzz target of reaper-core for FUZZ_SECONDS (default 20) each.
# Installs cargo-fuzz from crates.io when missing. Uses the nightly toolchain when rustup has one,
# otherwise stable with RUSTC_BOOTSTRAP=1 (cargo-fuzz needs unstable compiler flags).
set -euo pipefail
cd "$(dirname "$0")"

seconds="${FUZZ_SECONDS:-20}"

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

toolchain=()
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    toolchain=(+nightly)
else
    export RUSTC_BOOTSTRAP=1
fi

for target in $(cargo "${toolchain[@]}" fuzz list); do
    echo "fuzzing ${target} for ${seconds}s"
    cargo "${toolchain[@]}" fuzz run "${target}" -- -max_total_time="${seconds}"
done
