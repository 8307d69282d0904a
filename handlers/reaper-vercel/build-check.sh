#!/usr/bin/env bash
# `vercel build` offline, the way a deploy would build this function, and checks on its output:
#
#   1. vercel.json passes the Vercel CLI's own config validator;
#   2. `vercel build` (npm vercel@58.10.0, cargo-zigbuild 0.24.1 from PyPI) succeeds in a temporary
#      copy of the working tree, with a hand-written .vercel/project.json (never committed);
#   3. the output has the cron, the function (Rust executable, maxDuration) and, as static
#      content, only public/robots.txt: no source file is published;
#   4. tests/ipc_bridge.rs passes against the built release executable.
#
# Needs node + npm, python3, and DynamoDB Local for step 4 (REAPER_DYNAMODB_ENDPOINT exported, see
# the README). Tools are installed once under $REAPER_VERCEL_TOOLS (default
# $TMPDIR/reaper-vercel-tools); the release build is cached in $REAPER_VERCEL_TARGET (default
# $TMPDIR/reaper-vercel-target) so a second run only relinks.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(git -C "$here" rev-parse --show-toplevel)"
tmp_root="${TMPDIR:-/tmp}"
tools="${REAPER_VERCEL_TOOLS:-$tmp_root/reaper-vercel-tools}"
target="${REAPER_VERCEL_TARGET:-$tmp_root/reaper-vercel-target}"
vercel_version="58.10.0"
zigbuild_version="0.24.1"

fail() { echo "build-check: $*" >&2; exit 1; }
step() { echo "build-check: $*" >&2; }
elapsed() { echo "$(( $(date +%s) - $1 ))s"; }

[[ -n "${REAPER_DYNAMODB_ENDPOINT:-${AWS_ENDPOINT_URL_DYNAMODB:-}}" ]] ||
  fail "REAPER_DYNAMODB_ENDPOINT is not set: start DynamoDB Local first (shared/reaper-dynamodb/emulator/start.sh, see the README)"
command -v node >/dev/null || fail "node not found"
command -v npm >/dev/null || fail "npm not found"
command -v python3 >/dev/null || fail "python3 not found"

t0=$(date +%s)
mkdir -p "$tools"
if [[ "$(node -p "try{require('$tools/node_modules/vercel/package.json').version}catch(e){''}")" != "$vercel_version" ]]; then
  step "installing vercel@$vercel_version into $tools (versions 61 and newer do not install here)"
  [[ -f "$tools/package.json" ]] || echo '{"private":true}' >"$tools/package.json"
  npm install --prefix "$tools" --no-audit --no-fund --loglevel=error "vercel@$vercel_version" >&2
fi
if ! "$tools/venv/bin/cargo-zigbuild" --version 2>/dev/null | grep -q "$zigbuild_version"; then
  step "installing cargo-zigbuild==$zigbuild_version into $tools/venv"
  python3 -m venv "$tools/venv"
  "$tools/venv/bin/pip" install --quiet "cargo-zigbuild==$zigbuild_version"
fi
step "tools ready ($(elapsed "$t0"))"

# 1. The CLI validates vercel.json with this function (it is not exported from the package's
#    entry point, so it is imported from the chunk that defines it).
chunk="$(grep -l "^var cronsSchema" "$tools"/node_modules/vercel/dist/chunks/*.js | head -n 1)"
[[ -n "$chunk" ]] || fail "cannot find the Vercel CLI's config validator in vercel@$vercel_version"
node --input-type=module - "$chunk" "$here/vercel.json" <<'JS' || fail "vercel.json is invalid"
import { readFileSync } from "node:fs";
const [chunk, file] = process.argv.slice(2);
const { validateConfig } = await import(chunk);
const error = validateConfig(JSON.parse(readFileSync(file, "utf8")));
if (error) { console.error(error.message); process.exit(1); }
console.error("build-check: vercel.json passes the Vercel CLI's validator");
JS

# 2. A copy of the working tree (tracked and untracked, not ignored): what a push would deploy,
#    without touching this checkout (no .vercel/ appears in it).
work="$(mktemp -d "$tmp_root/reaper-vercel-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
(cd "$repo" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$work")
project="$work/handlers/reaper-vercel"
mkdir -p "$project/.vercel"
echo '{"projectId":"prj_local","orgId":"team_local","settings":{"framework":null}}' >"$project/.vercel/project.json"

t1=$(date +%s)
step "vercel build in $project (release build with cargo zigbuild; target dir $target)"
(
  cd "$project"
  PATH="$tools/venv/bin:$PATH" CARGO_TARGET_DIR="$target" VERCEL_TELEMETRY_DISABLED=1 CI=1 \
    "$tools/node_modules/.bin/vercel" build --yes
) >"$work/build.log" 2>&1 || { cat "$work/build.log" >&2; fail "vercel build failed"; }
build_time="$(elapsed "$t1")"
step "vercel build succeeded in $build_time"

# 3. The output.
out="$project/.vercel/output"
exe="$(python3 - "$out" "$here/vercel.json" "$project" <<'PY'
import json, os, sys
out, vercel_json, project = sys.argv[1:]
expected = json.load(open(vercel_json))
config = json.load(open(os.path.join(out, "config.json")))
assert config.get("crons") == expected["crons"], f"crons in the output: {config.get('crons')}"
func = os.path.join(out, "functions/api/reap.func/.vc-config.json")
vc = json.load(open(func))
assert vc["runtime"] == "executable" and vc["runtimeLanguage"] == "rust", vc
want = expected["functions"]["api/reap.rs"]["maxDuration"]
assert vc["maxDuration"] == want, f"maxDuration {vc['maxDuration']} != {want}"
rel = vc["filePathMap"][vc["handler"]]
exe = os.path.normpath(os.path.join(project, rel))
assert os.path.isfile(exe) and os.access(exe, os.X_OK), f"no executable at {exe}"
static = []
for root, _, files in os.walk(os.path.join(out, "static")):
    static += [os.path.relpath(os.path.join(root, f), os.path.join(out, "static")) for f in files]
assert static == ["robots.txt"], f"static output must be only robots.txt, found {sorted(static)}"
print(exe)
PY
)" || fail "the build output is not as expected"
step "output: the cron, api/reap.func (maxDuration, rust executable), static = robots.txt only"
step "executable: $exe ($(du -h "$exe" | cut -f1))"

# 4. The release executable under the emulated production IPC bridge.
t2=$(date +%s)
(cd "$repo" && REAPER_VERCEL_BIN="$exe" cargo test -p reaper-vercel --test ipc_bridge) >&2 ||
  fail "the IPC bridge tests failed against the built executable"
step "IPC bridge tests passed against the release executable ($(elapsed "$t2"))"
step "done in $(elapsed "$t0") (vercel build $build_time)"
