//! Shell command templates, byte for byte the reference's (spec D.3, D.4, D.7, E.2), plus one of
//! our own ([`journal_read_page_command`]). Every operand is single-quoted; every read silences
//! stderr inside the sandbox because some providers fold stderr into stdout.

use super::{normalize_dir, JournalError, JournalPaths};

/// POSIX single-quoting: `'…'`, with each `'` written as `'\''`. Nothing inside single quotes
/// is expanded, so any string becomes exactly one literal word.
pub fn shell_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        if c == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}

fn check_max_bytes(max_bytes: u64) -> Result<u64, JournalError> {
    if max_bytes == 0 {
        Err(JournalError::InvalidMaxBytes(max_bytes))
    } else {
        Ok(max_bytes)
    }
}

/// `tail -c +K` is 1-based; computed in u128 so `u64::MAX` cannot overflow.
fn tail_start(from_byte: u64) -> u128 {
    u128::from(from_byte) + 1
}

/// The sentinel line for `code`: `{"__exit":<code>,"__nonce":"<nonce>"}`, keys in that order,
/// no spaces.
pub fn exit_sentinel_line(paths: &JournalPaths, code: i64) -> String {
    sentinel_template(paths, &code.to_string())
}

fn sentinel_template(paths: &JournalPaths, code: &str) -> String {
    format!(r#"{{"__exit":{code},"__nonce":"{}"}}"#, paths.nonce)
}

/// Wraps an agent command so its stdout and stderr are appended to the journal and sidecar, and
/// the nonced sentinel with its exit status is appended after it ends, whatever way it ends.
///
/// The agent runs in a subshell (an `exit` inside it still lets the sentinel print), both files
/// are opened with `>>`, and there is no pipe (the agent cannot die of SIGPIPE).
///
/// Not byte for byte the reference's (spec D.3): when the agent's last output has no trailing
/// newline, the reference appends the sentinel to that line (`{"delta":"All done"}{"__exit":0,…}`),
/// which its own line-based scan then cannot find, so the run looks `producing` until it expires
/// without a transcript. Ours first writes a newline when the journal's last byte is not one
/// (`$(tail -c 1 …)` is empty for a newline, since command substitution strips it, and for an
/// empty journal), so a journal whose output ended with a newline is byte-identical to the
/// reference's. The scan still finds a sentinel after a partial line
/// ([`super::find_exit_sentinel`]) for journals the reference wrote, or where `tail` is missing or
/// the last byte is a NUL (which shells drop from a substitution). Plain POSIX `sh`: runs under
/// dash, bash and BusyBox `ash`.
pub fn journaled_command(cmd: &str, paths: &JournalPaths) -> String {
    let journal = shell_quote(&paths.journal);
    format!(
        "mkdir -p {dir} && {{ ( {cmd} ); rc=$?; [ -n \"$(tail -c 1 {journal})\" ] && echo; \
         printf '{sentinel}\\n' \"$rc\"; }} >> {journal} 2>> {stderr}",
        dir = shell_quote(&paths.dir),
        sentinel = sentinel_template(paths, "%d"),
        stderr = shell_quote(&paths.stderr),
    )
}

/// The exit probe's read: the last `max_bytes` of the journal, base64-framed.
pub fn exit_probe_command(paths: &JournalPaths, max_bytes: u64) -> Result<String, JournalError> {
    let n = check_max_bytes(max_bytes)?;
    Ok(format!(
        "tail -c -{n} {} 2>/dev/null | base64",
        shell_quote(&paths.journal)
    ))
}

/// The last `max_bytes` of the stderr sidecar, base64-framed.
pub fn stderr_tail_command(paths: &JournalPaths, max_bytes: u64) -> Result<String, JournalError> {
    let n = check_max_bytes(max_bytes)?;
    Ok(format!(
        "tail -c -{n} {} 2>/dev/null | base64",
        shell_quote(&paths.stderr)
    ))
}

/// The bounded poll read: everything from byte `from_byte` (0-based) on, base64-framed.
pub fn journal_read_command(paths: &JournalPaths, from_byte: u64) -> String {
    format!(
        "tail -c +{} {} 2>/dev/null | base64",
        tail_start(from_byte),
        shell_quote(&paths.journal)
    )
}

/// Not in the reference: a poll read of at most `max_bytes` from byte `from_byte`, base64-framed.
/// [`journal_read_command`] returns the whole rest of the journal in one `exec`, which against a
/// remote sandbox can be an arbitrarily large response; this one pages it.
pub fn journal_read_page_command(
    paths: &JournalPaths,
    from_byte: u64,
    max_bytes: u64,
) -> Result<String, JournalError> {
    let n = check_max_bytes(max_bytes)?;
    Ok(format!(
        "tail -c +{} {} 2>/dev/null | head -c {n} | base64",
        tail_start(from_byte),
        shell_quote(&paths.journal)
    ))
}

/// The follow read: creates the journal if missing (with `: >>`, never truncating), then streams
/// it from byte `from_byte` on. No base64: it would buffer the stream.
pub fn journal_follow_command(paths: &JournalPaths, from_byte: u64) -> String {
    let journal = shell_quote(&paths.journal);
    format!(
        "mkdir -p {} 2>/dev/null; : >> {journal} 2>/dev/null; tail -c +{} -f {journal} 2>/dev/null",
        shell_quote(&paths.dir),
        tail_start(from_byte),
    )
}

/// Exits 0 when the journal exists.
pub fn journal_exists_command(paths: &JournalPaths) -> String {
    format!("test -f {}", shell_quote(&paths.journal))
}

/// Removes the journal and its sidecar; `-f` only, never the directory.
pub fn journal_cleanup_command(paths: &JournalPaths) -> String {
    format!(
        "rm -f {} {}",
        shell_quote(&paths.journal),
        shell_quote(&paths.stderr)
    )
}

/// Lists the journal directory, one name a line (dot-files are not listed).
pub fn journal_list_command(dir: Option<&str>) -> String {
    format!("ls -1 {} 2>/dev/null", shell_quote(&normalize_dir(dir)))
}

/// Lists `<seconds> <path>` for the directory itself (the witness line that proves `stat -c`
/// ran) and then each file. The glob stays outside the quotes so that it expands.
pub fn journal_mtime_list_command(dir: Option<&str>) -> String {
    let dir = shell_quote(&normalize_dir(dir));
    format!("stat -c '%Y %n' {dir} {dir}/* 2>/dev/null")
}

/// The line [`journal_inventory_command`] prints between the age listing and the fallback name
/// listing. Not a name this encoding writes, and never a `stat` line (those start with digits).
pub const INVENTORY_FALLBACK_MARKER: &str = "#reaper:ls-fallback";

/// Not in the reference: the age listing and, only when `stat -c` fails, the name listing, in one
/// `exec`. The reference sends [`journal_list_command`] and then [`journal_mtime_list_command`]:
/// two shells and two commands per prune. A successful `stat` already names every file the glob
/// matched (the same non-dot names `ls -1` prints), so `ls` runs only when `stat` fails (an empty
/// directory, a file gone between the glob and the `stat`, a `stat` without `-c`), after
/// [`INVENTORY_FALLBACK_MARKER`]. Both halves are exactly the reference's commands.
pub fn journal_inventory_command(dir: Option<&str>) -> String {
    format!(
        "{} || {{ printf '%s\\n' {}; {}; }}",
        journal_mtime_list_command(dir),
        shell_quote(INVENTORY_FALLBACK_MARKER),
        journal_list_command(dir)
    )
}
