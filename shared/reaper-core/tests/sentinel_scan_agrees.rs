//! `parse_journal_exit` looks only at the lines a whole-text search finds the nonce or a `\u`
//! escape on. Its answer must be the one of looking at every line from the last, which this file
//! keeps as the oracle: the last genuine sentinel in either form, escaped nonces included.

use proptest::prelude::*;
use reaper_core::journal::{
    exit_sentinel_line, find_exit_sentinel, journal_paths, parse_journal_exit, JournalPaths,
};

/// The scan as it was before the search: every line, from the last.
fn oracle(text: &str, nonce: &str) -> Option<i64> {
    text.split('\n')
        .rev()
        .find_map(|line| find_exit_sentinel(line, nonce))
        .map(|found| found.exit_code)
}

fn paths() -> JournalPaths {
    journal_paths("scan-1", None).unwrap()
}

fn with_nonce(nonce: &str) -> JournalPaths {
    JournalPaths {
        nonce: nonce.to_string(),
        ..paths()
    }
}

fn escaped(s: &str) -> String {
    s.chars().map(|c| format!("\\u{:04x}", c as u32)).collect()
}

fn assert_agrees(text: &str, paths: &JournalPaths) {
    assert_eq!(
        parse_journal_exit(text, paths),
        oracle(text, &paths.nonce),
        "for {text:?} with nonce {:?}",
        paths.nonce
    );
}

#[test]
fn a_later_line_echoing_the_nonce_does_not_hide_an_earlier_sentinel() {
    let p = paths();
    let text = format!(
        "{}\n{{\"text\":\"nonce {} echoed\"}}\n{{\"text\":\"\\u00e9\"}}\n",
        exit_sentinel_line(&p, 3),
        p.nonce
    );
    assert_eq!(parse_journal_exit(&text, &p), Some(3));
    assert_agrees(&text, &p);
}

#[test]
fn a_sentinel_spelling_its_nonce_with_escapes_is_found_among_plain_lines() {
    let p = paths();
    let (head, tail) = p.nonce.split_at(5);
    let line = format!("{{\"__exit\":6,\"__nonce\":\"{}{tail}\"}}", escaped(head));
    let text = format!("{{\"delta\":\"a\"}}\n{line}\n{{\"delta\":\"b\"}}\n");
    assert_eq!(parse_journal_exit(&text, &p), Some(6));
    assert_agrees(&text, &p);
}

#[test]
fn a_sentinel_whose_key_is_escaped_is_found() {
    let p = paths();
    let line = format!("{{\"\\u005f_exit\":2,\"__nonce\":\"{}\"}}", p.nonce);
    assert_eq!(parse_journal_exit(&format!("{line}\n"), &p), Some(2));
}

#[test]
fn a_nonce_cut_by_a_line_break_is_no_sentinel() {
    let p = paths();
    let line = exit_sentinel_line(&p, 0);
    let cut = line.find(&p.nonce).unwrap() + 10;
    let text = format!("{}\n{}\n", &line[..cut], &line[cut..]);
    assert_eq!(parse_journal_exit(&text, &p), None);
    assert_agrees(&text, &p);
}

#[test]
fn the_last_of_several_candidates_on_one_line_is_the_line_looked_at() {
    // The nonce twice and an escape on the sentinel's own line, and candidates before it.
    let p = paths();
    let text = format!(
        "{{\"x\":\"{n}\"}}\n{{\"__exit\":8,\"__nonce\":\"{n}\",\"echo\":\"{n}\\u0021\"}}\n",
        n = p.nonce
    );
    assert_eq!(parse_journal_exit(&text, &p), Some(8));
    assert_agrees(&text, &p);
}

#[test]
fn nonces_no_run_has_still_give_the_every_line_answer() {
    // Empty, spanning a line break, self-overlapping, holding the escape itself.
    for nonce in ["", "a\nb", "\n", "aa", "aaa", "\\u", "x\\u0061"] {
        let p = with_nonce(nonce);
        for text in [
            format!("{}\n", exit_sentinel_line(&p, 4)),
            format!("{{\"d\":1}}{}", exit_sentinel_line(&p, 5)),
            "{\"__exit\":1,\"__nonce\":\"\"}\n{\"d\":\"aaaa\"}\n".to_string(),
            "{\"__exit\":1,\"__nonce\":\"a\nb\"}".to_string(),
            format!("{{\"__exit\":7,\"__nonce\":\"{}\"}}\n", escaped(nonce)),
        ] {
            assert_agrees(&text, &p);
        }
    }
}

/// Pieces of journal text around a sentinel: genuine ones (whole line, after a partial line,
/// with an escaped nonce), forged ones, agent output with and without the nonce and escapes.
fn piece(nonce: String) -> impl Strategy<Value = String> {
    let other = journal_paths("scan-other", None).unwrap().nonce;
    let n = nonce.clone();
    prop_oneof![
        (0i64..300).prop_map(move |code| format!("{{\"__exit\":{code},\"__nonce\":\"{n}\"}}")),
        {
            let n = nonce.clone();
            (0i64..3, 0..=32usize).prop_map(move |(code, k)| {
                let k = k.min(n.len());
                format!(
                    "{{\"__nonce\":\"{}{}\",\"__exit\":{code}}}",
                    escaped(&n[..k]),
                    &n[k..]
                )
            })
        },
        {
            let n = nonce.clone();
            (0i64..3)
                .prop_map(move |code| format!("  {{\"__exit\":{code}.0,\"__nonce\":\"{n}\"}} \r"))
        },
        {
            let n = nonce.clone();
            Just(format!("{{\"__exit\":07,\"__nonce\":\"{n}\"}}"))
        },
        {
            let n = nonce.clone();
            Just(format!("{{\"text\":\"{n}\"}}"))
        },
        {
            let n = nonce.clone();
            (0..=32usize).prop_map(move |k| n[..k.min(n.len())].to_string())
        },
        Just(format!("{{\"__exit\":1,\"__nonce\":\"{other}\"}}")),
        Just("{\"__exit\":0}".to_string()),
        Just("{\"delta\":\"caf\\u00e9 \\\\u0041\"}".to_string()),
        Just("\\u".to_string()),
        Just("\\".to_string()),
        Just("u".to_string()),
        "(\\PC|\n|\r|\"|\\{|\\}|[0-9:,]|\\\\u|\\\\){0,12}",
    ]
}

fn separator() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        4 => Just("\n"),
        1 => Just(""),
        1 => Just("\r\n"),
        1 => Just(" "),
    ]
}

fn journal(nonce: String) -> impl Strategy<Value = String> {
    proptest::collection::vec((piece(nonce), separator()), 0..12).prop_map(|pieces| {
        pieces
            .into_iter()
            .flat_map(|(piece, sep)| [piece, sep.to_string()])
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn the_scan_agrees_with_looking_at_every_line(text in journal(paths().nonce)) {
        assert_agrees(&text, &paths());
    }

    #[test]
    fn the_scan_agrees_for_any_nonce(
        nonce in prop_oneof![Just(String::new()), "[a\n\\\\u]{1,4}", "[0-9a-f]{1,6}"],
        text in "([a\n\\\\u\"{}:,_0-9]|__exit|__nonce){0,60}",
    ) {
        assert_agrees(&text, &with_nonce(&nonce));
        let sentinel = exit_sentinel_line(&with_nonce(&nonce), 9);
        assert_agrees(&format!("{text}{sentinel}"), &with_nonce(&nonce));
        assert_agrees(&format!("{sentinel}\n{text}"), &with_nonce(&nonce));
    }
}
