#!/usr/bin/env bash
# Fuzzes the running daemon from its OpenAPI document with schemathesis (PyPI).
#
# Builds reaper-sandboxd, starts it on a free loopback port with a random token, runs
# `schemathesis run` against openapi.json (bounded: MAX_EXAMPLES cases per operation and phase,
# MAX_TIME seconds in all), and fails on any 5xx, any answer off the document, a crash, or a
# daemon that no longer answers or does not stop cleanly afterwards. Sandboxes get an empty PATH
# (shell builtins only), so generated commands cannot run programs on this machine, and exec
# timeouts are capped at 5 s (schemathesis warns that most generated exec requests are refused:
# their timeoutMs is over that cap, a documented 400).
#
# Environment: MAX_EXAMPLES (default 30), MAX_TIME (default 120), FUZZ_VENV (default
# ${TMPDIR:-/tmp}/reaper-sandboxd-fuzz-venv), CARGO_TARGET_DIR, CHECKS (schemathesis --checks).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
schema="$here/../openapi.json"
max_examples="${MAX_EXAMPLES:-30}"
max_time="${MAX_TIME:-120}"
venv="${FUZZ_VENV:-${TMPDIR:-/tmp}/reaper-sandboxd-fuzz-venv}"
schemathesis_version="4.32.5"
checks="${CHECKS:-not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,response_headers_conformance,negative_data_rejection,ignored_auth,unsupported_method,use_after_free,ensure_resource_availability}"

echo "== building reaper-sandboxd"
(cd "$repo" && cargo build --quiet -p reaper-sandboxd)
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
bin="$target_dir/debug/reaper-sandboxd"

if [ ! -x "$venv/bin/schemathesis" ] || ! "$venv/bin/schemathesis" --version | grep -q "$schemathesis_version"; then
  echo "== installing schemathesis $schemathesis_version into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$schemathesis_version"
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/reaper-sandboxd-fuzz.XXXXXX")"
mkdir "$work/empty-bin"
token="fuzz-$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
daemon_pid=""

cleanup() {
  if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
    kill -KILL "$daemon_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

echo "== starting the daemon"
REAPER_SANDBOXD_TOKEN="$token" RUST_LOG=warn "$bin" \
  --root "$work/root" --listen 127.0.0.1:0 \
  --sandbox-path "$work/empty-bin" --max-exec-timeout-ms 5000 \
  >"$work/stdout" 2>"$work/daemon.log" &
daemon_pid=$!

# Wait for the address line (bounded; the daemon prints it once it is listening).
url=""
for _ in $(seq 1 300); do
  if read -r line <"$work/stdout" 2>/dev/null && [ -n "$line" ]; then
    url="${line#listening on }"
    break
  fi
  if ! kill -0 "$daemon_pid" 2>/dev/null; then
    echo "the daemon exited before listening:" >&2
    cat "$work/daemon.log" >&2
    exit 1
  fi
  sleep 0.1
done
[ -n "$url" ] || { echo "the daemon printed no address within 30 s" >&2; exit 1; }
echo "   listening on $url"

echo "== schemathesis run (max $max_examples examples per operation, $max_time s in all)"
status=0
"$venv/bin/schemathesis" run "$schema" \
  --url "$url" \
  --header "Authorization: Bearer $token" \
  --checks "$checks" \
  --max-examples "$max_examples" \
  --max-time "$max_time" \
  --request-timeout 15 \
  --seed "${SEED:-$RANDOM}" \
  --workers 1 \
  --no-color || status=$?

echo "== after the run"
if ! kill -0 "$daemon_pid" 2>/dev/null; then
  echo "the daemon died during the fuzz run:" >&2
  cat "$work/daemon.log" >&2
  exit 1
fi
if grep -q "panicked" "$work/daemon.log"; then
  echo "the daemon panicked during the fuzz run:" >&2
  cat "$work/daemon.log" >&2
  exit 1
fi
health="$(python3 -c 'import sys,urllib.request;print(urllib.request.urlopen(sys.argv[1]+"/v1/healthz",timeout=10).status)' "$url")"
[ "$health" = "200" ] || { echo "the daemon no longer answers its health check ($health)" >&2; exit 1; }
kill -TERM "$daemon_pid"
stop=0
wait "$daemon_pid" || stop=$?
daemon_pid=""
if [ "$stop" -ne 0 ]; then
  echo "the daemon did not stop cleanly on SIGTERM (exit $stop):" >&2
  cat "$work/daemon.log" >&2
  exit 1
fi
if [ "$status" -ne 0 ]; then
  echo "schemathesis found failures (exit $status)" >&2
  exit "$status"
fi
echo "fuzz: no 5xx, no crash, every answer as documented"
