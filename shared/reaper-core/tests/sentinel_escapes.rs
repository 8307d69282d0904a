//! The sentinel scan skips the JSON parse for lines that cannot hold the nonce; that shortcut
//! must not change any answer, including for a sentinel whose nonce is spelled with escapes.

use reaper_core::journal::{
    exit_sentinel_line, journal_paths, parse_exit_sentinel, parse_journal_exit,
};

#[test]
fn sentinel_with_a_unicode_escaped_nonce_is_still_genuine() {
    let paths = journal_paths("r1", None).unwrap();
    let escaped: String = paths
        .nonce
        .chars()
        .map(|c| format!("\\u{:04x}", c as u32))
        .collect();
    let line = format!("{{\"__exit\":4,\"__nonce\":\"{escaped}\"}}");
    assert!(!line.contains(&paths.nonce));
    assert_eq!(parse_exit_sentinel(&line, &paths.nonce), Some(4));
}

#[test]
fn agent_output_without_the_nonce_is_skipped_and_the_real_sentinel_found() {
    let paths = journal_paths("r1", None).unwrap();
    let text = format!(
        "{{\"delta\":\"a\"}}\n{{\"__exit\":0}}\n{}\n{{\"delta\":\"b\"}}\n",
        exit_sentinel_line(&paths, 9)
    );
    assert_eq!(parse_journal_exit(&text, &paths), Some(9));
    assert_eq!(
        parse_journal_exit("{\"delta\":\"a\"}\n{\"__exit\":0}\n", &paths),
        None
    );
}
