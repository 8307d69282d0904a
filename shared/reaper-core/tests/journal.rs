//! The journal's pure parts: paths, the name encoding, command templates, the mtime listing and
//! the sentinel scan (spec D, E.2, E.3, E.6; conformance H4, H15).

use proptest::prelude::*;
use reaper_core::journal::*;

fn paths(run_id: &str) -> JournalPaths {
    journal_paths(run_id, None).unwrap()
}

fn journal_name(run_id: &str) -> String {
    paths(run_id)
        .journal
        .rsplit('/')
        .next()
        .unwrap()
        .to_string()
}

const INJECTION: &str = "x'; rm -rf /; echo $(whoami) \"q\"";
const HOSTILE_DIR: &str = "/t'; rm -rf /; echo $(whoami)";

/// A hostile runId (encoded away) under a hostile directory (only quoting protects it).
fn hostile_paths() -> JournalPaths {
    journal_paths(INJECTION, Some(HOSTILE_DIR)).unwrap()
}

fn adversarial_ids() -> Vec<String> {
    let mut ids: Vec<String> = [
        "_",
        "_40",
        "@",
        "/",
        "\\",
        "..",
        ".",
        ".hidden",
        " lead",
        "trail ",
        "a b",
        "ünïcödé",
        "日本語",
        "CON",
        "con",
        "NUL",
        "COM1",
        "lpt9",
        "CONtainer",
        "a_2fb_20c_3bd",
        "a/b c;d",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    ids.push("a".repeat(10_000));
    ids
}

/// Asserts no unquoted injection: stripping every single-quoted word leaves none of the payload.
fn assert_quoted(command: &str) {
    let mut outside = String::new();
    let mut quoted = false;
    let mut chars = command.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => quoted = !quoted,
            // Outside quotes a backslash makes the next character literal (`'\''`).
            '\\' if !quoted => {
                chars.next();
            }
            _ if !quoted => outside.push(c),
            _ => {}
        }
    }
    assert!(!quoted, "unbalanced quotes in {command}");
    for raw in ["rm -rf /", "$(whoami)"] {
        assert!(
            !outside.contains(raw),
            "{raw:?} appears unquoted in {command}"
        );
    }
}

// journal_paths (H4.1–5)

#[test]
fn default_paths_live_in_the_default_dir_with_ndjson_and_err_suffixes() {
    let p = paths("run-123");
    assert_eq!(p.dir, "/tmp/tanstack-runs");
    assert_eq!(p.journal, "/tmp/tanstack-runs/run-123.ndjson");
    assert_eq!(p.stderr, "/tmp/tanstack-runs/run-123.err");
    assert_eq!(DEFAULT_JOURNAL_DIR, "/tmp/tanstack-runs");
}

#[test]
fn paths_are_a_pure_function_of_the_run_id() {
    assert_eq!(paths("run-123"), paths("run-123"));
}

#[test]
fn one_trailing_slash_of_the_dir_is_stripped() {
    let p = journal_paths("r", Some("/var/journals/")).unwrap();
    assert_eq!(p.dir, "/var/journals");
    assert_eq!(p.journal, "/var/journals/r.ndjson");
}

#[test]
fn shell_hostile_run_id_is_encoded_into_the_file_name() {
    assert_eq!(
        paths("a/b c;d").journal,
        "/tmp/tanstack-runs/a_2fb_20c_3bd.ndjson"
    );
}

#[test]
fn empty_run_id_is_refused_naming_the_parameter() {
    let err = journal_paths("", None).unwrap_err();
    assert_eq!(err, JournalError::EmptyRunId);
    assert!(err.to_string().contains("run_id"), "{err}");
    assert_eq!(encode_run_id(""), Err(JournalError::EmptyRunId));
}

// encode_run_id (D.2, H4.6–10, H15.11)

#[test]
fn encoding_matches_the_reference_vectors() {
    let vectors = [
        ("r1", "r1"),
        ("a/b c;d", "a_2fb_20c_3bd"),
        ("@", "_40"),
        ("_40", "_5f40"),
        ("CON", "_43_4f_4e"),
        ("CONtainer", "CONtainer"),
        ("日本語", "_e6_97_a5_e6_9c_ac_e8_aa_9e"),
        (".hidden", ".hidden"),
        ("a/../b", "a_2f.._2fb"),
    ];
    for (id, encoded) in vectors {
        assert_eq!(encode_run_id(id).unwrap(), encoded, "for {id:?}");
    }
    assert_eq!(
        encode_run_id(&"a".repeat(201)).unwrap(),
        format!("{}-a92efd82109373e5", "a".repeat(183))
    );
    assert_eq!(
        encode_run_id(&"x".repeat(5000)).unwrap(),
        format!("{}-c59d3c0480cc2d71", "x".repeat(183))
    );
}

#[test]
fn at_sign_and_its_old_escape_no_longer_collide() {
    assert_eq!(journal_name("@"), "_40.ndjson");
    assert_eq!(journal_name("_40"), "_5f40.ndjson");
}

#[test]
fn adversarial_run_ids_give_pairwise_distinct_journals() {
    let ids = adversarial_ids();
    let journals: std::collections::HashSet<String> =
        ids.iter().map(|id| paths(id).journal).collect();
    assert_eq!(journals.len(), ids.len());
}

#[test]
fn reserved_device_names_are_never_produced() {
    const RESERVED: [&str; 22] = [
        "CON", "PRN", "AUX", "NUL", "COM1", "COM2", "COM3", "COM4", "COM5", "COM6", "COM7", "COM8",
        "COM9", "LPT1", "LPT2", "LPT3", "LPT4", "LPT5", "LPT6", "LPT7", "LPT8", "LPT9",
    ];
    for id in [
        "CON", "con", "PRN", "AUX", "NUL", "COM1", "LPT9", "Aux", "cOm7",
    ] {
        let encoded = encode_run_id(id).unwrap();
        assert!(
            !RESERVED.iter().any(|r| r.eq_ignore_ascii_case(&encoded)),
            "{id} encoded to a device name {encoded}"
        );
    }
}

#[test]
fn a_name_that_merely_starts_with_a_device_name_is_kept() {
    assert_eq!(journal_name("CONtainer"), "CONtainer.ndjson");
}

#[test]
fn long_ids_differing_only_at_the_end_get_distinct_short_names() {
    let a = journal_name(&"x".repeat(5000));
    let b = journal_name(&format!("{}y", "x".repeat(4999)));
    assert_ne!(a, b);
    assert!(a.len() < 255 && b.len() < 255);
    assert_eq!(encode_run_id(&"z".repeat(4096)).unwrap().len(), 200);
}

// journaled_command and the sentinel (D.3, H4.11–16)

#[test]
fn nonces_match_the_reference_vectors() {
    assert_eq!(exit_nonce("r1"), "be9a86998f6b232f1ef284cebb44fb5a");
    assert_eq!(exit_nonce("run-123"), "85be979a9cde500b9aa7e513cd00a79f");
    assert_eq!(exit_nonce("pje-1"), "bf64ba85d977a1ed3d7341d95f6267fe");
    assert_eq!(paths("r1").nonce, exit_nonce("r1"));
}

/// Spec D.3's vector, plus our one addition: a newline before the sentinel when the journal's
/// last byte is not one (issue 12.5; see `journaled_command`).
#[test]
fn journaled_command_is_the_reference_template_plus_the_newline_guard() {
    assert_eq!(
        journaled_command("claude -p --output-format stream-json", &paths("r1")),
        "mkdir -p '/tmp/tanstack-runs' && { ( claude -p --output-format stream-json ); rc=$?; \
         [ -n \"$(tail -c 1 '/tmp/tanstack-runs/r1.ndjson')\" ] && echo; \
         printf '{\"__exit\":%d,\"__nonce\":\"be9a86998f6b232f1ef284cebb44fb5a\"}\\n' \"$rc\"; } \
         >> '/tmp/tanstack-runs/r1.ndjson' 2>> '/tmp/tanstack-runs/r1.err'"
    );
}

#[test]
fn journaled_command_prints_the_sentinel_line_with_the_code_as_a_format() {
    let p = paths("r1");
    let cmd = journaled_command("agent", &p);
    for code in [0, 7] {
        let line = exit_sentinel_line(&p, code);
        assert!(cmd.contains(&line.replace(&format!(":{code},"), ":%d,")));
    }
    assert_eq!(
        exit_sentinel_line(&p, 0),
        r#"{"__exit":0,"__nonce":"be9a86998f6b232f1ef284cebb44fb5a"}"#
    );
}

#[test]
fn nonces_are_per_run_stable_hex_and_quoted_in_the_command() {
    let a = exit_nonce("nonce-a");
    let b = exit_nonce("nonce-b");
    assert_ne!(a, b);
    for n in [&a, &b] {
        assert_eq!(n.len(), 32);
        assert!(n
            .bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)));
    }
    assert_eq!(a, exit_nonce("nonce-a"));
    assert!(journaled_command("x", &paths("nonce-a")).contains(&format!("\"{a}\"")));
}

#[test]
fn journaled_command_appends_and_never_truncates_or_pipes() {
    let cmd = journaled_command("agent", &paths("r1"));
    assert!(cmd.contains(">> '/tmp/tanstack-runs/r1.ndjson'"));
    assert!(!cmd.replace(">>", "").contains('>'));
    assert!(!cmd.contains('|'));
}

#[test]
fn journaled_command_quotes_hostile_paths() {
    let p = hostile_paths();
    let cmd = journaled_command("agent", &p);
    assert!(cmd.contains(&shell_quote(&p.journal)));
    assert!(cmd.contains(&shell_quote(&p.stderr)));
    assert_quoted(&cmd);
    let hostile_dir = journal_paths("r1", Some("/t'x")).unwrap();
    let cmd = journaled_command("agent", &hostile_dir);
    assert!(cmd.contains(r"'/t'\''x/r1.ndjson'"), "{cmd}");
}

#[test]
fn single_quote_helper_escapes_quotes_posix_style() {
    assert_eq!(shell_quote("a'b"), r"'a'\''b'");
    assert_eq!(shell_quote(""), "''");
    assert_eq!(shell_quote("$(x) `y` \\"), "'$(x) `y` \\'");
}

// Follow and read commands (D.7, H4.17–22)

#[test]
fn follow_command_is_byte_exact_and_offsets_one_based() {
    let p = paths("r1");
    assert_eq!(
        journal_follow_command(&p, 0),
        "mkdir -p '/tmp/tanstack-runs' 2>/dev/null; : >> '/tmp/tanstack-runs/r1.ndjson' \
         2>/dev/null; tail -c +1 -f '/tmp/tanstack-runs/r1.ndjson' 2>/dev/null"
    );
    assert!(journal_follow_command(&p, 100).contains("tail -c +101 -f "));
}

#[test]
fn follow_command_creates_the_journal_by_appending_before_tailing() {
    let cmd = journal_follow_command(&paths("r1"), 0);
    let create = cmd.find(": >> ").unwrap();
    assert!(create < cmd.find("tail").unwrap());
    assert!(!cmd.contains(": >'"));
}

#[test]
fn read_command_is_byte_exact_and_does_not_follow() {
    let cmd = journal_read_command(&paths("r1"), 100);
    assert_eq!(
        cmd,
        "tail -c +101 '/tmp/tanstack-runs/r1.ndjson' 2>/dev/null | base64"
    );
    assert!(!cmd.contains("-f"));
}

#[test]
fn follow_and_read_silence_stderr_and_only_the_read_pipes_to_base64() {
    let p = paths("r1");
    let follow = journal_follow_command(&p, 0);
    let read = journal_read_command(&p, 0);
    assert!(follow.contains("2>/dev/null") && read.contains("2>/dev/null"));
    assert!(!follow.contains('|'));
    assert!(read.contains("| base64"));
}

#[test]
fn the_largest_offset_does_not_overflow_the_one_based_tail_start() {
    // fromByte cannot be negative here: it is a u64 (H4.22's -1 does not type-check).
    let p = paths("r1");
    assert!(journal_read_command(&p, u64::MAX).contains("tail -c +18446744073709551616 "));
    assert!(journal_follow_command(&p, u64::MAX).contains("tail -c +18446744073709551616 -f"));
}

#[test]
fn paged_read_command_bounds_the_output() {
    let p = paths("r1");
    assert_eq!(
        journal_read_page_command(&p, 8, 65536).unwrap(),
        "tail -c +9 '/tmp/tanstack-runs/r1.ndjson' 2>/dev/null | head -c 65536 | base64"
    );
    let err = journal_read_page_command(&p, 0, 0).unwrap_err();
    assert!(err.to_string().contains("max_bytes"));
}

// Other commands (D.7, H4.23–34)

#[test]
fn existence_probe_is_test_f_on_the_journal() {
    assert_eq!(
        journal_exists_command(&paths("r1")),
        "test -f '/tmp/tanstack-runs/r1.ndjson'"
    );
}

#[test]
fn stderr_tail_reads_the_sidecar_base64_framed() {
    let p = paths("r1");
    let cmd = stderr_tail_command(&p, DEFAULT_STDERR_TAIL_BYTES).unwrap();
    assert_eq!(
        cmd,
        "tail -c -4096 '/tmp/tanstack-runs/r1.err' 2>/dev/null | base64"
    );
    assert!(!cmd.contains(".ndjson"));
    assert!(cmd.contains("| base64") && !cmd.contains("-f "));
    assert!(stderr_tail_command(&p, 64).unwrap().contains("tail -c -64"));
}

#[test]
fn zero_max_bytes_is_refused_naming_the_parameter() {
    // Negative and fractional sizes (H4.28, H4.52) cannot be expressed in a u64.
    let p = paths("r1");
    for err in [
        stderr_tail_command(&p, 0).unwrap_err(),
        exit_probe_command(&p, 0).unwrap_err(),
    ] {
        assert_eq!(err, JournalError::InvalidMaxBytes(0));
        assert!(err.to_string().contains("max_bytes"), "{err}");
    }
}

#[test]
fn stderr_tail_and_cleanup_quote_hostile_paths() {
    let p = hostile_paths();
    let tail = stderr_tail_command(&p, 64).unwrap();
    assert!(tail.contains(&shell_quote(&p.stderr)));
    assert_quoted(&tail);
    let cleanup = journal_cleanup_command(&p);
    assert!(cleanup.contains(&shell_quote(&p.journal)));
    assert!(cleanup.contains(&shell_quote(&p.stderr)));
    assert_quoted(&cleanup);
}

#[test]
fn cleanup_removes_exactly_the_two_files_with_rm_f() {
    let cmd = journal_cleanup_command(&paths("r1"));
    assert_eq!(
        cmd,
        "rm -f '/tmp/tanstack-runs/r1.ndjson' '/tmp/tanstack-runs/r1.err'"
    );
    assert!(cmd.starts_with("rm -f "));
    let flags: Vec<&str> = cmd.split(' ').filter(|w| w.starts_with('-')).collect();
    assert_eq!(flags, ["-f"]);
    assert!(!cmd.contains("'/tmp/tanstack-runs'"));
}

// journal_list_command (E.2, H4.35–38)

#[test]
fn list_command_is_byte_exact_for_default_and_explicit_dirs() {
    assert_eq!(
        journal_list_command(None),
        "ls -1 '/tmp/tanstack-runs' 2>/dev/null"
    );
    assert_eq!(
        journal_list_command(Some("/var/journals")),
        "ls -1 '/var/journals' 2>/dev/null"
    );
    assert_eq!(
        journal_list_command(Some("/var/journals/")),
        "ls -1 '/var/journals' 2>/dev/null"
    );
}

#[test]
fn list_command_quotes_a_hostile_dir() {
    assert_eq!(
        journal_list_command(Some("/t'; rm -rf /; echo $(whoami)")),
        r"ls -1 '/t'\''; rm -rf /; echo $(whoami)' 2>/dev/null"
    );
}

// journal_mtime_list_command (E.2, H4.39–42)

#[test]
fn mtime_command_is_byte_exact_with_the_glob_outside_the_quotes() {
    let cmd = journal_mtime_list_command(None);
    assert_eq!(
        cmd,
        "stat -c '%Y %n' '/tmp/tanstack-runs' '/tmp/tanstack-runs'/* 2>/dev/null"
    );
    for absent in ["newermt", "-newer", "printf", "find ", "touch"] {
        assert!(!cmd.contains(absent));
    }
    assert_eq!(cmd.matches('>').count(), 1);
    assert!(cmd.contains("2>/dev/null"));
}

#[test]
fn mtime_command_normalises_the_dir_in_both_operands() {
    assert_eq!(
        journal_mtime_list_command(Some("/var/journals/")),
        "stat -c '%Y %n' '/var/journals' '/var/journals'/* 2>/dev/null"
    );
}

// parse_mtime_listing (E.3, H4.43–47, H15.9)

fn entry(name: &str, mtime_ms: i64) -> MtimeEntry {
    MtimeEntry {
        name: name.into(),
        mtime_ms,
    }
}

#[test]
fn witnessed_listing_gives_each_file_in_milliseconds() {
    let text = "1700000000 /tmp/tanstack-runs\n1700000001 /tmp/tanstack-runs/r1.ndjson\n\
                1700000002 /tmp/tanstack-runs/r1.err\n\n";
    assert_eq!(
        parse_mtime_listing(text, None),
        MtimeListing::Listed(vec![
            entry("r1.ndjson", 1_700_000_001_000),
            entry("r1.err", 1_700_000_002_000)
        ])
    );
}

#[test]
fn empty_output_is_unavailable_and_a_lone_witness_is_an_empty_listing() {
    assert_eq!(parse_mtime_listing("", None), MtimeListing::Unavailable);
    assert_eq!(
        parse_mtime_listing("1700000000 /tmp/tanstack-runs\n", None),
        MtimeListing::Listed(vec![])
    );
}

#[test]
fn a_witness_for_another_directory_is_unavailable() {
    let text = "1700000000 /var/journals\n1700000001 /var/journals/r1.ndjson\n";
    assert_eq!(parse_mtime_listing(text, None), MtimeListing::Unavailable);
}

#[test]
fn diagnostics_nested_paths_and_foreign_files_are_dropped() {
    let text = "1700000000 /tmp/tanstack-runs\n\
                stat: cannot stat '/tmp/tanstack-runs/*': No such file or directory\n\
                1700000003 /tmp/tanstack-runs/sub/r2.ndjson\n\
                1700000004 /etc/passwd\n\
                x1700000006 /tmp/tanstack-runs/r3.ndjson\n\
                1700000005 /tmp/tanstack-runs/r1.ndjson\n";
    assert_eq!(
        parse_mtime_listing(text, None),
        MtimeListing::Listed(vec![entry("r1.ndjson", 1_700_000_005_000)])
    );
}

#[test]
fn an_explicit_dir_parses_its_own_listing_with_or_without_a_slash() {
    let text = "1700000000 /var/journals\n1700000001 /var/journals/r1.ndjson\n";
    let expected = MtimeListing::Listed(vec![entry("r1.ndjson", 1_700_000_001_000)]);
    assert_eq!(parse_mtime_listing(text, Some("/var/journals")), expected);
    assert_eq!(parse_mtime_listing(text, Some("/var/journals/")), expected);
}

#[test]
fn seconds_too_large_for_a_time_drop_the_line() {
    let text = "1700000000 /tmp/tanstack-runs\n99999999999999999999 /tmp/tanstack-runs/r1.ndjson\n";
    assert_eq!(
        parse_mtime_listing(text, None),
        MtimeListing::Listed(vec![])
    );
}

// exit_probe_command (D.4, H4.48–53)

#[test]
fn exit_probe_command_is_byte_exact_at_default_and_custom_sizes() {
    let p = paths("r1");
    let cmd = exit_probe_command(&p, DEFAULT_EXIT_PROBE_BYTES).unwrap();
    assert_eq!(
        cmd,
        "tail -c -4096 '/tmp/tanstack-runs/r1.ndjson' 2>/dev/null | base64"
    );
    assert!(!cmd.contains(".err"));
    assert!(cmd.contains("| base64") && !cmd.contains("-f "));
    assert_eq!(
        exit_probe_command(&p, 64).unwrap(),
        "tail -c -64 '/tmp/tanstack-runs/r1.ndjson' 2>/dev/null | base64"
    );
}

#[test]
fn exit_probe_command_quotes_a_hostile_run_id() {
    let p = hostile_paths();
    let cmd = exit_probe_command(&p, 64).unwrap();
    assert!(cmd.contains(&shell_quote(&p.journal)));
    assert_quoted(&cmd);
}

// parse_journal_exit / parse_exit_sentinel (D.5, H4.54–62, H15.10)

const AGENT_LINE: &str = r#"{"type":"assistant","text":"hi"}"#;

fn sentinel(code: i64) -> String {
    exit_sentinel_line(&paths("pje-1"), code)
}

fn scan(text: &str) -> Option<i64> {
    parse_journal_exit(text, &paths("pje-1"))
}

#[test]
fn the_genuine_sentinel_after_agent_output_gives_its_code() {
    assert_eq!(scan(&format!("{AGENT_LINE}\n{}\n", sentinel(7))), Some(7));
    assert_eq!(scan(&format!("{}\n", sentinel(0))), Some(0));
}

#[test]
fn agent_output_alone_or_nothing_has_no_exit() {
    assert_eq!(scan(&format!("{AGENT_LINE}\n{AGENT_LINE}\n")), None);
    assert_eq!(scan(""), None);
}

#[test]
fn a_partial_first_line_is_skipped() {
    assert_eq!(
        scan(&format!("pe\":\"assistant\"}}\n{}\n", sentinel(3))),
        Some(3)
    );
}

#[test]
fn text_mentioning_the_sentinel_key_is_not_a_sentinel() {
    assert_eq!(
        scan(r#"{"text":"the __exit sentinel is written last"}"#),
        None
    );
}

#[test]
fn an_unnonced_sentinel_is_agent_output() {
    assert_eq!(scan("{\"__exit\":0}\n"), None);
    assert_eq!(scan(&format!("{AGENT_LINE}\n{{\"__exit\":0}}\n")), None);
    assert_eq!(scan("{\"__exit\":7}"), None);
}

#[test]
fn another_runs_genuine_sentinel_is_ignored() {
    let other = exit_sentinel_line(&paths("pje-other"), 0);
    assert_eq!(scan(&format!("{other}\n")), None);
}

#[test]
fn the_last_genuine_sentinel_wins() {
    let text = format!("{}\n{AGENT_LINE}\n{}\n", sentinel(0), sentinel(7));
    assert_eq!(scan(&text), Some(7));
}

#[test]
fn non_integer_exit_values_are_refused_not_coerced() {
    let nonce = exit_nonce("pje-1");
    for value in ["\"weird\"", "null", "1.5", "true", "\"7\"", "[0]", "{}"] {
        let line = format!(r#"{{"__exit":{value},"__nonce":"{nonce}"}}"#);
        assert_eq!(scan(&line), None, "for __exit {value}");
    }
}

#[test]
fn any_integer_valued_number_is_an_exit_code_with_any_key_order_and_extra_keys() {
    let nonce = exit_nonce("pje-1");
    assert_eq!(
        scan(&format!(r#"{{"__exit":-3,"__nonce":"{nonce}"}}"#)),
        Some(-3)
    );
    assert_eq!(
        scan(&format!(r#"{{"__exit":1e0,"__nonce":"{nonce}","x":1}}"#)),
        Some(1)
    );
    assert_eq!(
        scan(&format!("  {{\"__nonce\":\"{nonce}\",\"__exit\":4}} \r\n")),
        Some(4)
    );
}

#[test]
fn a_sentinel_on_a_final_line_without_newline_counts() {
    assert_eq!(scan(&format!("{AGENT_LINE}\n{}", sentinel(9))), Some(9));
}

#[test]
fn an_exit_value_beyond_i64_is_refused() {
    let nonce = exit_nonce("pje-1");
    for value in ["1e300", "9223372036854775808", "1e400"] {
        let line = format!(r#"{{"__exit":{value},"__nonce":"{nonce}"}}"#);
        assert_eq!(scan(&line), None, "for __exit {value}");
    }
}

#[test]
fn a_single_line_is_a_sentinel_only_when_genuine() {
    let nonce = exit_nonce("pje-1");
    assert_eq!(parse_exit_sentinel(&sentinel(7), &nonce), Some(7));
    for line in ["{\"__exit\":7}", "not json", "", "[1,2]", "null", "7"] {
        assert_eq!(parse_exit_sentinel(line, &nonce), None, "for {line:?}");
    }
}

// A sentinel after a partial last line (issue 12.5): not in the reference's scan.

#[test]
fn a_genuine_sentinel_after_a_partial_last_line_gives_its_code() {
    let text = format!("{AGENT_LINE}\n{{\"delta\":\"All done\"}}{}\n", sentinel(0));
    assert_eq!(scan(&text), Some(0));
    // Without the final newline too (the probe's window may end there).
    assert_eq!(
        scan(&format!("{{\"delta\":\"x\"}}{}", sentinel(3))),
        Some(3)
    );
    // After a line cut mid-string (an agent killed mid-write): 137 = 128 + SIGKILL.
    assert_eq!(
        scan(&format!("{{\"delta\":\"unfini{}", sentinel(137))),
        Some(137)
    );
}

#[test]
fn find_exit_sentinel_reports_the_partial_line_before_the_sentinel() {
    let nonce = exit_nonce("pje-1");
    let line = format!("{{\"delta\":\"All done\"}}{}", sentinel(0));
    let found = find_exit_sentinel(&line, &nonce).unwrap();
    assert_eq!(found.exit_code, 0);
    assert_eq!(found.partial_line, "{\"delta\":\"All done\"}");
    assert_eq!(line.len() - found.partial_line.len(), sentinel(0).len());
    let line = sentinel(7);
    let whole = find_exit_sentinel(&line, &nonce).unwrap();
    assert_eq!((whole.exit_code, whole.partial_line), (7, ""));
}

#[test]
fn only_the_exact_canonical_nonced_sentinel_counts_after_a_partial_line() {
    let nonce = exit_nonce("pje-1");
    let other = exit_nonce("pje-other");
    let forged = [
        // Unnonced, another run's nonce, a truncated nonce.
        "{\"delta\":\"x\"}{\"__exit\":0}".to_string(),
        format!(r#"{{"delta":"x"}}{{"__exit":0,"__nonce":"{other}"}}"#),
        format!(
            r#"{{"delta":"x"}}{{"__exit":0,"__nonce":"{}"}}"#,
            &nonce[1..]
        ),
        // Not what `printf %d "$?"` writes: other key order, spaces, extra keys, a sign, a
        // leading zero, a float, a string, no digits.
        format!(r#"{{"delta":"x"}}{{"__nonce":"{nonce}","__exit":0}}"#),
        format!(r#"{{"delta":"x"}}{{"__exit": 0,"__nonce":"{nonce}"}}"#),
        format!(r#"{{"delta":"x"}}{{"__exit":0,"__nonce":"{nonce}","x":1}}"#),
        format!(r#"{{"delta":"x"}}{{"__exit":-1,"__nonce":"{nonce}"}}"#),
        format!(r#"{{"delta":"x"}}{{"__exit":07,"__nonce":"{nonce}"}}"#),
        format!(r#"{{"delta":"x"}}{{"__exit":1.0,"__nonce":"{nonce}"}}"#),
        format!(r#"{{"delta":"x"}}{{"__exit":"0","__nonce":"{nonce}"}}"#),
        format!(r#"{{"delta":"x"}}{{"__exit":,"__nonce":"{nonce}"}}"#),
        format!(r#"{{"delta":"x"}}{{"__exit":99999999999999999999,"__nonce":"{nonce}"}}"#),
        // Not at the end of the line: something follows it.
        format!("{{\"delta\":\"x\"}}{} ", sentinel(0)),
        format!("{{\"delta\":\"x\"}}{}\r", sentinel(0)),
        format!("{{\"delta\":\"x\"}}{}{{}}", sentinel(0)),
        // Inside a JSON string, the quotes are escaped.
        format!(r#"{{"text":"{}"}}"#, sentinel(0).replace('"', "\\\"")),
    ];
    for line in &forged {
        assert_eq!(find_exit_sentinel(line, &nonce), None, "for {line:?}");
        assert_eq!(scan(&format!("{line}\n")), None, "for {line:?}");
    }
}

#[test]
fn the_last_genuine_sentinel_wins_in_either_form() {
    let text = format!("{}\n{{\"delta\":\"again\"}}{}\n", sentinel(0), sentinel(5));
    assert_eq!(scan(&text), Some(5));
    let text = format!("{{\"delta\":\"a\"}}{}\n{}\n", sentinel(5), sentinel(0));
    assert_eq!(scan(&text), Some(0));
}

proptest! {
    /// Whatever the agent printed last, with or without a newline, the wrapper's sentinel after
    /// it is found with its code; and text without the nonce never passes for one.
    #[test]
    fn the_sentinel_after_any_output_is_found_and_nothing_without_the_nonce_is(
        output in "(\\PC|\n|\r|\"|\\{|\\}|[0-9:,])*",
        status in 0i64..=255,
    ) {
        let p = paths("pje-1");
        let line = exit_sentinel_line(&p, status);
        prop_assert_eq!(parse_journal_exit(&format!("{output}{line}\n"), &p), Some(status));
        prop_assert_eq!(parse_journal_exit(&format!("{output}\n{line}"), &p), Some(status));
        prop_assert_eq!(parse_journal_exit(&output, &p), None);
    }
}

// decode_journal_run_id (E.6, H4.63–76, H15.10)

fn decode(name: &str) -> DecodedJournalName {
    decode_journal_run_id(name)
}

fn run_id(id: &str) -> DecodedJournalName {
    DecodedJournalName::RunId(id.into())
}

#[test]
fn non_truncating_ids_round_trip_through_both_file_names() {
    let mut ids: Vec<String> = adversarial_ids()
        .into_iter()
        .filter(|id| id.len() < 200)
        .collect();
    ids.extend(
        ["run-123", INJECTION, " ", "\n"]
            .iter()
            .map(|s| s.to_string()),
    );
    ids.push("a".repeat(200));
    for id in ids {
        let p = paths(&id);
        for path in [&p.journal, &p.stderr] {
            let name = path.rsplit('/').next().unwrap();
            assert_eq!(decode(name), run_id(&id), "for {id:?} via {name}");
        }
    }
}

#[test]
fn escaped_utf8_decodes_to_exactly_the_original_code_points() {
    let decoded = decode("_e6_97_a5_e6_9c_ac_e8_aa_9e.ndjson");
    assert_eq!(decoded, run_id("日本語"));
    if let DecodedJournalName::RunId(id) = decoded {
        assert_eq!(id.chars().count(), 3);
        assert!(!id.contains('\u{fffd}'));
    }
}

#[test]
fn a_hash_truncated_name_decodes_to_truncated() {
    let name = journal_name(&"a".repeat(201));
    let (token, ext) = name.split_at(200);
    assert_eq!(ext, ".ndjson");
    assert!(token.starts_with(&"a".repeat(183)));
    assert_eq!(&token[183..184], "-");
    assert!(token[184..]
        .bytes()
        .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)));
    assert_eq!(decode(&name), DecodedJournalName::Truncated);
}

#[test]
fn a_legitimate_id_shaped_like_a_truncation_is_refused_as_truncated() {
    let id = format!("{}-0123456789abcdef", "a".repeat(183));
    assert_eq!(encode_run_id(&id).unwrap(), id);
    assert_eq!(
        decode(&format!("{id}.ndjson")),
        DecodedJournalName::Truncated
    );
}

#[test]
fn a_token_over_the_cap_is_truncated_and_one_at_the_cap_decodes() {
    assert_eq!(
        decode(&format!("{}.ndjson", "a".repeat(201))),
        DecodedJournalName::Truncated
    );
    assert_eq!(
        decode(&format!("{}.ndjson", "a".repeat(200))),
        run_id(&"a".repeat(200))
    );
}

#[test]
fn broken_escapes_are_malformed() {
    for token in ["_", "a_", "_4", "a_4", "_zz", "a_2z", "_4-", "a_g0b"] {
        assert_eq!(
            decode(&format!("{token}.ndjson")),
            DecodedJournalName::Malformed,
            "for {token}"
        );
    }
}

#[test]
fn escapes_decode_in_either_hex_case() {
    assert_eq!(decode("_2F.ndjson"), run_id("/"));
    assert_eq!(decode("_2f.ndjson"), run_id("/"));
}

#[test]
fn invalid_utf8_is_malformed() {
    for token in ["_ff", "_fe_ff", "_c3", "_e6_97", "_80", "_ed_a0_80"] {
        assert_eq!(
            decode(&format!("{token}.ndjson")),
            DecodedJournalName::Malformed,
            "for {token}"
        );
    }
}

#[test]
fn characters_outside_the_encoding_are_malformed() {
    for token in ["a/b", "a\\b", "a b", "a;b", "a$b", "a'b", "a\nb", "ü"] {
        assert_eq!(
            decode(&format!("{token}.ndjson")),
            DecodedJournalName::Malformed,
            "for {token:?}"
        );
    }
}

#[test]
fn names_without_a_journal_suffix_or_token_are_malformed() {
    for name in ["", "r1", "r1.json", "r1.ndjson.bak", ".ndjson", ".err"] {
        assert_eq!(decode(name), DecodedJournalName::Malformed, "for {name:?}");
    }
}

#[test]
fn only_the_last_suffix_is_stripped() {
    assert_eq!(decode("x.ndjson.ndjson"), run_id("x.ndjson"));
    assert_eq!(decode("x.ndjson.err"), run_id("x.ndjson"));
}

#[test]
fn a_device_name_round_trips_through_its_full_escape() {
    assert_eq!(decode("_43_4f_4e.ndjson"), run_id("CON"));
    assert_eq!(journal_name("CON"), "_43_4f_4e.ndjson");
}

#[test]
fn dot_names_decode_to_dot_ids() {
    assert_eq!(decode("..ndjson"), run_id("."));
    assert_eq!(decode("...ndjson"), run_id(".."));
    assert_eq!(decode(".hidden.ndjson"), run_id(".hidden"));
}

#[test]
fn distinct_canonical_names_decode_to_distinct_ids() {
    let ids: std::collections::HashSet<String> =
        ["r1", "_5f40", "_40", "_2f", "CONtainer", "_43_4f_4e"]
            .iter()
            .map(|t| match decode(&format!("{t}.ndjson")) {
                DecodedJournalName::RunId(id) => id,
                other => panic!("{t} did not decode: {other:?}"),
            })
            .collect();
    assert_eq!(ids.len(), 6);
}

#[test]
fn non_canonical_spellings_decode_like_the_reference() {
    assert_eq!(decode("A.ndjson"), run_id("A"));
    assert_eq!(decode("_41.ndjson"), run_id("A"));
    assert_eq!(decode("CON.ndjson"), run_id("CON"));
}

// Defaults (H15.1, H15.3, H3.16, H3.22)

#[test]
fn defaults_match_the_reference() {
    assert_eq!(DEFAULT_ORPHAN_TTL_MS, 3_600_000);
    assert_eq!(DEFAULT_MAX_DELETES, 200);
    assert_eq!(DEFAULT_EXIT_PROBE_BYTES, 4096);
    assert_eq!(DEFAULT_STDERR_TAIL_BYTES, 4096);
}

proptest! {
    #[test]
    fn every_non_truncating_unicode_id_round_trips(id in "\\PC{1,16}|[\\x00-\\x7f]{1,66}|[_@/. ]{1,66}") {
        let encoded = encode_run_id(&id).unwrap();
        prop_assume!(encoded.len() < 200);
        prop_assert_eq!(decode(&format!("{encoded}.ndjson")), run_id(&id));
        prop_assert_eq!(decode(&format!("{encoded}.err")), run_id(&id));
    }

    #[test]
    fn encoded_names_are_shell_and_path_safe(id in "\\PC{1,300}") {
        let encoded = encode_run_id(&id).unwrap();
        prop_assert!(encoded.len() <= 200);
        prop_assert!(encoded.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)));
    }
}
