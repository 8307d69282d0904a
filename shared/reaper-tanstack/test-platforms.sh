#!/usr/bin/env bash
# The platform end-to-end tests (test/platforms/): the app's runs swept by the reaper's serverless
# handlers themselves, not by the CLI or the core. Called by test.sh once its own tests passed
# (Node 22 first on PATH, dist-test compiled, DynamoDB Local up); runs alone given the same:
#   PATH=node_modules/.bin:$PATH REAPER_DYNAMODB_ENDPOINT=http://127.0.0.1:PORT ./test-platforms.sh
# Builds `reaper-lambda` and `reaper-sandboxd` (debug; already built when the workspace's tests
# were) and takes cargo-lambda 1.9.2 (the Lambda runtime emulator) from the virtualenv the
# Lambda handler's own tests fill (`target/venv-lambda`, REAPER_LAMBDA_VENV), installing it from
# PyPI there when missing. Needs: cargo, python3.
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

stage "cargo build (reaper-lambda, reaper-sandboxd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}"
(cd "$repo" && cargo build --quiet --locked -p reaper-lambda -p reaper-sandboxd)
export REAPER_LAMBDA_BIN="$CARGO_TARGET_DIR/debug/reaper-lambda"
export REAPER_SANDBOXD_BIN="$CARGO_TARGET_DIR/debug/reaper-sandboxd"

stage "cargo-lambda $cargo_lambda_version"
venv="${REAPER_LAMBDA_VENV:-$repo/target/venv-lambda}"
if ! "$venv/bin/cargo-lambda" lambda --version 2>/dev/null | grep -qF "$cargo_lambda_version"; then
  [ -x "$venv/bin/pip" ] || python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet "cargo-lambda==$cargo_lambda_version"
fi
export REAPER_CARGO_LAMBDA="$venv/bin/cargo-lambda"

stage "node --test (platforms)"
node --disable-warning=ExperimentalWarning --test --test-concurrency=1 "dist-test/test/platforms/*.test.js"
stage "done"
