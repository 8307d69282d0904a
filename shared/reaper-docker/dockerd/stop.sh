#!/usr/bin/env bash
# Stops the dockerd that start.sh started in STATE_DIR (default /tmp/reaper-dockerd): removes the
# test containers left behind (a failed test's), then ends the daemon by its pid file and waits.
# The data root is kept, so the image is not rebuilt next time; pass --purge to delete it too.
set -euo pipefail

STATE=${1:-/tmp/reaper-dockerd}
SOCK="$STATE/docker.sock"
PIDFILE="$STATE/dockerd.pid"

if [ -S "$SOCK" ]; then
    ids=$(/usr/bin/docker -H "unix://$SOCK" ps -aq --filter label=io.reaper.sandbox 2>/dev/null || true)
    if [ -n "$ids" ]; then
        # shellcheck disable=SC2086
        /usr/bin/docker -H "unix://$SOCK" rm -f $ids >/dev/null 2>&1 || true
    fi
fi
if [ -f "$PIDFILE" ]; then
    pid=$(cat "$PIDFILE")
    if kill "$pid" 2>/dev/null; then
        for _ in $(seq 1 150); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
    fi
fi
if [ "${2:-}" = "--purge" ]; then
    rm -rf "$STATE"
fi
