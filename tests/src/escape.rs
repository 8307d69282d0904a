//! Processes that try to outlive their sandbox, and how to tell whether they did.
//!
//! Every kind ends in the same leaf: a process that records its pid in a file outside the
//! sandbox, leaves the sandbox's directory (`cd /`), clears its environment (`env -i`, so the
//! sandbox's marker variable is gone) and becomes `sleep 1000`. The kinds differ in how it got
//! away from the command that started it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::util::{eventually, process_dead};

/// One way out.
#[derive(Debug, Clone, Copy)]
pub struct Escape {
    /// Names the test case.
    pub name: &'static str,
    /// The shell command, with `{pid}` where the leaf's pid file goes.
    template: &'static str,
}

/// A new session, `cd /`, `env -i` (the command from issue 24).
pub const SETSID: Escape = Escape {
    name: "setsid_cd_root_env_cleared",
    template: "setsid sh -c 'echo $$ > {pid}; cd /; exec env -i sleep 1000' \
               >/dev/null 2>&1 </dev/null &",
};

/// A double fork: the middle process exits at once, orphaning the leaf.
pub const DOUBLE_FORK: Escape = Escape {
    name: "double_fork_cd_root_env_cleared",
    template: "(sh -c 'echo $$ > {pid}; cd /; exec env -i sleep 1000' &) \
               >/dev/null 2>&1 </dev/null",
};

/// A new session whose leader double-forks: new session, new group, orphaned.
pub const SETSID_DOUBLE_FORK: Escape = Escape {
    name: "setsid_then_double_fork_cd_root_env_cleared",
    template: "setsid sh -c \"(sh -c 'echo \\$\\$ > {pid}; cd /; exec env -i sleep 1000' &)\" \
               >/dev/null 2>&1 </dev/null &",
};

/// The environment cleared and the directory left before the new session even starts.
pub const ENV_CLEARED_FIRST: Escape = Escape {
    name: "env_cleared_and_cd_root_before_setsid",
    template: "cd / && env -i setsid sh -c 'echo $$ > {pid}; exec env -i sleep 1000' \
               >/dev/null 2>&1 </dev/null &",
};

/// Every kind.
pub const ESCAPES: [Escape; 4] = [SETSID, DOUBLE_FORK, SETSID_DOUBLE_FORK, ENV_CLEARED_FIRST];

impl Escape {
    /// The command, its leaf recording its pid in `pid_file` (an absolute path outside the
    /// sandbox, without quotes or spaces).
    pub fn command(&self, pid_file: &Path) -> String {
        let pid = pid_file.to_str().expect("a UTF-8 pid file path");
        assert!(
            !pid.contains(['\'', '"', ' ', '$', '\\']),
            "pid file path {pid:?} needs quoting"
        );
        self.template.replace("{pid}", pid)
    }

    /// Where this kind's leaf records its pid under `dir`.
    pub fn pid_file(&self, dir: &Path) -> PathBuf {
        dir.join(format!("{}.pid", self.name))
    }
}

/// The escaped leaf: waits until the pid file names a process that is `sleep`, works in `/`
/// and has an empty environment, i.e. has really left. Kills the process when dropped, so a
/// failing test leaves nothing behind.
#[derive(Debug)]
pub struct Escaped {
    pub pid: u32,
}

impl Escaped {
    /// A hang guard only (minutes): the verdict never depends on how fast the leaf gets there.
    pub async fn wait(pid_file: &Path) -> Escaped {
        let mut pid = None;
        let left = eventually(Duration::from_secs(120), || {
            pid = std::fs::read_to_string(pid_file)
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok());
            std::future::ready(pid.is_some_and(has_left))
        })
        .await;
        let pid = pid.unwrap_or_else(|| panic!("{} never named a process", pid_file.display()));
        let escaped = Escaped { pid };
        assert!(
            left,
            "pid {pid} never became an escaped `sleep` (cwd /, empty environment)"
        );
        escaped
    }

    pub fn dead(&self) -> bool {
        process_dead(self.pid)
    }
}

impl Drop for Escaped {
    fn drop(&mut self) {
        if !self.dead() {
            let _ = std::process::Command::new("kill")
                .args(["-9", &self.pid.to_string()])
                .status();
        }
    }
}

/// `sleep`, working in `/`, with an empty environment.
fn has_left(pid: u32) -> bool {
    let proc = PathBuf::from(format!("/proc/{pid}"));
    let sleeping = std::fs::read(proc.join("cmdline")).is_ok_and(|c| c.starts_with(b"sleep\0"));
    let in_root = std::fs::read_link(proc.join("cwd")).is_ok_and(|c| c == Path::new("/"));
    let no_env = std::fs::read(proc.join("environ")).is_ok_and(|e| e.is_empty());
    sleeping && in_root && no_env
}
