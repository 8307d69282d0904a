#!/bin/sh
# Stops the PostgreSQL that start.sh started in <dir> and removes the directory.
set -eu
dir=${1:?usage: stop.sh <dir>}
bin=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}
if [ -f "$dir/data/postmaster.pid" ]; then
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$bin/pg_ctl" -D "$dir/data" -m fast -w -t 120 stop >/dev/null
    else
        "$bin/pg_ctl" -D "$dir/data" -m fast -w -t 120 stop >/dev/null
    fi
fi
rm -rf "$dir"
