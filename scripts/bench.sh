#!/usr/bin/env bash
# Every benchmark, outside the test command (their figures are for the README, not verdicts):
# the core's sweep figures (CPU per run, peak memory, one sweep at 1k / 100k / 1M detached runs,
# 100 producing runs behind a 50 ms provider at the defaults, and, with valgrind, instructions
# per run left alone), one SQLite sweep at 1k / 100k / 1M,
# and the journal prune. Each figure is the median of REAPER_BENCH_ROUNDS rounds (default 5)
# with its range. With POSTGRES=1 it also starts a private PostgreSQL (Unix socket) and times one
# sweep there at 1k / 100k / 1M; with DYNAMODB=1 it starts DynamoDB Local and prints the DynamoDB
# request counts (not timed).
#
# Run it on an idle machine: it prints the load average before and after, so a figure measured
# under load says so.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
export REAPER_BENCH_ROUNDS=${REAPER_BENCH_ROUNDS:-5}
SCRATCH=$(mktemp -d)
cleanup() {
    if [ -d "$SCRATCH/postgres" ]; then
        shared/reaper-postgres/server/stop.sh "$SCRATCH/postgres" >/dev/null 2>&1 || true
    fi
    if [ -f "$SCRATCH/ddb.env" ]; then
        shared/reaper-dynamodb/emulator/stop.sh "$SCRATCH/ddb.env" >/dev/null 2>&1 || true
    fi
    rm -rf "$SCRATCH"
}
trap cleanup EXIT

bench() {
    local start=$SECONDS
    echo "==> cargo bench $*"
    cargo bench --quiet "$@"
    echo "<== took $((SECONDS - start))s"
}

echo "load average before: $(cat /proc/loadavg); $(nproc) cores"
bench -p reaper-core --bench sweep
# The one figure no neighbour moves: instructions per run left alone, counted by callgrind as the
# difference between 30 and 10 sweeps of the same 10k producing runs (seeding cancels out).
if command -v valgrind >/dev/null 2>&1; then
    exe=$(cargo bench -p reaper-core --bench sweep --no-run 2>&1 |
        sed -n 's/.*Executable .*(\(.*\))$/\1/p' | head -n 1)
    instructions() {
        valgrind --tool=callgrind --callgrind-out-file=/dev/null "$exe" producing-sweeps "$1" 2>&1 |
            sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
    }
    few=$(instructions 10)
    many=$(instructions 30)
    echo "leave-alone instructions per run (callgrind, 30 minus 10 sweeps of 10k runs): $(((many - few) / 200000))"
else
    echo "leave-alone instructions per run: not counted (no valgrind; apt-get install valgrind)"
fi
bench -p reaper-sqlite --bench scale
bench -p reaper-local --bench prune
if [ "${POSTGRES:-0}" = 1 ]; then
    eval "$(shared/reaper-postgres/server/start.sh "$SCRATCH/postgres")"
    bench -p reaper-postgres --bench scale
fi
if [ "${DYNAMODB:-0}" = 1 ]; then
    shared/reaper-dynamodb/emulator/start.sh "$SCRATCH/ddb.env"
    # shellcheck disable=SC1091
    . "$SCRATCH/ddb.env"
    bench -p reaper-dynamodb --bench requests
fi
echo "load average after: $(cat /proc/loadavg)"
