//! Processes of a sandbox: every command and agent runs as the leader of its own group, so one
//! signal reaches everything it forked; and every one carries the sandbox's marker variable, so a
//! process that left its group (`setsid`, a daemonising double fork) is still found in `/proc`.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

/// How often a kill re-checks whether a group has emptied. The wait is bounded by the grace
/// period; this only sets its resolution.
const GROUP_POLL: Duration = Duration::from_millis(10);

/// The variable every command and agent of a sandbox is started with: its value is the
/// sandbox's absolute directory. Children inherit it, so `destroy` finds processes that left
/// the process group; only a process that also clears its environment *and* leaves the
/// sandbox's directory escapes (a sandbox is not an isolation boundary).
pub(crate) const SANDBOX_MARKER_ENV: &str = "REAPER_SANDBOX_DIR";

/// After SIGKILL the members die without running any code; this bounds the wait for the kernel to
/// finish tearing them down before the directory is removed under them.
const AFTER_KILL_WAIT: Duration = Duration::from_secs(2);

/// Whether any live (non-zombie) process is still in group `pgid`. Zombies are dead: an init
/// that does not reap orphans (common in containers and microVMs) would otherwise keep a killed
/// group "alive" for ever.
pub(crate) fn group_alive(pgid: i32) -> Result<bool, Errno> {
    match killpg(Pid::from_raw(pgid), None) {
        Ok(()) => Ok(live_member_in_proc(pgid).unwrap_or(true)),
        Err(Errno::ESRCH) => Ok(false),
        // EPERM: the group exists but holds someone else's processes.
        Err(e) => Err(e),
    }
}

/// Scans `/proc` for a member of `pgid` that is not a zombie. `None` without a readable `/proc`.
fn live_member_in_proc(pgid: i32) -> Option<bool> {
    let entries = std::fs::read_dir("/proc").ok()?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        // A process that exits between the listing and the read is simply not a member.
        if let Some((state, pgrp)) = stat_fields(pid).map(|f| (f.state, f.pgrp)) {
            if pgrp == pgid && state != 'Z' && state != 'X' {
                return Some(true);
            }
        }
    }
    Some(false)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct StatFields {
    state: char,
    pgrp: i32,
    start_time: Option<u64>,
}

/// Fields of `/proc/<pid>/stat`. The command name (field 2) may contain spaces and parentheses,
/// so fields are counted from the last `)`.
fn stat_fields(pid: i32) -> Option<StatFields> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut rest = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = rest.next()?.chars().next()?;
    let pgrp = rest.nth(1)?.parse().ok()?;
    // Field 22 (starttime); fields 3 and 5 were consumed, field 4 skipped.
    let start_time = rest.nth(16).and_then(|s| s.parse().ok());
    Some(StatFields {
        state,
        pgrp,
        start_time,
    })
}

/// Sends `signal` to group `pgid`. A group that is already gone is not an error.
pub(crate) fn signal_group(pgid: i32, signal: Signal) -> Result<(), Errno> {
    match killpg(Pid::from_raw(pgid), signal) {
        Ok(()) | Err(Errno::ESRCH) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Everything that belongs to one sandbox: its recorded process groups, and any live process
/// started with its marker variable or working inside its directory.
#[derive(Debug, Clone)]
pub(crate) struct SandboxProcesses {
    /// The marker value and the directory as given (absolute).
    pub(crate) dir: PathBuf,
    /// The same directory with symlinks resolved, as `/proc/<pid>/cwd` shows it.
    canonical: Option<PathBuf>,
    pub(crate) groups: Vec<i32>,
}

/// One process found by [`SandboxProcesses::stray_members`], with its start time so a pid
/// reused between the scan and the signal is not hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Member {
    pid: i32,
    start_time: Option<u64>,
}

impl SandboxProcesses {
    pub(crate) fn new(dir: &Path, mut groups: Vec<i32>) -> Self {
        groups.sort_unstable();
        groups.dedup();
        SandboxProcesses {
            dir: dir.to_path_buf(),
            canonical: std::fs::canonicalize(dir).ok(),
            groups,
        }
    }

    /// Live processes of the sandbox found in `/proc` (whatever their group): started with the
    /// sandbox's marker variable, or with their working directory inside the sandbox. This
    /// process itself is never one. Processes of other users are unreadable and skipped: they
    /// cannot be signalled anyway.
    fn stray_members(&self) -> Vec<Member> {
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        let me = std::process::id() as i32;
        let mut marker = Vec::with_capacity(SANDBOX_MARKER_ENV.len() + 1 + 256);
        marker.extend_from_slice(SANDBOX_MARKER_ENV.as_bytes());
        marker.push(b'=');
        marker.extend_from_slice(self.dir.as_os_str().as_bytes());
        let mut found = Vec::new();
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<i32>().ok())
            else {
                continue;
            };
            if pid == me || pid <= 1 {
                continue;
            }
            let Some(stat) = stat_fields(pid) else {
                continue;
            };
            if stat.state == 'Z' || stat.state == 'X' {
                continue;
            }
            if self.marked(pid, &marker) || self.works_inside(pid) {
                found.push(Member {
                    pid,
                    start_time: stat.start_time,
                });
            }
        }
        found
    }

    fn marked(&self, pid: i32, marker: &[u8]) -> bool {
        std::fs::read(format!("/proc/{pid}/environ"))
            .is_ok_and(|env| env.split(|&b| b == 0).any(|var| var == marker))
    }

    fn works_inside(&self, pid: i32) -> bool {
        let Ok(cwd) = std::fs::read_link(format!("/proc/{pid}/cwd")) else {
            return false;
        };
        cwd.starts_with(&self.dir)
            || self
                .canonical
                .as_deref()
                .is_some_and(|canonical| cwd.starts_with(canonical))
    }

    /// Signals every recorded group and every stray member; returns whether anything of the
    /// sandbox is still alive. A group error names a group that could not be signalled; a
    /// single process that vanished or is not ours to signal is skipped.
    fn signal_all(&self, signal: Signal) -> Result<bool, (i32, Errno)> {
        let mut alive = false;
        for &pgid in &self.groups {
            if group_alive(pgid).map_err(|e| (pgid, e))? {
                alive = true;
                signal_group(pgid, signal).map_err(|e| (pgid, e))?;
            }
        }
        for member in self.stray_members() {
            // Re-read right before the signal: a pid that was reused since the scan is spared.
            if start_time(member.pid) != member.start_time {
                continue;
            }
            alive = true;
            match kill(Pid::from_raw(member.pid), signal) {
                Ok(()) | Err(Errno::ESRCH) => {}
                Err(e) => {
                    tracing::warn!(pid = member.pid, error = %e, "cannot signal a process of the sandbox")
                }
            }
        }
        Ok(alive)
    }

    /// SIGTERM to everything, up to `grace` for it all to leave, then SIGKILL until nothing is
    /// left (bounded). Processes forked in between are found by the next scan, so a process
    /// that keeps forking is chased until the bound. An error names a group a signal could not
    /// be delivered to: it may still be running.
    pub(crate) async fn terminate(&self, grace: Duration) -> Result<(), (i32, Errno)> {
        if !self.signal_all(Signal::SIGTERM)? {
            return Ok(());
        }
        if self.wait_gone(grace, None).await? {
            return Ok(());
        }
        // A leader that is our own unreaped child stays a zombie until tokio reaps it; SIGKILL
        // has been delivered either way, so something that lingers past this wait is not an
        // error.
        self.wait_gone(AFTER_KILL_WAIT, Some(Signal::SIGKILL))
            .await?;
        Ok(())
    }

    /// Polls until nothing of the sandbox is alive or `within` passes; with `resend`, every poll
    /// signals whatever is still there (so late forks are hit too).
    async fn wait_gone(
        &self,
        within: Duration,
        resend: Option<Signal>,
    ) -> Result<bool, (i32, Errno)> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let alive = match resend {
                Some(signal) => self.signal_all(signal)?,
                None => self.any_alive()?,
            };
            if !alive {
                return Ok(true);
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(false);
            }
            tokio::time::sleep(GROUP_POLL).await;
        }
    }

    fn any_alive(&self) -> Result<bool, (i32, Errno)> {
        for &pgid in &self.groups {
            if group_alive(pgid).map_err(|e| (pgid, e))? {
                return Ok(true);
            }
        }
        Ok(!self.stray_members().is_empty())
    }
}

/// The process's start time in clock ticks since boot, used to tell a recorded agent from an
/// unrelated process that later got the same pid. `None` off Linux or when the process is gone.
pub(crate) fn start_time(pid: i32) -> Option<u64> {
    stat_fields(pid)?.start_time
}

/// Whether group `pgid` is still the one recorded with `recorded_start`. A pid is never reused
/// while a group with that id exists, so a group whose leader is gone is still ours; a live
/// leader with another start time means the original group emptied and the id was reused.
pub(crate) fn group_is_ours(pgid: i32, recorded_start: Option<u64>) -> bool {
    match (recorded_start, start_time(pgid)) {
        (Some(recorded), Some(now)) => recorded == now,
        _ => true,
    }
}
