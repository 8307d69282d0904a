#!/usr/bin/env bash
# Everything the TypeScript package's tests need, from a fresh clone: Node 22 and every npm
# package from the registry (`npm ci` with the committed lock; Node itself is the `node`
# devDependency), the two Rust binaries the tests drive (`reaper` and the interop crate), the
# TypeScript build, DynamoDB Local (unless REAPER_DYNAMODB_ENDPOINT names a running one) and a
# private PostgreSQL (unless REAPER_TEST_POSTGRES_URL names a running one).
# Needs: npm (any version), cargo, java for DynamoDB Local, Debian's postgresql for PostgreSQL.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$here"
stage() { printf '== %s (%ss)\n' "$1" "$SECONDS"; }

stage "npm ci"
npm ci --no-audit --no-fund --loglevel=error
# The registry's Node 22 first on PATH: node:sqlite, and the same runtime for every step below.
export PATH="$here/node_modules/.bin:$PATH"
node -e 'const [major, minor] = process.versions.node.split(".").map(Number); if (major < 22 || (major === 22 && minor < 13)) { console.error(`test.sh: node ${process.version} lacks node:sqlite; npm ci should have installed node 22`); process.exit(1) }'

stage "cargo build (reaper CLI, interop crate)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}"
(cd "$repo" && cargo build --quiet --locked -p reaper-cli -p reaper-tanstack-interop)
export REAPER_CLI="$CARGO_TARGET_DIR/debug/reaper"
export REAPER_INTEROP="$CARGO_TARGET_DIR/debug/reaper-tanstack-interop"

stage "tsc"
# One compile of src and tests (the publishable `dist` is `npm run build`, run by prepublishOnly).
rm -rf dist-test
tsc -p tsconfig.test.json

cleanup=()
trap 'for c in "${cleanup[@]}"; do eval "$c"; done' EXIT
if [ -z "${REAPER_DYNAMODB_ENDPOINT:-}" ]; then
  stage "DynamoDB Local"
  envfile="$(mktemp "${TMPDIR:-/tmp}/reaper-tanstack-ddb.XXXXXX")"
  "$repo/shared/reaper-dynamodb/emulator/start.sh" "$envfile"
  cleanup+=('"$repo/shared/reaper-dynamodb/emulator/stop.sh" "$envfile" >/dev/null 2>&1 || true; rm -f "$envfile"')
  set -a; . "$envfile"; set +a
fi
if [ -z "${REAPER_TEST_POSTGRES_URL:-}" ]; then
  stage "PostgreSQL"
  pgdir="$(mktemp -d "${TMPDIR:-/tmp}/reaper-tanstack-pg.XXXXXX")"
  cleanup+=('"$repo/shared/reaper-postgres/server/stop.sh" "$pgdir" >/dev/null 2>&1 || true')
  eval "$("$repo/shared/reaper-postgres/server/start.sh" "$pgdir")"
fi

stage "node --test"
# --test-timeout is only a hang guard (10 minutes a test): a stalled test fails, naming itself.
node --disable-warning=ExperimentalWarning --test --test-concurrency=1 --test-timeout=600000 "dist-test/test/*.test.js"
"$here/test-platforms.sh"
stage "done"
