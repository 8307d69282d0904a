#!/bin/sh
# Stops the PostgreSQL that start.sh started for <dir> and removes its files and <dir>.
set -eu
dir=${1:?usage: stop.sh <dir>}
cluster=$dir
[ -f "$dir/cluster" ] && cluster=$(cat "$dir/cluster")
bin=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}
if [ -f "$cluster/data/postmaster.pid" ]; then
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$bin/pg_ctl" -D "$cluster/data" -m fast -w -t 120 stop >/dev/null
    else
        "$bin/pg_ctl" -D "$cluster/data" -m fast -w -t 120 stop >/dev/null
    fi
fi
rm -rf "$cluster" "$dir"
