#!/usr/bin/env bash
# Stops the DynamoDB Local that start.sh recorded in ENV_FILE and removes its scratch directory.
#   emulator/stop.sh [ENV_FILE]       default ENV_FILE: $TMPDIR/reaper-dynamodb-emulator.env
set -euo pipefail

env_file="${1:-${TMPDIR:-/tmp}/reaper-dynamodb-emulator.env}"
[ -f "$env_file" ] || { echo "stop.sh: no $env_file; nothing to stop" >&2; exit 0; }
pid="$(sed -n 's/^REAPER_DYNAMODB_EMULATOR_PID=//p' "$env_file")"
dir="$(sed -n 's/^REAPER_DYNAMODB_EMULATOR_DIR=//p' "$env_file")"

if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
  kill "$pid"
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
fi
case "$dir" in
  */reaper-dynamodb-local.*) rm -rf "$dir" ;;
esac
rm -f "$env_file"
echo "DynamoDB Local stopped" >&2
