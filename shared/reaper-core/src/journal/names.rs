//! Journal paths, the runId ↔ file name encoding, and the exit nonce (spec D.1, D.2, D.3, E.6).

use sha2::{Digest, Sha256};

use super::{
    hex_lower, JournalError, DEFAULT_JOURNAL_DIR, JOURNAL_SUFFIX, MAX_ENCODED_RUN_ID_LEN,
    STDERR_SUFFIX,
};

/// Kept in front of the hash when an encoded runId is too long (200 − 1 − 16).
const TRUNCATED_PREFIX_LEN: usize = 183;
/// Hex digits of `sha256(runId)` appended to a truncated name.
const TRUNCATED_HASH_LEN: usize = 16;
const NONCE_DOMAIN: &str = "tanstack-ai-sandbox/journal-exit-sentinel/v1:";
const RESERVED_DEVICE_NAMES: [&str; 22] = [
    "CON", "PRN", "AUX", "NUL", "COM1", "COM2", "COM3", "COM4", "COM5", "COM6", "COM7", "COM8",
    "COM9", "LPT1", "LPT2", "LPT3", "LPT4", "LPT5", "LPT6", "LPT7", "LPT8", "LPT9",
];

/// Where one run's journal lives. Every field is a pure function of the runId and the
/// directory, so a successor host recomputes the same paths and nonce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalPaths {
    /// The directory, with one trailing `/` stripped.
    pub dir: String,
    /// `<dir>/<encoded>.ndjson`: the agent's stdout and the sentinel.
    pub journal: String,
    /// `<dir>/<encoded>.err`: the agent's stderr.
    pub stderr: String,
    /// The run's exit-sentinel nonce ([`exit_nonce`]).
    pub nonce: String,
}

/// The journal paths of `run_id` under `dir` (default [`DEFAULT_JOURNAL_DIR`]).
pub fn journal_paths(run_id: &str, dir: Option<&str>) -> Result<JournalPaths, JournalError> {
    let encoded = encode_run_id(run_id)?;
    let dir = normalize_dir(dir);
    Ok(JournalPaths {
        journal: format!("{dir}/{encoded}{JOURNAL_SUFFIX}"),
        stderr: format!("{dir}/{encoded}{STDERR_SUFFIX}"),
        nonce: exit_nonce(run_id),
        dir,
    })
}

/// The directory as every command and parser uses it: the default when `None`, and exactly one
/// trailing `/` stripped (`/var/journals/` is `/var/journals`).
pub fn normalize_dir(dir: Option<&str>) -> String {
    let dir = dir.unwrap_or(DEFAULT_JOURNAL_DIR);
    dir.strip_suffix('/').unwrap_or(dir).to_string()
}

fn is_plain(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'.' || b == b'-'
}

fn push_escape(out: &mut String, b: u8) {
    out.push('_');
    out.push_str(&hex_lower(&[b]));
}

/// The file-name token of a runId. Injective: `[A-Za-z0-9.-]` stay, every other byte of the
/// UTF-8 encoding (including `_`) becomes `_xx` in lowercase hex; a Windows device name is
/// escaped byte by byte; a result over 200 characters keeps 183, then `-` and 16 hex digits of
/// the runId's SHA-256.
pub fn encode_run_id(run_id: &str) -> Result<String, JournalError> {
    if run_id.is_empty() {
        return Err(JournalError::EmptyRunId);
    }
    let mut out = String::with_capacity(run_id.len());
    for &b in run_id.as_bytes() {
        // Non-ASCII code points are all-non-plain bytes, so a byte-wise scan escapes each of
        // their UTF-8 bytes exactly as a per-code-point scan would.
        if is_plain(b) {
            out.push(b as char);
        } else {
            push_escape(&mut out, b);
        }
    }
    if RESERVED_DEVICE_NAMES
        .iter()
        .any(|name| out.eq_ignore_ascii_case(name))
    {
        out.clear();
        for &b in run_id.as_bytes() {
            push_escape(&mut out, b);
        }
    }
    if out.len() > MAX_ENCODED_RUN_ID_LEN {
        let digest = hex_lower(&Sha256::digest(run_id.as_bytes()));
        out.truncate(TRUNCATED_PREFIX_LEN);
        out.push('-');
        out.push_str(&digest[..TRUNCATED_HASH_LEN]);
    }
    Ok(out)
}

/// The run's exit-sentinel nonce: the first 32 hex digits of
/// `sha256("tanstack-ai-sandbox/journal-exit-sentinel/v1:" + runId)`. Derived rather than random
/// so any host can recompute it; it stops accidental forgeries, not a malicious agent.
pub fn exit_nonce(run_id: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(NONCE_DOMAIN.as_bytes());
    hasher.update(run_id.as_bytes());
    let mut hex = hex_lower(&hasher.finalize());
    hex.truncate(32);
    hex
}

/// What a listed file name says about its run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodedJournalName {
    /// The runId the name encodes. A store key: never join it into a path.
    RunId(String),
    /// The name was (or looks) hash-truncated: the runId cannot be recovered.
    Truncated,
    /// Not a journal name this encoding produces.
    Malformed,
}

/// Recovers the runId from a listed `<token>.ndjson` or `<token>.err` name, failing closed.
///
/// Accepts non-canonical spellings the encoder never writes (`_41`, upper-case hex, a bare
/// `CON`), as the reference does; the prune then deletes only the canonical paths.
pub fn decode_journal_run_id(name: &str) -> DecodedJournalName {
    let Some(token) = name
        .strip_suffix(JOURNAL_SUFFIX)
        .or_else(|| name.strip_suffix(STDERR_SUFFIX))
    else {
        return DecodedJournalName::Malformed;
    };
    if token.is_empty() {
        return DecodedJournalName::Malformed;
    }
    // Lengths are counted as the reference counts them (UTF-16 units). A legitimate 200-character
    // id shaped like a truncation is refused too: the safe direction.
    let len = token.encode_utf16().count();
    if len > MAX_ENCODED_RUN_ID_LEN || (len == MAX_ENCODED_RUN_ID_LEN && looks_truncated(token)) {
        return DecodedJournalName::Truncated;
    }
    let raw = token.as_bytes();
    let mut bytes = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        if b == b'_' {
            let (Some(hi), Some(lo)) = (
                raw.get(i + 1).and_then(|&c| hex_value(c)),
                raw.get(i + 2).and_then(|&c| hex_value(c)),
            ) else {
                return DecodedJournalName::Malformed;
            };
            bytes.push(hi << 4 | lo);
            i += 3;
        } else if is_plain(b) {
            bytes.push(b);
            i += 1;
        } else {
            return DecodedJournalName::Malformed;
        }
    }
    match String::from_utf8(bytes) {
        Ok(run_id) => DecodedJournalName::RunId(run_id),
        Err(_) => DecodedJournalName::Malformed,
    }
}

fn looks_truncated(token: &str) -> bool {
    let b = token.as_bytes();
    let tail = &b[b.len() - TRUNCATED_HASH_LEN..];
    b[b.len() - TRUNCATED_HASH_LEN - 1] == b'-'
        && tail
            .iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
}

fn hex_value(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}
