#!/usr/bin/env bash
# Packages every library crate the workspace publishes (those with `publish = true`) exactly as
# `cargo publish` would, and builds each package from its own tarball against the others'
# (cargo's multi-package packaging uses a local registry for them, so nothing is uploaded and
# crates.io is not asked for our own crates). Catches path dependencies without a version, files
# a crate needs but does not ship, and a library depending on an unpublished crate.
#
#   scripts/check-crates.sh              # package and verify (builds each crate once)
#   scripts/check-crates.sh --no-verify  # package only: manifests and file lists, in seconds
set -euo pipefail
cd "$(dirname "$0")/.."

# `publish` is null for "any registry" and [] for `publish = false` in cargo's metadata.
mapfile -t crates < <(
    cargo metadata --format-version 1 --no-deps --locked --offline |
        python3 -c '
import json, sys
meta = json.load(sys.stdin)
members = set(meta["workspace_members"])
for p in meta["packages"]:
    if p["id"] in members and p.get("publish") is None:
        print(p["name"])
'
)
if [ ${#crates[@]} -eq 0 ]; then
    echo "check-crates: no crate is published (publish = true); nothing to check" >&2
    exit 1
fi
echo "check-crates: packaging ${#crates[@]} crates: ${crates[*]}"
args=()
for c in "${crates[@]}"; do args+=(-p "$c"); done
# --allow-dirty: the check is about the manifests and the files, not about a clean git status
# (CI checks out a clean tree anyway; a contributor runs this before committing).
cargo package --locked --offline --allow-dirty "${args[@]}" "$@"
echo "check-crates: ${#crates[@]} crates package cleanly"
