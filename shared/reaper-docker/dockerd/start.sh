#!/usr/bin/env bash
# Starts a private dockerd for the reaper-docker tests and builds their image offline.
#
#   eval "$(shared/reaper-docker/dockerd/start.sh [STATE_DIR])"
#
# Prints `export REAPER_DOCKER_HOST=unix://…` and `export REAPER_DOCKER_IMAGE=…` on stdout
# (everything else goes to stderr). STATE_DIR (default /tmp/reaper-dockerd) holds the socket,
# the pid file, the data and exec roots and the daemon's log; stop.sh STATE_DIR ends it.
#
# The daemon creates no bridge and touches no iptables (--bridge=none --iptables=false
# --ip6tables=false): the test containers run with network `none`. Storage is vfs, which needs
# no overlay support from the kernel. The image `reaper-busybox:test` is a root filesystem made
# of Debian's static BusyBox (from the busybox-static package, unpacked, not installed, so it
# does not replace the `busybox` package other tests use), imported with `docker import`:
# nothing is pulled from a registry.
#
# Needs root, Debian's docker.io (installed here if missing) and apt access for the package.
set -euo pipefail

STATE=${1:-/tmp/reaper-dockerd}
IMAGE=reaper-busybox:test
SOCK="$STATE/docker.sock"
log() { echo "reaper-dockerd: $*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
    log "must run as root (dockerd needs it)"
    exit 1
fi
if ! command -v dockerd >/dev/null || [ ! -x /usr/bin/docker ]; then
    log "installing docker.io"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io >&2
fi
# Debian's client, whatever else is first on PATH.
docker() { /usr/bin/docker -H "unix://$SOCK" "$@"; }

mkdir -p "$STATE"
if [ -S "$SOCK" ] && docker version >/dev/null 2>&1; then
    log "already running at $SOCK"
else
    rm -f "$SOCK" "$STATE/dockerd.pid"
    # setsid: the daemon outlives this script and the shell that ran it.
    setsid dockerd \
        --host "unix://$SOCK" \
        --data-root "$STATE/data" \
        --exec-root "$STATE/exec" \
        --pidfile "$STATE/dockerd.pid" \
        --bridge=none --iptables=false --ip6tables=false \
        --storage-driver=vfs \
        >"$STATE/dockerd.log" 2>&1 < /dev/null &
    for _ in $(seq 1 300); do
        docker version >/dev/null 2>&1 && break
        if ! kill -0 $! 2>/dev/null; then
            log "dockerd exited; its log:"
            tail -n 30 "$STATE/dockerd.log" >&2
            exit 1
        fi
        sleep 0.1
    done
    if ! docker version >/dev/null 2>&1; then
        log "dockerd did not answer on $SOCK within 30 s; its log:"
        tail -n 30 "$STATE/dockerd.log" >&2
        exit 1
    fi
    log "started (pid $(cat "$STATE/dockerd.pid"), log $STATE/dockerd.log)"
fi

if ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
    work=$(mktemp -d)
    chmod 755 "$work" # apt-get download drops privileges to _apt
    trap 'rm -rf "$work"' EXIT
    (cd "$work" && apt-get download busybox-static >&2)
    dpkg-deb -x "$work"/busybox-static_*.deb "$work/pkg"
    root="$work/rootfs"
    mkdir -p "$root/bin" "$root/tmp" "$root/proc" "$root/sys" "$root/dev" "$root/etc" "$root/root"
    chmod 1777 "$root/tmp"
    cp "$work/pkg/bin/busybox" "$root/bin/busybox"
    for applet in $("$root/bin/busybox" --list); do
        [ "$applet" = busybox ] || ln -s busybox "$root/bin/$applet"
    done
    echo 'root:x:0:0:root:/root:/bin/sh' > "$root/etc/passwd"
    echo 'root:x:0:' > "$root/etc/group"
    tar -C "$root" -c . | docker import \
        --change 'ENV PATH=/bin' --change 'WORKDIR /root' - "$IMAGE" >/dev/null
    log "built $IMAGE from Debian's busybox-static"
fi

echo "export REAPER_DOCKER_HOST=unix://$SOCK"
echo "export REAPER_DOCKER_IMAGE=$IMAGE"
