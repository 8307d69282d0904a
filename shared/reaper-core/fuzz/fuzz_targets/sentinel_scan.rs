//! The sentinel scan never panics, never finds an exit in text that lacks the run's nonce, and
//! always finds a genuine sentinel appended after any agent output (on a line of its own or
//! right after the output's partial last line); the line splitter agrees
//! with a plain split however the bytes are chunked.
#![no_main]

use libfuzzer_sys::fuzz_target;
use reaper_core::journal::{exit_sentinel_line, journal_paths, parse_journal_exit, JournalLines};

fuzz_target!(|data: &[u8]| {
    let Some((&seed, rest)) = data.split_first() else {
        return;
    };
    let paths = journal_paths("fuzz-run", None).unwrap();
    let text = String::from_utf8_lossy(rest);

    let found = parse_journal_exit(&text, &paths);
    if !text.contains(&paths.nonce) && !text.contains('\\') {
        // Without the nonce spelled out (or escaped), nothing can pass for the sentinel.
        assert_eq!(found, None);
    }

    let code = i64::from(seed) - 128;
    let journal = format!("{text}\n{}\n", exit_sentinel_line(&paths, code));
    assert_eq!(parse_journal_exit(&journal, &paths), Some(code));

    // Appended right after the output's unterminated last line, as the reference's wrapper
    // does: the canonical sentinel (a shell's status, so not negative) still counts.
    let status = i64::from(seed);
    let journal = format!("{text}{}\n", exit_sentinel_line(&paths, status));
    assert_eq!(parse_journal_exit(&journal, &paths), Some(status));

    let mut splitter = JournalLines::new(0);
    let mut lines = Vec::new();
    for piece in rest.chunks(usize::from(seed % 7) + 1) {
        lines.extend(splitter.push(piece));
    }
    let expected: Vec<&[u8]> = rest.split(|&b| b == b'\n').collect();
    assert_eq!(lines.len(), expected.len() - 1);
    let mut end = 0u64;
    for (line, bytes) in lines.iter().zip(&expected) {
        end += bytes.len() as u64 + 1;
        assert_eq!(line.end_position, end);
        assert_eq!(line.text, String::from_utf8_lossy(bytes));
    }
    assert_eq!(splitter.position(), end);
    assert_eq!(splitter.pending(), *expected.last().unwrap());
});
