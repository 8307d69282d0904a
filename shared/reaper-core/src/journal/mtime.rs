//! Parsing the `stat -c '%Y %n'` age listing (spec E.3).

use serde::Serialize;

use super::{js_trim, normalize_dir};
use crate::domain::EpochMs;

/// One listed file's modification time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MtimeEntry {
    /// The bare file name, no directory.
    pub name: String,
    /// Whole seconds (`%Y`), in milliseconds.
    pub mtime_ms: EpochMs,
}

/// The parsed age listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MtimeListing {
    /// The witness line for the directory was present, so `stat -c` ran: these are all the
    /// files it saw (possibly none).
    Listed(Vec<MtimeEntry>),
    /// No witness line: `stat -c` did not run (BusyBox without `-c`) or listed something else.
    /// No age can be trusted.
    Unavailable,
}

/// Parses `stat -c '%Y %n' '<dir>' '<dir>'/*` output for `dir` (default directory when `None`).
///
/// Works only from the witness line (`<seconds> <dir>`), never from the exit code, which is 1 for
/// an empty directory. Lines that do not fit are dropped: diagnostics, nested paths, other
/// directories, a witness for another directory, and seconds too large to be a time.
pub fn parse_mtime_listing(text: &str, dir: Option<&str>) -> MtimeListing {
    let dir = normalize_dir(dir);
    let prefix = format!("{dir}/");
    let mut witnessed = false;
    let mut entries = Vec::new();
    for line in text.split('\n') {
        let line = js_trim(line);
        let Some((seconds, path)) = line.split_once(' ') else {
            continue;
        };
        if seconds.is_empty() || !seconds.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Some(mtime_ms) = seconds
            .parse::<EpochMs>()
            .ok()
            .and_then(|s| s.checked_mul(1000))
        else {
            continue;
        };
        if path == dir {
            witnessed = true;
        } else if let Some(name) = path.strip_prefix(&prefix) {
            if !name.is_empty() && !name.contains('/') {
                entries.push(MtimeEntry {
                    name: name.to_string(),
                    mtime_ms,
                });
            }
        }
    }
    if witnessed {
        MtimeListing::Listed(entries)
    } else {
        MtimeListing::Unavailable
    }
}
