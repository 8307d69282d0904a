//! The systemd unit in deploy/ is a valid unit that starts this binary with flags it accepts.

use std::path::Path;
use std::process::Command;

const UNIT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../deploy/systemd/reaper-sandboxd.service"
);
const INSTALLED: &str = "/usr/local/bin/reaper-sandboxd";

#[test]
fn the_sandboxd_unit_verifies_and_starts_the_daemon_with_flags_it_accepts() {
    let bin = env!("CARGO_BIN_EXE_reaper-sandboxd");
    let text = std::fs::read_to_string(UNIT).unwrap();
    let exec = text
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("the unit has an ExecStart");
    let args: Vec<&str> = exec
        .strip_prefix(INSTALLED)
        .unwrap_or_else(|| panic!("ExecStart runs {INSTALLED}: {exec}"))
        .split_whitespace()
        .collect();
    // verify insists that the binary exists: check a copy that runs the one just built.
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join("reaper-sandboxd.service");
    std::fs::write(&copy, text.replace(INSTALLED, bin)).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .output()
        .expect("systemd-analyze runs (install the systemd package)");
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "systemd-analyze verify: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // --help after the unit's own arguments: clap refuses an unknown flag before printing help.
    let out = Command::new(Path::new(bin))
        .args(&args)
        .arg("--help")
        .env_clear()
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "reaper-sandboxd {args:?} --help: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
