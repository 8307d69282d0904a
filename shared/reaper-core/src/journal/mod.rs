//! The journal: where a detached agent's output lands inside its sandbox, and every shell
//! command and parser the probe, the prune and the replay drive use to read it (spec D, E).
//!
//! Pure: this module builds command strings and parses command output; running them is the
//! caller's job, through [`crate::ports::SandboxHandle::exec`] (never a file API, because on
//! some providers the shell and the file API resolve `/tmp` differently).
//!
//! # Format
//!
//! A run's agent is started through [`journaled_command`]. Its stdout is appended to
//! `<dir>/<encoded runId>.ndjson`, the **journal**: newline-delimited JSON as the agent writes
//! it (for example `claude -p --output-format stream-json`), one event per line. Its stderr is
//! appended to the **sidecar** `<dir>/<encoded runId>.err`, which is diagnostic text only. Both
//! files are opened in append mode and the agent runs in a subshell without a pipe, so an
//! `exit N` or a closed reader cannot stop the last step: once the agent ends, the shell appends
//! one **sentinel line** to the journal,
//!
//! ```text
//! {"__exit":<exit code>,"__nonce":"<32 hex digits>"}
//! ```
//!
//! where the nonce is derived from the runId ([`exit_nonce`]), so a successor host can recompute
//! it and an agent printing `{"__exit":0}` cannot pass for finished. The sentinel always starts a
//! line: the wrapper writes a newline first when the agent's output did not end with one. The
//! last genuine sentinel in the window read wins ([`parse_journal_exit`]); one written right after
//! a partial last line (by the reference's wrapper, which has no such newline) still counts in
//! its exact canonical form ([`find_exit_sentinel`]).
//!
//! Both paths are pure functions of the runId and the directory (default
//! [`DEFAULT_JOURNAL_DIR`]): the file name is an injective, shell- and filesystem-safe encoding
//! of the runId ([`encode_run_id`]), which [`decode_journal_run_id`] reverses, failing closed,
//! so the prune can ask the run store about each file it lists.
//!
//! Reads go through `tail -c` piped into `base64`, so arbitrary bytes survive providers that
//! mangle non-UTF-8 output; [`decode_base64_frame`] and [`Base64StreamDecoder`] undo that, and
//! [`JournalLines`] splits the bytes into lines positioned by byte offset, so a reader can resume
//! exactly after the last complete line.

mod bytes;
mod commands;
mod mtime;
mod names;
mod sentinel;

pub use bytes::{
    decode_base64_frame, decode_base64_text, Base64StreamDecoder, JournalLine, JournalLines,
};
pub use commands::{
    exit_probe_command, exit_sentinel_line, journal_cleanup_command, journal_exists_command,
    journal_follow_command, journal_inventory_command, journal_list_command,
    journal_mtime_list_command, journal_read_command, journal_read_page_command, journaled_command,
    shell_quote, stderr_tail_command, INVENTORY_FALLBACK_MARKER,
};
pub use mtime::{parse_mtime_listing, MtimeEntry, MtimeListing};
pub use names::{
    decode_journal_run_id, encode_run_id, exit_nonce, journal_paths, normalize_dir,
    DecodedJournalName, JournalPaths,
};
pub use sentinel::{find_exit_sentinel, parse_exit_sentinel, parse_journal_exit, SentinelMatch};

/// Where journals live unless the caller says otherwise.
pub const DEFAULT_JOURNAL_DIR: &str = "/tmp/tanstack-runs";
/// How many bytes of the journal's tail the exit probe reads.
pub const DEFAULT_EXIT_PROBE_BYTES: u64 = 4096;
/// How many bytes of the stderr sidecar's tail a diagnostic read returns.
pub const DEFAULT_STDERR_TAIL_BYTES: u64 = 4096;
/// How many runs' journals one prune deletes at most.
pub const DEFAULT_MAX_DELETES: usize = 200;
/// How old an orphan's newest journal file must be before the prune deletes it.
pub const DEFAULT_ORPHAN_TTL_MS: u64 = 3_600_000;
/// The longest encoded runId; longer ones are cut and suffixed with a hash.
pub const MAX_ENCODED_RUN_ID_LEN: usize = 200;
/// The file suffix of a journal.
pub const JOURNAL_SUFFIX: &str = ".ndjson";
/// The file suffix of a stderr sidecar.
pub const STDERR_SUFFIX: &str = ".err";

/// A journal argument that cannot be used. Each names the parameter that was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    #[error("run_id must not be empty: a journal is named after its run")]
    /// The run id is empty.
    EmptyRunId,
    #[error("max_bytes must be at least 1 (got {0}): pass the number of bytes to read")]
    /// `max_bytes` is 0.
    InvalidMaxBytes(u64),
    #[error(
        "base64 frame ended mid-quantum: {len} base64 characters is not a multiple of 4, so \
         the command output was cut short"
    )]
    /// The base64 frame was cut short.
    MidQuantum {
        /// The number of base64 characters received.
        len: usize,
    },
    #[error("base64 frame is not valid base64: {0}")]
    /// The frame is not base64.
    InvalidBase64(String),
}

/// JavaScript's `String.prototype.trim`, which the reference applies to every line it parses:
/// Unicode white space plus the BOM, which `str::trim` keeps.
pub(crate) fn js_trim(s: &str) -> &str {
    s.trim_matches(|c: char| c.is_whitespace() || c == '\u{feff}')
}

pub(crate) fn is_js_whitespace(c: char) -> bool {
    c.is_whitespace() || c == '\u{feff}'
}

fn hex_lower(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    out
}
