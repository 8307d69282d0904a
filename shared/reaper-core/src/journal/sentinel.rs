//! Finding the exit sentinel (spec D.5).

use serde_json::Value;

use super::{js_trim, JournalPaths};

/// The exit code of the last genuine sentinel in `text`, scanning lines from the end. `None`
/// when there is none: agent output, an unnonced or foreign sentinel, a partial first line.
pub fn parse_journal_exit(text: &str, paths: &JournalPaths) -> Option<i64> {
    text.split('\n')
        .rev()
        .find_map(|line| parse_exit_sentinel(line, &paths.nonce))
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
