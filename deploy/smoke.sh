#!/usr/bin/env bash
# Builds the image on an offline base and proves both binaries work in it: the reaper's demo
# (real agents in real local sandboxes, one sweep, the prune), `reaper status` on the demo's
# database, and reaper-sandboxd answering its authenticated health check.
#
#   eval "$(shared/reaper-docker/dockerd/start.sh DIR)"   # the test command's private dockerd
#   deploy/smoke.sh [--bin-dir DIR]
#
# Needs REAPER_DOCKER_HOST and REAPER_DOCKER_IMAGE (the offline BusyBox base) from start.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${REAPER_DOCKER_HOST:?start the private dockerd first: eval \"\$(shared/reaper-docker/dockerd/start.sh DIR)\"}"
: "${REAPER_DOCKER_IMAGE:?start the private dockerd first}"
export DOCKER_HOST=$REAPER_DOCKER_HOST
tag=reaper:smoke-$$
fail() { echo "deploy smoke: $*" >&2; exit 1; }
trap 'docker image rm -f "$tag" >/dev/null 2>&1 || true' EXIT

DOCKER_BUILDKIT=0 deploy/build-image.sh --base "$REAPER_DOCKER_IMAGE" --tag "$tag" "$@" >/dev/null
# The private dockerd has no bridge: every container runs without a network.
run() { docker run --rm --network none "$@"; }

run "$tag" --version | grep -q '^reaper ' || fail "reaper --version"
# The image's default user, working directory and environment: the demo, then the commands the
# README runs after it, on the demo's files.
out=$(run --entrypoint sh "$tag" -c '
    set -e
    reaper demo
    export REAPER_DB=.reaper-demo/reaper.db REAPER_SANDBOXES=.reaper-demo/sandboxes
    reaper status
    reaper sweep --detached-ttl 30m
    id -u') || fail "the demo and status in the container failed: $out"
echo "$out" | grep -q 'no demo process is left running' || fail "no demo cleanup line: $out"
echo "$out" | grep -q 'pending 0, leaked 0' || fail "status after the demo: $out"
[ "$(echo "$out" | tail -n 1)" = 65534 ] || fail "the container runs as $(echo "$out" | tail -n 1), not 65534"

# The daemon: its one stdout line says where it listens; then its health check, and a sandbox
# created with the token and refused without it.
out=$(run -e REAPER_SANDBOXD_TOKEN=smoke-token-0123456789 --entrypoint sh "$tag" -c '
    set -e
    reaper-sandboxd --root /var/lib/reaper-sandboxd --listen 127.0.0.1:0 > /tmp/out &
    # Wait for its "listening on" line; the 60 s bound is only a hang guard.
    i=0
    until grep -q "listening on" /tmp/out; do
        i=$((i + 1)); [ $i -lt 600 ] || { echo "no listening line"; exit 1; }
        sleep 0.1
    done
    url=$(sed -n "s/^listening on //p" /tmp/out)
    wget -q -O - "$url/v1/healthz"
    echo
    wget -q -O - --post-data "" "$url/v1/sandboxes" && echo "UNAUTHENTICATED CREATE" || echo "refused without the token"
    wget -q -O - --post-data "" --header "Authorization: Bearer $REAPER_SANDBOXD_TOKEN" "$url/v1/sandboxes"
    echo
    kill %1') || fail "reaper-sandboxd in the container failed: $out"
echo "$out" | grep -q '"status":"ok"' || fail "healthz: $out"
if echo "$out" | grep -q 'UNAUTHENTICATED'; then fail "a sandbox was created without the token: $out"; fi
echo "$out" | grep -q 'refused without the token' || fail "create without a token: $out"
echo "$out" | grep -q '"id":"' || fail "create with the token: $out"
echo "deploy smoke: the image runs the reaper's demo and status, and reaper-sandboxd, as 65534"
