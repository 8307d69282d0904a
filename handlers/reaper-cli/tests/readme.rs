//! The root README works word for word. Its shell blocks marked ```` ```sh ```` (the ones meant
//! to run on a developer's machine) run in order, as one shell session, in a fresh directory,
//! with `cargo` standing in only for what it would build: `cargo run -p reaper-cli -- ARGS` runs
//! the `reaper` these tests built, and `cargo install --locked --path handlers/reaper-cli` puts
//! that binary on `PATH` (nothing else does, so a README that forgets the install line fails).
//! Blocks marked ```` ```sh no-run ```` (deploys, root, the whole test suite) are only checked
//! to be marked. Every relative link in the repository's Markdown must point at a file in it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap()
        .to_path_buf()
}

/// The fenced blocks of `markdown`: (info string, body).
fn fenced_blocks(markdown: &str) -> Vec<(String, String)> {
    let mut blocks = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in markdown.lines() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(info)) => open = Some((info.trim().to_string(), String::new())),
            (Some(_), Some(rest)) if rest.trim().is_empty() => blocks.push(open.take().unwrap()),
            (Some((_, body)), _) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "an unclosed code fence");
    blocks
}

const CARGO_STAND_IN: &str = r#"#!/bin/sh
# Stands in for cargo in the README test: runs what cargo would have built.
set -eu
case "$*" in
  "run -p reaper-cli -- "*) shift 4; exec "$README_REAPER" "$@" ;;
  "install --locked --path handlers/reaper-cli")
    test -f "$README_REPO/handlers/reaper-cli/Cargo.toml"
    ln -sf "$README_REAPER" "$README_INSTALL/reaper"
    echo "  Installed $README_INSTALL/reaper (stand-in)" >&2 ;;
  *) echo "the README test has no stand-in for: cargo $*" >&2; exit 97 ;;
esac
"#;

#[test]
fn the_readmes_shell_blocks_run_word_for_word_in_a_fresh_directory() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let blocks = fenced_blocks(&readme);
    let mut script = String::from("set -eux\n");
    let mut runnable = 0;
    for (info, body) in &blocks {
        match info.as_str() {
            "sh" => {
                runnable += 1;
                script.push_str(body);
            }
            "sh no-run" | "" | "text" | "ini" | "json" | "toml" => {}
            other => panic!(
                "README block marked {other:?}: mark shell blocks `sh` (run by this test) or \
                 `sh no-run`"
            ),
        }
    }
    assert!(runnable >= 2, "the demo and the commands after it run");

    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("clone");
    let stand_in = tmp.path().join("stand-in");
    let install = tmp.path().join("cargo-bin");
    for d in [&work, &stand_in, &install] {
        std::fs::create_dir_all(d).unwrap();
    }
    let cargo = stand_in.join("cargo");
    std::fs::write(&cargo, CARGO_STAND_IN).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
    // The system's tools, but no `reaper` a developer may have installed; the stand-in `cargo`
    // comes first.
    let system_path: Vec<PathBuf> = std::env::split_paths(&std::env::var_os("PATH").unwrap())
        .filter(|d| !d.join("reaper").exists())
        .collect();
    let path = std::env::join_paths(
        [stand_in.clone(), install.clone()]
            .into_iter()
            .chain(system_path),
    )
    .unwrap();
    let out = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .current_dir(&work)
        .env_clear()
        .env("PATH", path)
        .env("HOME", tmp.path())
        .env("README_REAPER", env!("CARGO_BIN_EXE_reaper"))
        .env("README_REPO", repo())
        .env("README_INSTALL", &install)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the README's commands failed ({}):\n{script}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    // What the README says about them.
    assert!(
        stdout.contains("reclaim ledger: pending 0, leaked 0"),
        "{stdout}"
    );
    assert!(stdout.contains("totals: unknown 3"), "{stdout}");
}

/// Markdown links `[text](target)` whose target is a relative path.
fn relative_links(markdown: &str) -> Vec<String> {
    let mut links = Vec::new();
    let mut rest = markdown;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        let Some(end) = rest.find(')') else { break };
        let target = rest[..end].split('#').next().unwrap().trim();
        if !target.is_empty() && !target.contains("://") && !target.starts_with("mailto:") {
            links.push(target.to_string());
        }
    }
    links
}

fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || name == "target" || name == "node_modules" {
            continue;
        }
        if path.is_dir() {
            markdown_files(&path, out);
        } else if name.ends_with(".md") {
            out.push(path);
        }
    }
}

#[test]
fn every_relative_link_in_the_docs_points_at_a_file_in_the_repository() {
    let root = repo();
    let mut files = Vec::new();
    markdown_files(&root, &mut files);
    assert!(files.len() > 5, "found the docs: {files:?}");
    let root = root.canonicalize().unwrap();
    let mut broken = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for link in relative_links(&text) {
            let target = file.parent().unwrap().join(&link);
            match target.canonicalize() {
                Ok(t) if t.starts_with(&root) => {}
                Ok(t) => broken.push(format!(
                    "{}: {link} leaves the repository ({})",
                    file.display(),
                    t.display()
                )),
                Err(_) => broken.push(format!("{}: {link} does not exist", file.display())),
            }
        }
        // A path in backticks that climbs out of the repository is a link in disguise.
        if text.contains("`../shared/spec") {
            broken.push(format!(
                "{}: cites a file outside the repository",
                file.display()
            ));
        }
    }
    assert!(broken.is_empty(), "{broken:#?}");
}
