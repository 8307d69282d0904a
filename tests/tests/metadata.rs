//! The workspace's package metadata stays true: the declared `rust-version` covers every locked
//! dependency (so `cargo install` on that toolchain resolves and builds), and every crate inherits
//! the repository's license, links and rust-version instead of declaring its own.
//!
//! Read from `cargo metadata --locked --offline`: the versions cargo itself resolves, nothing
//! guessed.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Command;

use serde_json::Value;

const REPOSITORY: &str = "https://github.com/reaper-sweeper/reaper";

fn metadata() -> Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(root)
        .args(["metadata", "--format-version", "1", "--locked", "--offline"])
        .output()
        .expect("running cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON")
}

fn version(v: &str) -> Vec<u64> {
    v.split('.')
        .map(|p| {
            p.parse()
                .unwrap_or_else(|_| panic!("bad rust-version {v:?}"))
        })
        .collect()
}

fn packages(meta: &Value) -> HashMap<&str, &Value> {
    meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p))
        .collect()
}

fn members(meta: &Value) -> Vec<&str> {
    meta["workspace_members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect()
}

#[test]
fn rust_version_covers_every_locked_dependency_of_every_crate() {
    let meta = metadata();
    let packages = packages(&meta);
    let nodes: HashMap<&str, &Value> = meta["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["id"].as_str().unwrap(), n))
        .collect();
    let mut too_new = BTreeMap::new();
    for member in members(&meta) {
        let pkg = packages[member];
        let name = pkg["name"].as_str().unwrap();
        let declared = pkg["rust_version"]
            .as_str()
            .unwrap_or_else(|| panic!("{name} declares no rust-version"));
        // Everything the crate builds with, dev-dependencies included: its tests must build on
        // the declared toolchain too.
        let mut stack = vec![member];
        let mut seen = std::collections::HashSet::new();
        while let Some(id) = stack.pop() {
            if !seen.insert(id) {
                continue;
            }
            let dep = packages[id];
            if let Some(needs) = dep["rust_version"].as_str() {
                if version(needs) > version(declared) {
                    too_new.insert(
                        format!("{name} -> {} {}", dep["name"], dep["version"]),
                        needs.to_string(),
                    );
                }
            }
            for d in nodes[id]["deps"].as_array().unwrap() {
                stack.push(d["pkg"].as_str().unwrap());
            }
        }
    }
    assert!(
        too_new.is_empty(),
        "these locked dependencies need a newer Rust than the crate declares: raise \
         workspace.package.rust-version in Cargo.toml (or pin the dependency lower): {too_new:#?}"
    );
}

#[test]
fn every_crate_inherits_the_license_repository_and_rust_version() {
    let meta = metadata();
    let packages = packages(&meta);
    let mut wrong = Vec::new();
    let mut rust_versions = std::collections::BTreeSet::new();
    for member in members(&meta) {
        let p = packages[member];
        let name = p["name"].as_str().unwrap();
        if p["license"] != "MIT OR Apache-2.0" {
            wrong.push(format!("{name}: license {}", p["license"]));
        }
        for key in ["repository", "homepage"] {
            if p[key] != REPOSITORY {
                wrong.push(format!("{name}: {key} {}", p[key]));
            }
        }
        if p["description"].as_str().unwrap_or("").is_empty() {
            wrong.push(format!("{name}: no description"));
        }
        rust_versions.insert(p["rust_version"].to_string());
        // A published crate has its own documentation link and no unpublished dependency.
        if p["publish"].is_null() {
            let docs = format!("https://docs.rs/{name}");
            if p["documentation"] != docs.as_str() {
                wrong.push(format!("{name}: documentation {}", p["documentation"]));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "add `license.workspace = true`, `repository.workspace = true`, \
         `homepage.workspace = true`, `rust-version.workspace = true` (and for a published \
         library `documentation = \"https://docs.rs/<name>\"`): {wrong:#?}"
    );
    assert_eq!(
        rust_versions.len(),
        1,
        "every crate inherits one rust-version: {rust_versions:?}"
    );
}

#[test]
fn published_libraries_depend_only_on_published_crates_with_versions() {
    let meta = metadata();
    let packages = packages(&meta);
    let published: std::collections::HashSet<&str> = members(&meta)
        .into_iter()
        .map(|m| packages[m])
        .filter(|p| p["publish"].is_null())
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert!(
        published.contains("reaper-core"),
        "reaper-core is published"
    );
    let mut wrong = Vec::new();
    for member in members(&meta) {
        let p = packages[member];
        let name = p["name"].as_str().unwrap();
        if !published.contains(name) {
            continue;
        }
        for d in p["dependencies"].as_array().unwrap() {
            if d["path"].is_null() {
                continue;
            }
            let dep = d["name"].as_str().unwrap();
            let dev = d["kind"] == "dev";
            // A path dev-dependency without a version is stripped from the published manifest.
            if dev && d["req"] == "*" {
                continue;
            }
            if !published.contains(dep) {
                wrong.push(format!("{name} -> {dep} (not published)"));
            } else if d["req"] == "*" {
                wrong.push(format!("{name} -> {dep} (path without a version)"));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
