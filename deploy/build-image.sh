#!/usr/bin/env bash
# Builds the reaper container image (deploy/Dockerfile) from release binaries.
#
#   deploy/build-image.sh [--base IMAGE] [--tag TAG] [--bin-dir DIR]
#
# --base    the image to build on (default busybox:1.37; any image with `sh`)
# --tag     the image's name (default reaper:<workspace version>)
# --bin-dir take `reaper` and `reaper-sandboxd` from DIR instead of building them with
#           `cargo build --release --locked`
#
# Uses the `docker` client as configured (DOCKER_HOST and so on). Prints the tag on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."

base=busybox:1.37
tag=
bin_dir=
while [ $# -gt 0 ]; do
    case $1 in
        --base) base=$2; shift 2 ;;
        --tag) tag=$2; shift 2 ;;
        --bin-dir) bin_dir=$2; shift 2 ;;
        *) echo "build-image: unknown argument $1 (see the header of $0)" >&2; exit 1 ;;
    esac
done
if [ -z "$tag" ]; then
    version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
    tag="reaper:$version"
fi
if [ -z "$bin_dir" ]; then
    cargo build --release --locked -p reaper-cli -p reaper-sandboxd >&2
    bin_dir="${CARGO_TARGET_DIR:-target}/release"
fi

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/rootfs/usr/local/bin"
for bin in reaper reaper-sandboxd; do
    [ -x "$bin_dir/$bin" ] || { echo "build-image: no $bin in $bin_dir" >&2; exit 1; }
    cp "$bin_dir/$bin" "$ctx/rootfs/usr/local/bin/$bin"
    # The libraries the binary loads, at the paths it loads them from (copied, not linked).
    for lib in $(ldd "$bin_dir/$bin" | grep -o '/[^ ]*'); do
        mkdir -p "$ctx/rootfs$(dirname "$lib")"
        cp -L "$lib" "$ctx/rootfs$lib"
    done
done
cp deploy/Dockerfile "$ctx/Dockerfile"
# The classic builder: it needs no BuildKit plugin, which a plain docker.io does not have.
DOCKER_BUILDKIT=0 docker build --quiet --build-arg "BASE=$base" --tag "$tag" "$ctx" >&2
echo "$tag"
