//! Finding the exit sentinel (spec D.5), plus one form the reference does not read: the
//! sentinel right after a last output line that had no trailing newline.

use serde_json::Value;

use super::{js_trim, JournalPaths};

/// A genuine sentinel found on one journal line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SentinelMatch<'a> {
    /// The agent's exit code.
    pub exit_code: i64,
    /// The agent output before the sentinel on the same line: its last line, which it left
    /// without a trailing newline, so a wrapper that does not start the sentinel on a line of
    /// its own (the reference's, ours before it did) appended the sentinel to it. Empty when
    /// the sentinel has the line to itself. The sentinel starts `line.len() - partial_line.len()`
    /// bytes before the end of the line (it is ASCII, so that holds for the raw bytes too).
    pub partial_line: &'a str,
}

/// The exit code of the last genuine sentinel in `text`, scanning lines from the end. `None`
/// when there is none: agent output, an unnonced or foreign sentinel, a partial first line.
/// A sentinel that follows a partial line ([`find_exit_sentinel`]) counts.
pub fn parse_journal_exit(text: &str, paths: &JournalPaths) -> Option<i64> {
    let nonce = paths.nonce.as_str();
    if nonce.is_empty() {
        // Every line holds the empty nonce (no run's nonce is empty).
        return last_sentinel_in_every_line(text, nonce);
    }
    // Only a line holding the nonce or a `\u` escape can be a sentinel in either form (see
    // `parse_exit_sentinel`): one search of the whole text for each finds every such line, and
    // the others are never split, trimmed or parsed. A match across a line break (a nonce no
    // run has) only adds lines that are then looked at in vain.
    let bytes = text.as_bytes();
    let mut candidates: Vec<usize> = memchr::memmem::find_iter(bytes, nonce).collect();
    candidates.extend(memchr::memmem::find_iter(bytes, b"\\u"));
    candidates.sort_unstable();
    // Candidate lines from the last one, each once: the text from `seen_from` on has been
    // looked at.
    let mut seen_from = bytes.len();
    for &at in candidates.iter().rev() {
        if at >= seen_from {
            continue;
        }
        let start = memchr::memrchr(b'\n', &bytes[..at]).map_or(0, |i| i + 1);
        let end = memchr::memchr(b'\n', &bytes[at..]).map_or(bytes.len(), |i| at + i);
        if let Some(found) = find_exit_sentinel(&text[start..end], nonce) {
            return Some(found.exit_code);
        }
        seen_from = start;
    }
    None
}

/// [`parse_journal_exit`] by looking at every line, from the last.
fn last_sentinel_in_every_line(text: &str, nonce: &str) -> Option<i64> {
    text.split('\n')
        .rev()
        .find_map(|line| find_exit_sentinel(line, nonce))
        .map(|found| found.exit_code)
}

/// The genuine sentinel on `line`, if any, in either of two forms:
///
/// - the whole line is one ([`parse_exit_sentinel`]: the reference's lenient rules);
/// - the line *ends* with exactly what the wrapper prints, `{"__exit":<code>,"__nonce":"<nonce>"}`
///   with `<code>` as `printf %d` writes an exit status (decimal digits, no sign, no leading
///   zero) and nothing after it, while something else precedes it: the agent's unterminated last
///   line. Only the canonical serialization counts here (no other key order, no extra keys, no
///   spaces), because the bytes before it are not JSON we could check, so only the exact form the
///   wrapper writes is evidence that the wrapper wrote it. A forged or unnonced suffix is refused
///   like a forged line.
pub fn find_exit_sentinel<'a>(line: &'a str, nonce: &str) -> Option<SentinelMatch<'a>> {
    if let Some(exit_code) = parse_exit_sentinel(line, nonce) {
        return Some(SentinelMatch {
            exit_code,
            partial_line: "",
        });
    }
    trailing_sentinel(line, nonce)
}

/// `<partial line>{"__exit":<digits>,"__nonce":"<nonce>"}` at the very end of `line`.
fn trailing_sentinel<'a>(line: &'a str, nonce: &str) -> Option<SentinelMatch<'a>> {
    let rest = line
        .strip_suffix("\"}")?
        .strip_suffix(nonce)?
        .strip_suffix(",\"__nonce\":\"")?;
    let digits_at = rest
        .rfind(|c: char| !c.is_ascii_digit())
        .map_or(0, |i| i + 1);
    let digits = &rest[digits_at..];
    if digits.is_empty() || (digits.len() > 1 && digits.starts_with('0')) {
        return None;
    }
    let exit_code = digits.parse::<i64>().ok()?;
    let partial_line = rest[..digits_at].strip_suffix("{\"__exit\":")?;
    Some(SentinelMatch {
        exit_code,
        partial_line,
    })
}

/// The exit code if `line` is a genuine sentinel for `nonce`: a JSON object (any key order,
/// extra keys allowed, surrounding white space ignored) whose `__nonce` is exactly `nonce` and
/// whose `__exit` is an integer-valued number (`-3` and `1e0` count; `"7"`, `null`, `1.5` and
/// `true` do not, and are never coerced to 0).
pub fn parse_exit_sentinel(line: &str, nonce: &str) -> Option<i64> {
    let line = js_trim(line);
    if line.is_empty() {
        return None;
    }
    // A JSON string equal to the (hex) nonce either holds it literally or spells some of it
    // with `\u` escapes; any other line cannot qualify, so the common case of plain agent
    // output skips the JSON parse. Same answers, far less work on a 4 KiB tail.
    if !line.contains(nonce) && !line.contains("\\u") {
        return None;
    }
    let value: Value = serde_json::from_str(line).ok()?;
    let object = value.as_object()?;
    match object.get("__nonce") {
        Some(Value::String(n)) if n == nonce => {}
        _ => return None,
    }
    match object.get("__exit")? {
        Value::Number(n) => n.as_i64().or_else(|| {
            // Integer-valued floats (`1e0`, `-0`, `7.0`) count; one outside i64 cannot be a
            // shell's exit status, so it is refused rather than saturated.
            let f = n.as_f64()?;
            let in_range = (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&f);
            (f.fract() == 0.0 && in_range).then_some(f as i64)
        }),
        _ => None,
    }
}
