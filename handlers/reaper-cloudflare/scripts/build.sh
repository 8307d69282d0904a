#!/usr/bin/env bash
# Builds the Worker to build/ (index.js + index_bg.wasm) for wasm32-unknown-unknown with Debian's
# rustc-web 1.96 and its std source (rustup cannot fetch a wasm32 std here), then prints the
# wasm's size raw and gzipped.
#
#   scripts/build.sh                 the deployable build
#   scripts/build.sh --test-hooks    the test build (adds the test-only routes)
#
# Needs: rustc-web, cargo-web, rust-web-src, lld-22 (Debian), worker-build and wasm-bindgen-cli in
# $CARGO_HOME/bin (test.sh installs them), node_modules (npm ci) for esbuild.
set -euo pipefail
cd "$(dirname "$0")/.."

features=()
if [[ "${1:-}" == "--test-hooks" ]]; then
  features=(--features test-hooks)
fi

cargo_home="${CARGO_HOME:-$HOME/.cargo}"
# worker-build runs plain `cargo`: Debian's 1.96 must win over rustup's proxy, whose toolchain
# has no wasm32 std and a different version from the std source.
export PATH="/usr/bin:$PATH"
export RUSTC_BOOTSTRAP=1
export CARGO_UNSTABLE_BUILD_STD=std,panic_abort
export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER=/usr/lib/llvm-22/bin/wasm-ld
# Never download: use the pinned local tools.
export WASM_BINDGEN_BIN="$cargo_home/bin/wasm-bindgen"
export ESBUILD_BIN="$PWD/node_modules/@esbuild/linux-x64/bin/esbuild"
# worker-build checks that the target's std directory exists, though build-std never uses it.
mkdir -p "$(/usr/bin/rustc --print target-libdir --target wasm32-unknown-unknown)"

"$cargo_home/bin/worker-build" --release --no-opt "${features[@]}"

wasm=build/index_bg.wasm
raw=$(stat -c %s "$wasm")
gz=$(gzip -9 -c "$wasm" | wc -c)
echo "wasm size: $raw bytes raw, $gz bytes gzipped ($wasm${features:+, test hooks})"
