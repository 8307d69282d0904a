//! Help that fits a terminal, colour that honours `NO_COLOR` on a terminal, and the shell
//! completions and man page generated from the same clap definition. The terminal cases run the
//! real binary on a real pseudo-terminal.

mod common;

use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::{Command, Stdio};

use common::{reaper, run};

/// Every line of `text` at most `width` columns (characters: the help has no wide ones).
fn too_long(text: &str, width: usize) -> Vec<String> {
    text.lines()
        .filter(|l| l.chars().count() > width)
        .map(str::to_string)
        .collect()
}

#[test]
fn no_help_line_exceeds_100_columns_for_the_root_or_any_command() {
    for args in [
        &["--help"][..],
        &["-h"],
        &["sweep", "--help"],
        &["watch", "--help"],
        &["prune", "--help"],
        &["status", "--help"],
        &["demo", "--help"],
        &["completions", "--help"],
    ] {
        let (code, help, stderr) = run(reaper().args(args));
        assert_eq!(code, 0, "{args:?}: {stderr}");
        let long = too_long(&help, 100);
        assert!(
            long.is_empty(),
            "reaper {args:?}: lines over 100 columns: {long:#?}"
        );
    }
    let (_, help, _) = run(reaper().arg("--help"));
    assert!(
        help.contains("REAPER_DETACHED_TTL") && help.contains("Exit codes"),
        "{help}"
    );
}

#[test]
fn help_wraps_at_a_narrower_width_given_by_columns() {
    let (code, help, _) = run(reaper().arg("--help").env("COLUMNS", "60"));
    assert_eq!(code, 0);
    let long = too_long(&help, 60);
    assert!(long.is_empty(), "lines over 60 columns: {long:#?}");
    assert!(help.contains("REAPER_EVENT_RETENTION"), "{help}");
}

/// A pseudo-terminal of `cols` columns: (the side the program writes to, the side we read).
fn pty(cols: u16) -> (OwnedFd, std::fs::File) {
    let size = nix::pty::Winsize {
        ws_row: 50,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let nix::pty::OpenptyResult { master, slave } =
        nix::pty::openpty(Some(&size), None).expect("openpty");
    (slave, std::fs::File::from(master))
}

/// Runs `cmd` with stdout (or stderr) on a terminal and returns what it wrote there, and its
/// exit code. The reader stops at EIO, which Linux returns once the program has exited and
/// closed the terminal's last writer.
fn on_terminal(mut cmd: Command, cols: u16, stream: &str) -> (i32, String) {
    let (slave, mut master) = pty(cols);
    let tty = Stdio::from(slave.try_clone().unwrap());
    match stream {
        "stdout" => cmd.stdout(tty).stderr(Stdio::null()),
        _ => cmd.stderr(tty).stdout(Stdio::null()),
    };
    let mut child = cmd.spawn().expect("reaper runs");
    drop(cmd);
    drop(slave);
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match master.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(e) if e.raw_os_error() == Some(nix::libc::EIO) => break,
            Err(e) => panic!("reading the terminal: {e}"),
        }
    }
    let code = child.wait().unwrap().code().expect("exited with a code");
    // The terminal turns \n into \r\n.
    (code, String::from_utf8_lossy(&bytes).replace("\r\n", "\n"))
}

#[test]
fn help_on_a_terminal_wraps_at_the_terminal_width() {
    let mut cmd = reaper();
    cmd.arg("--help");
    let (code, help) = on_terminal(cmd, 72, "stdout");
    assert_eq!(code, 0, "{help}");
    assert!(help.contains("REAPER_DETACHED_TTL"), "{help}");
    let long = too_long(&help, 72);
    assert!(
        long.is_empty(),
        "lines over the terminal's 72 columns: {long:#?}"
    );
}

/// A sweep of an empty database, which logs `sweep complete` at info level on stderr.
fn logging_sweep(dir: &Path) -> Command {
    let db = dir.join("reaper.db");
    let sandboxes = dir.join("sandboxes");
    std::fs::write(&db, b"").unwrap();
    std::fs::create_dir_all(&sandboxes).unwrap();
    let mut cmd = reaper();
    cmd.arg("sweep")
        .arg("--db")
        .arg(&db)
        .arg("--sandboxes")
        .arg(&sandboxes)
        .args(["--detached-ttl", "10m", "--log", "info"]);
    cmd
}

#[test]
fn logs_on_a_terminal_are_coloured_unless_no_color_is_set_or_color_is_never() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, coloured) = on_terminal(logging_sweep(tmp.path()), 100, "stderr");
    assert_eq!(code, 0, "{coloured}");
    assert!(coloured.contains("sweep complete"), "{coloured}");
    assert!(
        coloured.contains("\x1b["),
        "a terminal gets colour: {coloured:?}"
    );

    let mut cmd = logging_sweep(tmp.path());
    cmd.env("NO_COLOR", "1");
    let (code, plain) = on_terminal(cmd, 100, "stderr");
    assert_eq!(code, 0, "{plain}");
    assert!(plain.contains("sweep complete"), "{plain}");
    assert!(
        !plain.contains('\x1b'),
        "NO_COLOR=1 on a terminal: {plain:?}"
    );

    let mut cmd = logging_sweep(tmp.path());
    cmd.args(["--color", "never"]);
    let (_, never) = on_terminal(cmd, 100, "stderr");
    assert!(
        never.contains("sweep complete") && !never.contains('\x1b'),
        "{never:?}"
    );

    let (code, _, piped) = run(logging_sweep(tmp.path()).args(["--color", "always"]));
    assert_eq!(code, 0, "{piped}");
    assert!(
        piped.contains("\x1b["),
        "--color always colours a pipe too: {piped:?}"
    );
}

#[test]
fn bash_completions_are_a_valid_script_that_completes_every_command() {
    let (code, script, stderr) = run(reaper().args(["completions", "bash"]));
    assert_eq!(code, 0, "{stderr}");
    for word in [
        "sweep",
        "watch",
        "prune",
        "status",
        "demo",
        "--detached-ttl",
        "--color",
    ] {
        assert!(script.contains(word), "no {word} in:\n{script}");
    }
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("reaper.bash");
    std::fs::write(&file, &script).unwrap();
    let checked = Command::new("bash").arg("-n").arg(&file).output().unwrap();
    assert!(
        checked.status.success(),
        "bash -n: {}",
        String::from_utf8_lossy(&checked.stderr)
    );
    // Sourced and asked, it offers the commands for `reaper sw`.
    let asked = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source {}; COMP_WORDS=(reaper sw); COMP_CWORD=1; _reaper reaper sw reaper; \
             printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            file.display()
        ))
        .output()
        .unwrap();
    let offered = String::from_utf8_lossy(&asked.stdout);
    assert!(offered.lines().any(|l| l == "sweep"), "{offered}");
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let (code, script, stderr) = run(reaper().args(["completions", shell]));
        assert_eq!(code, 0, "{shell}: {stderr}");
        assert!(script.contains("sweep"), "{shell}: {script}");
    }
    let (code, _, stderr) = run(reaper().args(["completions", "tcsh"]));
    assert_eq!(code, 1, "an unknown shell is a usage error: {stderr}");
}

#[test]
fn the_man_page_names_every_command_and_setting_and_renders() {
    let (code, page, stderr) = run(reaper().arg("man"));
    assert_eq!(code, 0, "{stderr}");
    assert!(
        page.starts_with(".ie") || page.contains(".TH reaper 1"),
        "{page}"
    );
    assert!(page.contains(".TH reaper 1"), "{page}");
    for word in [
        "sweep",
        "watch",
        "prune",
        "status",
        "REAPER_DETACHED_TTL",
        "Exit codes",
    ] {
        assert!(page.contains(word), "no {word} in the man page");
    }
    // groff renders it (the man page viewer's formatter; -P-cbou: plain text, no overstrikes),
    // when this machine has it.
    if Command::new("groff").arg("--version").output().is_ok() {
        let mut groff = Command::new("groff")
            .args(["-man", "-Tutf8", "-ww", "-P-cbou"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        groff
            .stdin
            .take()
            .unwrap()
            .write_all(page.as_bytes())
            .unwrap();
        let out = groff.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains("SUBCOMMANDS") && text.contains("sweep"),
            "{text}"
        );
    }
}
