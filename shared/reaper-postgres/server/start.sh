#!/bin/sh
# Starts a private PostgreSQL for the tests: a cluster initialised in <dir>/data (as root: in a
# directory of its own under /tmp that <dir>/cluster names), listening on a Unix socket beside it
# only (no TCP port, so nothing to collide with and nothing reachable from the network), and
# prints the line to put the tests onto it:
#
#   eval "$(shared/reaper-postgres/server/start.sh /tmp/reaper-pg)"
#   cargo test -p reaper-postgres
#   shared/reaper-postgres/server/stop.sh /tmp/reaper-pg
#
# Needs Debian's postgresql package (apt-get install postgresql-15, or any version from 13 up:
# the newest under /usr/lib/postgresql is used; PG_BIN=<dir> picks another). As root it runs the
# server as the `postgres` user the package creates, since PostgreSQL refuses to run as root.
# Authentication is `trust`: only for a test cluster on a socket in a private directory.
set -eu
dir=${1:?usage: start.sh <dir>}
bin=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}
if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
    echo "start.sh: no PostgreSQL server found under /usr/lib/postgresql: install it with \`apt-get install -y postgresql-15\` or set PG_BIN to the directory holding initdb and pg_ctl" >&2
    exit 1
fi
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
if [ "$(id -u)" = 0 ]; then
    # The server runs as `postgres`, which may not be able to reach <dir> (a `mktemp -d` is
    # private to root): the cluster lives in a directory of its own under /tmp that it owns,
    # recorded in <dir>/cluster for stop.sh.
    if [ ! -f "$dir/cluster" ]; then
        cluster=$(mktemp -d /tmp/reaper-pg.XXXXXX)
        chown postgres "$cluster"
        chmod 755 "$cluster"
        echo "$cluster" >"$dir/cluster"
    fi
    cluster=$(cat "$dir/cluster")
    run() { runuser -u postgres -- "$@"; }
else
    cluster=$dir
    run() { "$@"; }
fi
if [ ! -f "$cluster/data/PG_VERSION" ]; then
    run "$bin/initdb" -D "$cluster/data" -U postgres --auth=trust --no-sync -E UTF8 --locale=C.UTF-8 \
        >"$cluster/initdb.log" 2>&1 || { cat "$cluster/initdb.log" >&2; exit 1; }
fi
# fsync off: a test cluster's durability against power loss is not what the tests check (the
# crash tests kill the reaper, never the server).
if run "$bin/pg_ctl" -D "$cluster/data" status >/dev/null 2>&1; then
    : # already running (start.sh run twice): just print the URL again
elif ! run "$bin/pg_ctl" -D "$cluster/data" -l "$cluster/server.log" -w -t 300 -o \
    "-c listen_addresses='' -c unix_socket_directories='$cluster' -c fsync=off -c max_connections=300" \
    start >/dev/null; then
    cat "$cluster/server.log" >&2
    exit 1
fi
socket=$(printf '%s' "$cluster" | sed 's,%,%25,g; s,/,%2F,g')
echo "export REAPER_TEST_POSTGRES_URL='postgres://postgres@$socket/postgres'"
