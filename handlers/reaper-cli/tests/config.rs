//! Settings: every bad value names the setting as the user gave it, what was wrong and what is
//! accepted, and exits 1 before anything is opened.

mod common;

use common::{reaper, run};

/// Flags, environment, what the message must name, what it must say is accepted.
type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str, &'a str);

#[test]
fn bad_values_name_the_setting_say_what_is_accepted_and_exit_1() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("never-created.db");
    let cases: &[Case] = &[
        (
            &["--run-budget", "-5s"],
            &[],
            "invalid value for --run-budget: \"-5s\"",
            "expected a duration like 30s, 5m or 250ms (10ms..1h)",
        ),
        (
            &[],
            &[("REAPER_RUN_BUDGET", "-5s")],
            "invalid value for REAPER_RUN_BUDGET: \"-5s\"",
            "(10ms..1h)",
        ),
        (
            &[],
            &[("REAPER_RUN_BUDGET", "30")],
            "invalid value for REAPER_RUN_BUDGET: \"30\"",
            "a duration like 30s",
        ),
        (
            &[],
            &[("REAPER_RUN_BUDGET", "0s")],
            "REAPER_RUN_BUDGET",
            "(10ms..1h)",
        ),
        (&["--run-budget", "30d"], &[], "--run-budget", "(10ms..1h)"),
        (
            &[],
            &[("REAPER_QUIET_WINDOW", "soon")],
            "invalid value for REAPER_QUIET_WINDOW",
            "(0ms..1m)",
        ),
        (
            &[],
            &[("REAPER_DETACHED_TTL", "forever")],
            "invalid value for REAPER_DETACHED_TTL: \"forever\"",
            "(1s..3650d)",
        ),
        (
            &["--max-runs", "-1"],
            &[],
            "invalid value for --max-runs: \"-1\"",
            "a whole number from 1 to 1000",
        ),
        (
            &[],
            &[("REAPER_MAX_RUNS", "lots")],
            "REAPER_MAX_RUNS",
            "a whole number",
        ),
        (
            &["--concurrency", "0"],
            &[],
            "invalid value for --concurrency: \"0\"",
            "a whole number from 1 to 64",
        ),
        (
            &[],
            &[("REAPER_CONCURRENCY", "500")],
            "REAPER_CONCURRENCY",
            "a whole number from 1 to 64",
        ),
        (
            &["--max-starts", "1001"],
            &[],
            "invalid value for --max-starts: \"1001\"",
            "a whole number from 0 to 1000",
        ),
        (
            &[],
            &[("REAPER_MAX_STARTS", "some")],
            "REAPER_MAX_STARTS",
            "a whole number",
        ),
        (
            &[],
            &[("REAPER_LOG_FORMAT", "xml")],
            "invalid value for REAPER_LOG_FORMAT: \"xml\"",
            "expected text or json",
        ),
        (
            &[],
            &[("REAPER_LOG", "reaper=loud")],
            "invalid value for REAPER_LOG",
            "expected tracing directives",
        ),
        (
            &[],
            &[("REAPER_JOURNAL_DIR", "journals")],
            "invalid value for --journal-dir (REAPER_JOURNAL_DIR): \"journals\"",
            "an absolute path",
        ),
    ];
    for (args, env, names, accepted) in cases {
        let mut cmd = reaper();
        cmd.arg("sweep")
            .arg("--db")
            .arg(&db)
            .args(["--sandboxes", "/"]);
        if !env.iter().any(|(k, _)| *k == "REAPER_DETACHED_TTL") {
            cmd.args(["--detached-ttl", "10m"]);
        }
        cmd.args(*args).envs(env.iter().copied());
        let (code, stdout, stderr) = run(&mut cmd);
        assert_eq!(code, 1, "{args:?} {env:?}: stdout {stdout} stderr {stderr}");
        assert!(
            stderr.contains(names),
            "{args:?} {env:?}: {stderr:?} should name {names:?}"
        );
        assert!(
            stderr.contains(accepted),
            "{args:?} {env:?}: {stderr:?} should say {accepted:?}"
        );
        assert!(!db.exists(), "a bad setting must not touch the database");
    }
}

#[test]
fn watch_prune_and_status_settings_are_checked_the_same_way() {
    for (command, env, names) in [
        (
            "watch",
            ("REAPER_EVERY", "1"),
            "invalid value for REAPER_EVERY: \"1\"",
        ),
        (
            "watch",
            ("REAPER_PRUNE_EVERY", "5ms"),
            "invalid value for REAPER_PRUNE_EVERY",
        ),
        (
            "watch",
            ("REAPER_ORPHAN_TTL", "old"),
            "invalid value for REAPER_ORPHAN_TTL",
        ),
        (
            "prune",
            ("REAPER_ORPHAN_TTL", "old"),
            "invalid value for REAPER_ORPHAN_TTL",
        ),
        (
            "prune",
            ("REAPER_MAX_DELETES", "1e9"),
            "invalid value for REAPER_MAX_DELETES",
        ),
        (
            "prune",
            ("REAPER_EVENT_RETENTION", "-1d"),
            "invalid value for REAPER_EVENT_RETENTION",
        ),
        (
            "status",
            ("REAPER_DETACHED_TTL", "0ms"),
            "invalid value for REAPER_DETACHED_TTL",
        ),
    ] {
        let mut cmd = reaper();
        cmd.args([command, "--db", "/nonexistent/reaper.db"])
            .env(env.0, env.1);
        if command != "status" {
            cmd.args(["--sandboxes", "/"]);
        }
        if command == "watch" {
            cmd.args(["--detached-ttl", "1m"]);
        }
        let (code, _, stderr) = run(&mut cmd);
        assert_eq!(code, 1, "{command} {env:?}: {stderr}");
        assert!(stderr.contains(names), "{command} {env:?}: {stderr}");
        assert!(stderr.contains("expected"), "{stderr}");
    }
}

#[test]
fn a_flag_wins_over_its_environment_variable() {
    let (code, _, stderr) = run(reaper()
        .args([
            "sweep",
            "--db",
            "/nonexistent/reaper.db",
            "--sandboxes",
            "/",
            "--detached-ttl",
            "1m",
        ])
        .args(["--run-budget", "5s"])
        .env("REAPER_RUN_BUDGET", "nonsense"));
    assert_eq!(
        code, 3,
        "the setting is fine, so the missing database is the error: {stderr}"
    );
    assert!(stderr.contains("does not exist"), "{stderr}");
}

#[test]
fn the_ttl_has_no_default_and_its_absence_names_the_variable() {
    let (code, _, stderr) = run(reaper().args(["sweep", "--db", "x.db", "--sandboxes", "/"]));
    assert_eq!(code, 1);
    assert!(stderr.contains("missing setting"), "{stderr}");
    assert!(
        stderr.contains("--detached-ttl") && stderr.contains("REAPER_DETACHED_TTL"),
        "{stderr}"
    );
}

#[test]
fn a_usage_error_exits_1_because_2_means_a_run_failed() {
    let (code, _, stderr) = run(reaper().args(["sweep", "--no-such-flag"]));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("--no-such-flag"), "{stderr}");
    let (code, _, _) = run(reaper().arg("explode"));
    assert_eq!(code, 1);
    let (code, stdout, _) = run(reaper().arg("--help"));
    assert_eq!(code, 0);
    assert!(stdout.contains("Exit codes"), "{stdout}");
}

/// The README's settings table is the one `reaper settings` prints from the code.
#[test]
fn readme_settings_table_is_the_one_reaper_settings_prints() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let (code, printed, stderr) = run(reaper().arg("settings"));
    assert_eq!(code, 0, "{stderr}");
    let table = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| {
                l.starts_with("| ") && l.contains("`REAPER_") || l.starts_with("| Setting |")
            })
            .map(str::to_string)
            .collect()
    };
    let generated = table(&printed);
    assert!(generated.len() >= 16, "{printed}");
    assert_eq!(
        table(&readme),
        generated,
        "copy the table `reaper settings` prints into the README"
    );
}

#[test]
fn a_bad_reaper_json_names_the_variable_and_what_it_accepts() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("never-created.db");
    let (code, stdout, stderr) = run(reaper()
        .args(["status", "--db"])
        .arg(&db)
        .env("REAPER_JSON", "banana"));
    assert_eq!(code, 1, "{stdout} {stderr}");
    assert!(
        stderr.contains("invalid value for REAPER_JSON: \"banana\": expected true or false"),
        "{stderr}"
    );
    assert!(!stderr.contains("for '--json'"), "{stderr}");
    assert!(!db.exists());
}

#[test]
fn reaper_json_true_or_false_is_honoured_and_the_flag_wins() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("reaper.db");
    drop(reaper_sqlite::SqliteStore::open(&db).unwrap());
    let status = |json: &str, flag: bool| {
        let mut cmd = reaper();
        cmd.args(["status", "--db"])
            .arg(&db)
            .env("REAPER_JSON", json);
        if flag {
            cmd.arg("--json");
        }
        let (code, stdout, stderr) = run(&mut cmd);
        assert_eq!(code, 0, "{stderr}");
        serde_json::from_str::<serde_json::Value>(&stdout).is_ok()
    };
    assert!(status("true", false));
    assert!(status("TRUE", false));
    assert!(!status("false", false));
    assert!(status("false", true));
}

#[test]
fn durations_past_the_stated_limit_are_refused_naming_the_setting_and_the_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("never-created.db");
    let sweep = |args: &[&str], env: &[(&str, &str)]| {
        let mut cmd = reaper();
        cmd.arg("sweep")
            .arg("--db")
            .arg(&db)
            .args(["--sandboxes", "/", "--detached-ttl", "10m"])
            .args(args)
            .envs(env.iter().copied());
        run(&mut cmd)
    };
    // Each past the limit the settings registry gives it (the same on every binary).
    for (args, env, names, limit) in [
        (
            &["--run-budget", "1h 1ms"][..],
            &[][..],
            "--run-budget",
            "1h",
        ),
        (
            &[],
            &[("REAPER_RUN_BUDGET", "1h 1s")][..],
            "REAPER_RUN_BUDGET",
            "1h",
        ),
        (&["--quiet-window", "1m 1ms"], &[], "--quiet-window", "1m"),
        (
            &[],
            &[("REAPER_PROGRESS_AFTER", "24d 20h")],
            "REAPER_PROGRESS_AFTER",
            "24d",
        ),
    ] {
        let (code, _, stderr) = sweep(args, env);
        assert_eq!(code, 1, "{args:?} {env:?}: {stderr}");
        assert!(
            stderr.contains(&format!("invalid value for {names}"))
                && stderr.contains(&format!("it is longer than the limit of {limit}")),
            "{args:?} {env:?}: {stderr}"
        );
    }
    // Exactly the limit is accepted (the run then stops at the missing database, exit 3).
    let (code, _, stderr) = sweep(&["--run-budget", "1h"], &[]);
    assert_eq!(code, 3, "{stderr}");
    let (code, _, stderr) = run(reaper()
        .args(["status", "--detached-ttl", "3650d 1s", "--db"])
        .arg(&db));
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("--detached-ttl") && stderr.contains("longer than the limit of 3650d"),
        "{stderr}"
    );
}

/// The serverless handlers' and the Worker's former names of settings the CLI shares: read when
/// neither the flag nor the new variable is set, with one warning; the new names win.
#[test]
fn old_names_of_renamed_settings_are_read_with_one_warning_and_the_new_names_win() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("never-created.db");
    let cmd = |command: &str, env: &[(&str, &str)]| {
        let mut cmd = reaper();
        cmd.args([command, "--db"]).arg(&db);
        if command != "status" {
            cmd.args(["--sandboxes", "/"]);
        }
        if command != "prune" {
            cmd.args(["--detached-ttl", "10m"]);
        }
        cmd.envs(env.iter().copied());
        run(&mut cmd)
    };
    // The old name's value is used: out of range, it is refused under the name it was given.
    for (command, old, value, new) in [
        ("sweep", "REAPER_FENCE_QUIET", "5m", "REAPER_QUIET_WINDOW"),
        (
            "prune",
            "REAPER_LOG_RETENTION",
            "1m",
            "REAPER_EVENT_RETENTION",
        ),
        ("watch", "REAPER_INTERVAL", "2d", "REAPER_EVERY"),
    ] {
        let (code, _, stderr) = cmd(command, &[(old, value)]);
        assert_eq!(code, 1, "{old}: {stderr}");
        assert!(
            stderr.contains(&format!("invalid value for {old}: {value:?}")),
            "{old}: {stderr}"
        );
        let warning = format!("reaper: warning: {old} is deprecated: rename it to {new}");
        assert_eq!(stderr.matches(&warning).count(), 1, "{stderr}");
    }
    // A good old value is taken (the sweep gets as far as the missing database, exit 3).
    let (code, _, stderr) = cmd("sweep", &[("REAPER_FENCE_QUIET", "3s")]);
    assert_eq!(code, 3, "{stderr}");
    assert!(
        stderr.contains("REAPER_FENCE_QUIET is deprecated"),
        "{stderr}"
    );
    // Both set: the new one wins, the old one is still warned about.
    let (code, _, stderr) = cmd(
        "sweep",
        &[
            ("REAPER_QUIET_WINDOW", "1s"),
            ("REAPER_FENCE_QUIET", "not a duration"),
        ],
    );
    assert_eq!(code, 3, "{stderr}");
    assert!(
        stderr.contains("(REAPER_QUIET_WINDOW is also set and wins)"),
        "{stderr}"
    );
    // The flag wins as well.
    let (code, _, stderr) = run(reaper()
        .args(["status", "--every", "1m", "--db"])
        .arg(&db)
        .env("REAPER_INTERVAL", "soon"));
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.contains("REAPER_INTERVAL is deprecated"), "{stderr}");
}

/// `reaper settings --all` prints the repository's SETTINGS.md.
#[test]
fn reaper_settings_all_prints_the_repositorys_settings_md() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../SETTINGS.md")).unwrap();
    let (code, printed, stderr) = run(reaper().args(["settings", "--all"]));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(printed, doc);
}
