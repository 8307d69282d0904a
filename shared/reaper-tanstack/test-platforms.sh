#!/usr/bin/env bash
# The platform end-to-end tests (test/platforms/): the app's runs swept by the reaper's serverless
# handlers themselves (the Lambda handler on DynamoDB Local, the Worker in workerd on D1), not by
# the CLI or the core. Called by test.sh once its own tests passed (Node 22 first on PATH,
# dist-test compiled, DynamoDB Local up); runs alone given the same:
#   PATH=node_modules/.bin:$PATH REAPER_DYNAMODB_ENDPOINT=http://127.0.0.1:PORT ./test-platforms.sh
# Uses REAPER_LAMBDA_BIN and REAPER_SANDBOXD_BIN when both are set (CI passes the ones its
# workspace test build made), else builds them (debug). Takes cargo-lambda 1.9.2 (the Lambda
# runtime emulator) from the virtualenv the Lambda handler's own tests fill (`target/venv-lambda`,
# REAPER_LAMBDA_VENV), installing it from PyPI there when missing. Needs: cargo, python3.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$here"
stage() { printf '== platforms: %s (%ss)\n' "$1" "$SECONDS"; }
cargo_lambda_version=1.9.2

export PATH="$here/node_modules/.bin:$PATH"
: "${REAPER_DYNAMODB_ENDPOINT:?DynamoDB Local is not running: run shared/reaper-tanstack/test.sh, which starts it}"
if [ ! -d dist-test/test/platforms ]; then
  echo "test-platforms.sh: dist-test/test/platforms is missing: run test.sh (or tsc -p tsconfig.test.json) first" >&2
  exit 2
fi

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}"
if [ -n "${REAPER_LAMBDA_BIN:-}" ] && [ -n "${REAPER_SANDBOXD_BIN:-}" ]; then
  # The caller built them (CI: the workspace's test build did); a `cargo build -p` here would
  # resolve features differently and rebuild shared crates for nothing.
  stage "binaries given: $REAPER_LAMBDA_BIN, $REAPER_SANDBOXD_BIN"
  for bin in "$REAPER_LAMBDA_BIN" "$REAPER_SANDBOXD_BIN"; do
    [ -x "$bin" ] || { echo "test-platforms.sh: $bin is not an executable; build it or unset the variable" >&2; exit 2; }
  done
else
  stage "cargo build (reaper-lambda, reaper-sandboxd)"
  (cd "$repo" && cargo build --quiet --locked -p reaper-lambda -p reaper-sandboxd)
  export REAPER_LAMBDA_BIN="$CARGO_TARGET_DIR/debug/reaper-lambda"
  export REAPER_SANDBOXD_BIN="$CARGO_TARGET_DIR/debug/reaper-sandboxd"
fi

stage "cargo-lambda $cargo_lambda_version"
venv="${REAPER_LAMBDA_VENV:-$repo/target/venv-lambda}"
if ! "$venv/bin/cargo-lambda" lambda --version 2>/dev/null | grep -qF "$cargo_lambda_version"; then
  [ -x "$venv/bin/pip" ] || python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet "cargo-lambda==$cargo_lambda_version"
fi
export REAPER_CARGO_LAMBDA="$venv/bin/cargo-lambda"

# The reaper Worker's build (index.js + its wasm) that workerd runs: handlers/reaper-cloudflare's
# test.sh leaves it in build/ (CI's cloudflare stage runs before this); REAPER_WORKER_BUILD
# overrides. Building it needs the wasm32 toolchain that script sets up, so it is not built here.
export REAPER_WORKER_BUILD="${REAPER_WORKER_BUILD:-$repo/handlers/reaper-cloudflare/build}"
if [ ! -f "$REAPER_WORKER_BUILD/index.js" ]; then
  echo "test-platforms.sh: no Worker build in $REAPER_WORKER_BUILD: run handlers/reaper-cloudflare/test.sh" \
    "(or its scripts/build.sh --test-hooks with REAPER_WASM_TOOLCHAIN=debian) first" >&2
  exit 2
fi

stage "node --test (platforms)"
node --disable-warning=ExperimentalWarning --test --test-concurrency=1 --test-timeout=600000 "dist-test/test/platforms/*.test.js"
stage "done"
