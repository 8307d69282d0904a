//! `journaled_command` run for real by `sh` (dash here) and by BusyBox's `sh` with only BusyBox
//! applets on `PATH`: the sentinel always starts on a line of its own, and a journal whose output
//! already ended with a newline is byte for byte what the reference's wrapper writes. BusyBox
//! must be installed (`apt-get install busybox`): a missing one fails, it never skips.

use std::path::{Path, PathBuf};
use std::process::Command;

use reaper_core::journal::{
    exit_sentinel_line, journal_paths, journaled_command, parse_journal_exit, shell_quote,
    JournalPaths,
};

/// A shell to run the wrapper in.
#[derive(Debug, Clone, Copy)]
enum Shell {
    /// The system's `sh` with its usual `PATH`.
    System,
    /// `busybox sh` with a `PATH` of BusyBox applets only.
    BusyBox,
}

const SHELLS: [Shell; 2] = [Shell::System, Shell::BusyBox];

fn busybox() -> PathBuf {
    ["/bin/busybox", "/usr/bin/busybox"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect(
            "busybox is not installed: the wrapper must work under BusyBox too. Install it with \
             `apt-get install busybox`.",
        )
}

/// Runs `command` in `shell`, in `root`; returns the shell's exit status.
fn run(shell: Shell, root: &Path, command: &str) -> i32 {
    let status = match shell {
        Shell::System => Command::new("sh").arg("-c").arg(command).status(),
        Shell::BusyBox => {
            let applets = root.join("bin");
            if !applets.exists() {
                std::fs::create_dir(&applets).unwrap();
                for applet in ["mkdir", "tail"] {
                    std::os::unix::fs::symlink(busybox(), applets.join(applet)).unwrap();
                }
            }
            Command::new(busybox())
                .args(["sh", "-c", command])
                .env_clear()
                .env("PATH", &applets)
                .status()
        }
    }
    .unwrap();
    status.code().expect("the shell exited normally")
}

struct Journal {
    root: tempfile::TempDir,
    paths: JournalPaths,
}

impl Journal {
    /// A run whose journal directory name would break any unquoted command.
    fn new(run_id: &str) -> Journal {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("jo'u r;n $(x)");
        let paths = journal_paths(run_id, Some(dir.to_str().unwrap())).unwrap();
        Journal { root, paths }
    }

    /// Runs `agent` under the wrapper in `shell`, as a sandbox would.
    fn run_agent(&self, shell: Shell, agent: &str) -> Vec<u8> {
        let status = run(
            shell,
            self.root.path(),
            &journaled_command(agent, &self.paths),
        );
        assert_eq!(status, 0, "the wrapper itself failed in {shell:?}");
        std::fs::read(&self.paths.journal).unwrap()
    }

    /// What the reference's wrapper (spec D.3, byte for byte) writes for `agent`.
    fn reference(&self, shell: Shell, agent: &str) -> Vec<u8> {
        let command = format!(
            "mkdir -p {} && {{ ( {agent} ); printf '{}\\n' \"$?\"; }} >> {} 2>> {}",
            shell_quote(&self.paths.dir),
            exit_sentinel_line(&self.paths, 0).replace(":0,", ":%d,"),
            shell_quote(&self.paths.journal),
            shell_quote(&self.paths.stderr),
        );
        std::fs::remove_file(&self.paths.journal).ok();
        assert_eq!(run(shell, self.root.path(), &command), 0);
        let bytes = std::fs::read(&self.paths.journal).unwrap();
        std::fs::remove_file(&self.paths.journal).unwrap();
        bytes
    }

    fn sentinel(&self, code: i64) -> String {
        exit_sentinel_line(&self.paths, code)
    }
}

#[test]
fn output_without_a_trailing_newline_gets_one_before_the_sentinel() {
    for shell in SHELLS {
        let journal = Journal::new("no-newline");
        let bytes = journal.run_agent(shell, r#"printf '{"delta":"All done"}'"#);
        let expected = format!("{{\"delta\":\"All done\"}}\n{}\n", journal.sentinel(0));
        assert_eq!(String::from_utf8(bytes).unwrap(), expected, "in {shell:?}");
    }
}

#[test]
fn output_ending_with_a_newline_or_empty_is_byte_identical_to_the_reference_wrapper() {
    for shell in SHELLS {
        for agent in [
            r#"printf '{"delta":"a"}\n'; exit 3"#,
            r#"printf 'x\n\n'"#,
            "true",
            "exit 7",
        ] {
            let journal = Journal::new("newline");
            let reference = journal.reference(shell, agent);
            let ours = journal.run_agent(shell, agent);
            assert_eq!(
                String::from_utf8(ours).unwrap(),
                String::from_utf8(reference).unwrap(),
                "for {agent:?} in {shell:?}"
            );
        }
    }
}

#[test]
fn the_exit_status_survives_the_newline_guard() {
    for shell in SHELLS {
        let journal = Journal::new("status");
        let bytes = journal.run_agent(shell, "printf 'partial'; exit 42");
        let text = String::from_utf8(bytes).unwrap();
        assert_eq!(text, format!("partial\n{}\n", journal.sentinel(42)));
        assert_eq!(parse_journal_exit(&text, &journal.paths), Some(42));
    }
}

#[test]
fn output_ending_in_a_nul_byte_still_ends_at_a_genuine_sentinel() {
    // Shells drop NUL bytes from a command substitution, so the guard sees "nothing" and adds no
    // newline; the scan's partial-line rule still finds the sentinel.
    for shell in SHELLS {
        let journal = Journal::new("nul");
        let bytes = journal.run_agent(shell, r"printf 'a\000'; exit 5");
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            text.ends_with(&format!("{}\n", journal.sentinel(5))),
            "{text:?}"
        );
        assert_eq!(parse_journal_exit(&text, &journal.paths), Some(5));
    }
}

#[test]
fn a_journal_that_already_holds_a_partial_line_gets_the_newline_too() {
    // A reused or restarted run appends behind earlier output.
    for shell in SHELLS {
        let journal = Journal::new("appended");
        std::fs::create_dir_all(&journal.paths.dir).unwrap();
        std::fs::write(&journal.paths.journal, "earlier, cut").unwrap();
        let bytes = journal.run_agent(shell, "true");
        assert_eq!(
            String::from_utf8(bytes).unwrap(),
            format!("earlier, cut\n{}\n", journal.sentinel(0)),
            "in {shell:?}"
        );
    }
}
