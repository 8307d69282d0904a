#!/usr/bin/env bash
# The whole test suite, from a fresh clone on a fresh machine: installs and starts everything the
# tests need (BusyBox, DynamoDB Local, the wasm32 toolchain for the core's portability check),
# runs formatting, lints, fuzzers, the API fuzzer and every test, and prints how long each stage
# took. Exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
export CARGO_TERM_COLOR=never
# The test command installs Chromium, so the dashboard's browser test must find it, never skip.
export REAPER_REQUIRE_CHROMIUM=1
SCRATCH=$(mktemp -d)
TIMINGS="$SCRATCH/timings"
: > "$TIMINGS"

stage() {
    local name=$1
    shift
    local start=$SECONDS
    echo "==> $name"
    "$@"
    echo "$name $((SECONDS - start))s" >> "$TIMINGS"
    echo "<== $name took $((SECONDS - start))s"
}

cleanup() {
    if [ -d "$SCRATCH/dockerd" ]; then
        shared/reaper-docker/dockerd/stop.sh "$SCRATCH/dockerd" --purge >/dev/null 2>&1 || true
    fi
    if [ -d "$SCRATCH/postgres" ]; then
        shared/reaper-postgres/server/stop.sh "$SCRATCH/postgres" >/dev/null 2>&1 || true
    fi
    if [ -f "$SCRATCH/ddb.env" ]; then
        # Quietly: the summary line must stay the last line of the output.
        shared/reaper-dynamodb/emulator/stop.sh "$SCRATCH/ddb.env" >/dev/null 2>&1 || true
    fi
}
trap cleanup EXIT

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

apt_packages() {
    local missing=()
    for p in "$@"; do
        dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        as_root apt-get update -qq
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
}

system_packages() {
    # busybox: the BusyBox-userland prune/probe tests. docker.io: the Docker provider's tests
    # against a real dockerd (and the container image's smoke test). postgresql-15: the PostgreSQL
    # store's private server. systemd: `systemd-analyze verify` of deploy/'s units. groff-base:
    # rendering `reaper man` in its test. chromium (fonts-liberation for legible screenshots): the
    # dashboard's browser test. The rest: Debian's rustc built for wasm32 and its std source, to
    # prove the core compiles for a Worker.
    apt_packages busybox docker.io postgresql-15 systemd groff-base chromium fonts-liberation rustc-web cargo-web rust-web-src lld-22
    command -v java >/dev/null || { echo "java is required for DynamoDB Local (apt-get install default-jre-headless)"; exit 1; }
    command -v npm >/dev/null || { echo "npm is required for DynamoDB Local"; exit 1; }
}

postgres_server() {
    # A private PostgreSQL (initdb, Unix socket only) for reaper-postgres and the CLI's fleet and
    # crash-point tests; exports REAPER_TEST_POSTGRES_URL. Started before clippy and the test
    # build because reaper-postgres compiles its database tests only when the URL is set.
    eval "$(shared/reaper-postgres/server/start.sh "$SCRATCH/postgres")"
}

infra_lint() {
    # cfn-lint with the SAM translator, and checkov, over the SAM template (pinned, in a venv).
    infra/lint.sh
}

format() {
    cargo fmt --all --check
    # The Worker and the fuzzers are workspaces of their own, outside `--all`.
    (cd handlers/reaper-cloudflare && cargo fmt --all --check)
    (cd shared/reaper-core/fuzz && cargo fmt --all --check)
}

crates() {
    # Every published library crate packages as `cargo publish` would (manifests, file lists).
    scripts/check-crates.sh --no-verify
}

lint() {
    cargo clippy --workspace --all-targets --locked -- -D warnings
}

docs() {
    # The API docs build without a warning (broken links, links to private items, bad HTML).
    RUSTDOCFLAGS=-Dwarnings cargo doc --workspace --no-deps --locked --keep-going
}

build_tests() {
    # Every platform's dependencies too: the metadata tests run `cargo metadata --offline`, which
    # resolves crates no Linux build downloads (Windows-only ones of the terminal crates).
    cargo fetch --locked
    cargo test --workspace --locked --no-run
}

wasm_core() {
    # rustup cannot fetch the wasm32 std here; Debian's rustc-web rebuilds it from source.
    mkdir -p "$(/usr/bin/rustc --print target-libdir --target wasm32-unknown-unknown)"
    PATH=/usr/bin:$PATH RUSTC_BOOTSTRAP=1 CARGO_UNSTABLE_BUILD_STD=std,panic_abort \
        CARGO_TARGET_DIR="$ROOT/target/wasm" \
        /usr/bin/cargo check -p reaper-core --lib --target wasm32-unknown-unknown
}

fuzz() {
    FUZZ_SECONDS=${FUZZ_SECONDS:-15} shared/reaper-core/fuzz/run.sh
}

api_fuzz() {
    MAX_TIME=${API_FUZZ_SECONDS:-60} handlers/reaper-sandboxd/fuzz/schemathesis.sh
}

cloudflare() {
    # The Worker is its own wasm32 workspace: built with Debian's toolchain and tested with
    # node's runner in real workerd (Miniflare) against a real reaper-sandboxd.
    cargo build -p reaper-sandboxd --locked
    handlers/reaper-cloudflare/test.sh
}

docker_daemon() {
    # A private dockerd for the reaper-docker tests (no bridge, no iptables, vfs storage) and a
    # BusyBox image imported offline; exports REAPER_DOCKER_HOST and REAPER_DOCKER_IMAGE.
    eval "$(shared/reaper-docker/dockerd/start.sh "$SCRATCH/dockerd")"
}

emulator() {
    shared/reaper-dynamodb/emulator/start.sh "$SCRATCH/ddb.env"
}

tests() {
    set -a
    # shellcheck disable=SC1091
    . "$SCRATCH/ddb.env"
    set +a
    cargo test --workspace --locked --no-fail-fast 2>&1 | tee -a "$SCRATCH/test.log"
}

deploy_smoke() {
    # The container image on the private dockerd's offline BusyBox base: the demo, status and
    # sweep in it, and sandboxd's authenticated health check.
    deploy/smoke.sh --bin-dir "$ROOT/target/debug"
}

typescript_package() {
    # The TypeScript package: Node 22 and its npm packages from the registry (npm ci), its tests
    # on every backend (SQLite, the DynamoDB Local and PostgreSQL started above, D1 in Miniflare's
    # workerd), then end to end where the reaper's own handlers sweep the app's runs: the Lambda
    # handler under cargo-lambda's emulator, the Worker in workerd. They reuse what earlier
    # stages built: the test build's binaries, the tests stage's cargo-lambda venv
    # (target/venv-lambda) and the cloudflare stage's Worker build.
    export REAPER_LAMBDA_BIN="$ROOT/target/debug/reaper-lambda"
    export REAPER_SANDBOXD_BIN="$ROOT/target/debug/reaper-sandboxd"
    set -a
    # shellcheck disable=SC1091
    . "$SCRATCH/ddb.env"
    set +a
    shared/reaper-tanstack/test.sh 2>&1 | tee -a "$SCRATCH/test.log"
}

vercel_release() {
    # Vercel runs the release binary behind its IPC bridge: test that binary, not only the debug
    # one the workspace tests use.
    set -a
    # shellcheck disable=SC1091
    . "$SCRATCH/ddb.env"
    set +a
    cargo build --release --locked -p reaper-vercel
    REAPER_VERCEL_BIN="$ROOT/target/release/reaper-vercel" \
        cargo test --locked -p reaper-vercel --test ipc_bridge 2>&1 | tee -a "$SCRATCH/test.log"
}

stage "system packages" system_packages
stage "postgres server" postgres_server
stage "format" format
stage "clippy" lint
stage "docs" docs
stage "build tests" build_tests
stage "crates" crates
stage "wasm32 core" wasm_core
stage "fuzz" fuzz
stage "api fuzz" api_fuzz
stage "cloudflare workerd" cloudflare
stage "dynamodb local" emulator
stage "docker daemon" docker_daemon
stage "tests" tests
stage "typescript package" typescript_package
stage "docker smoke" deploy_smoke
stage "vercel release binary" vercel_release
stage "infra lint" infra_lint

echo
echo "Stage timings:"
sed 's/^/  /' "$TIMINGS"
echo "  total ${SECONDS}s"
passed=$(grep -Eo 'test result: [a-zA-Z]+\. [0-9]+ passed' "$SCRATCH/test.log" | awk '{s+=$4} END {print s+0}')
failed=$(grep -Eo '[0-9]+ failed;' "$SCRATCH/test.log" | awk '{s+=$1} END {print s+0}')
echo "reaper: $passed passed, $failed failed"
