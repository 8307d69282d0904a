//! The systemd unit in deploy/ is a valid unit that starts this binary with flags it accepts.

mod common;

use std::path::Path;
use std::process::Command;

pub const UNIT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../deploy/systemd/reaper-watch.service"
);

/// `systemd-analyze verify` on a copy of `unit` whose binary is `bin` (verify insists that the
/// binary exists); returns the ExecStart arguments after the binary.
pub fn verify_unit(unit: &str, installed: &str, bin: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(unit).unwrap();
    let exec = text
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("the unit has an ExecStart");
    let args: Vec<String> = exec
        .strip_prefix(installed)
        .unwrap_or_else(|| panic!("ExecStart runs {installed}: {exec}"))
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let tmp = tempfile::tempdir().unwrap();
    let name = Path::new(unit).file_name().unwrap();
    let copy = tmp.path().join(name);
    std::fs::write(&copy, text.replace(installed, bin.to_str().unwrap())).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .output()
        .expect("systemd-analyze runs (install the systemd package)");
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "systemd-analyze verify {}: {}\n{}",
        unit,
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    args
}

#[test]
fn the_watch_unit_verifies_and_starts_reaper_watch_with_flags_it_accepts() {
    let bin = Path::new(env!("CARGO_BIN_EXE_reaper"));
    let args = verify_unit(UNIT, "/usr/local/bin/reaper", bin);
    assert_eq!(args.first().map(String::as_str), Some("watch"));
    // --help after the unit's own arguments: clap refuses an unknown flag before printing help.
    let (code, stdout, stderr) = common::run(common::reaper().args(&args).arg("--help"));
    assert_eq!(code, 0, "{stdout}{stderr}");
}
