//! Processes of a sandbox: every command and agent runs under a keeper (a child subreaper, see
//! `keeper.rs`) that leads its own process group, so whatever it started stays its descendant
//! wherever it moved; and every one carries the sandbox's marker variable and starts in its
//! directory, a second net for a process whose keeper was killed.

use std::collections::{HashMap, HashSet};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

use crate::keeper::KEEPER_COMM;

/// How often a kill re-checks whether a group has emptied. The wait is bounded by the grace
/// period; this only sets its resolution.
const GROUP_POLL: Duration = Duration::from_millis(10);

/// The variable every command and agent of a sandbox is started with: its value is the
/// sandbox's absolute directory. Children inherit it, so `destroy` finds processes that left
/// the process group; only a process that also clears its environment *and* leaves the
/// sandbox's directory escapes (a sandbox is not an isolation boundary).
pub(crate) const SANDBOX_MARKER_ENV: &str = "REAPER_SANDBOX_DIR";

/// After SIGKILL the members die without running any code; this bounds the wait for the kernel to
/// finish tearing them down (and for keepers to notice they are empty). Only a guard: what is
/// still alive past it is reported as a failed destroy.
pub(crate) const AFTER_KILL_WAIT: Duration = Duration::from_secs(30);

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

#[derive(Debug, Clone, PartialEq, Eq)]
struct StatFields {
    state: char,
    ppid: i32,
    pgrp: i32,
    start_time: Option<u64>,
    /// The command name (`comm`).
    comm: String,
}

impl StatFields {
    /// Whether the command name is the keeper's (see [`KEEPER_COMM`]).
    fn keeper(&self) -> bool {
        self.comm == KEEPER_COMM
    }
}

/// Fields of `/proc/<pid>/stat`. The command name (field 2) may contain spaces and parentheses,
/// so fields are counted from the last `)`.
fn stat_fields(pid: i32) -> Option<StatFields> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let close = stat.rfind(')')?;
    let comm = &stat[stat.find('(')? + 1..close];
    let mut rest = stat[close + 1..].split_whitespace();
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    let pgrp = rest.next()?.parse().ok()?;
    // Field 22 (starttime); fields 3 to 5 were consumed.
    let start_time = rest.nth(16).and_then(|s| s.parse().ok());
    Some(StatFields {
        state,
        ppid,
        pgrp,
        start_time,
        comm: comm.to_string(),
    })
}

/// Every live (not zombie) process readable in `/proc`, with its stat fields.
fn live_processes() -> Vec<(i32, StatFields)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        // A process that exits between the listing and the read is simply not listed.
        .filter_map(|pid| Some((pid, stat_fields(pid)?)))
        .filter(|(_, stat)| stat.state != 'Z' && stat.state != 'X')
        .collect()
}

/// The pids reachable from `roots` by parent links (the roots included), among `processes`.
fn with_descendants(processes: &[(i32, StatFields)], roots: &[i32]) -> HashSet<i32> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for (pid, stat) in processes {
        children.entry(stat.ppid).or_default().push(*pid);
    }
    let mut found: HashSet<i32> = HashSet::new();
    let mut queue: Vec<i32> = roots.to_vec();
    while let Some(pid) = queue.pop() {
        if found.insert(pid) {
            if let Some(kids) = children.get(&pid) {
                queue.extend(kids);
            }
        }
    }
    found
}

/// This process and its ancestors: never a member of a sandbox, even when the reaper was
/// started from inside a sandbox's directory.
fn me_and_my_ancestors(processes: &[(i32, StatFields)]) -> HashSet<i32> {
    let parents: HashMap<i32, i32> = processes.iter().map(|(p, s)| (*p, s.ppid)).collect();
    let mut mine = HashSet::new();
    let mut pid = std::process::id() as i32;
    while pid > 1 && mine.insert(pid) {
        match parents.get(&pid) {
            Some(&parent) => pid = parent,
            None => break,
        }
    }
    mine
}

/// SIGKILLs everything below keeper `keeper` (not the keeper, which then finds itself without
/// children and exits): what a command that timed out or was abandoned started, wherever it
/// moved. Repeated a few rounds for what was forked during a round; anything still left is
/// found by `destroy`.
pub(crate) fn kill_below_keeper(keeper: i32) {
    for _ in 0..KILL_BELOW_ROUNDS {
        let processes = live_processes();
        let mut below = with_descendants(&processes, &[keeper]);
        below.remove(&keeper);
        if below.is_empty() {
            return;
        }
        for pid in below {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// Rounds of [`kill_below_keeper`]; each is one `/proc` scan.
const KILL_BELOW_ROUNDS: usize = 8;

/// Sends `signal` to group `pgid`. A group that is already gone is not an error.
pub(crate) fn signal_group(pgid: i32, signal: Signal) -> Result<(), Errno> {
    match killpg(Pid::from_raw(pgid), signal) {
        Ok(()) | Err(Errno::ESRCH) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Everything that belongs to one sandbox: its recorded process groups, any live process
/// started with its marker variable or working inside its directory (keepers always do), and
/// every descendant of those, wherever it moved (`setsid`, double forks, `cd /`, `env -i`): an
/// orphan re-parents to its keeper, never to init, while the keeper lives.
#[derive(Debug, Clone)]
pub(crate) struct SandboxProcesses {
    /// The marker value and the directory as given (absolute).
    pub(crate) dir: PathBuf,
    /// The same directory with symlinks resolved, as `/proc/<pid>/cwd` shows it.
    canonical: Option<PathBuf>,
    pub(crate) groups: Vec<i32>,
}

/// One live process of the sandbox, with its start time so a pid reused between the scan and
/// the signal is not hit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Member {
    pub(crate) pid: i32,
    start_time: Option<u64>,
    keeper: bool,
    /// The command name when scanned, for the report.
    comm: String,
}

impl std::fmt::Display for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {} ({})", self.pid, self.comm)
    }
}

/// What `destroy` could not kill: still alive after SIGKILL and the wait bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Survivors(pub(crate) Vec<Member>);

impl std::fmt::Display for Survivors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown: Vec<String> = self.0.iter().take(8).map(ToString::to_string).collect();
        write!(f, "{}", shown.join(", "))?;
        if self.0.len() > shown.len() {
            write!(f, " and {} more", self.0.len() - shown.len())?;
        }
        Ok(())
    }
}

/// How a signal is sent: the real `kill(2)`, or a fault-injecting stand-in in tests.
pub(crate) type SendSignal = dyn Fn(i32, Signal) -> Result<(), Errno> + Send + Sync;

pub(crate) fn send_signal(pid: i32, signal: Signal) -> Result<(), Errno> {
    kill(Pid::from_raw(pid), signal)
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

    /// The live processes of the sandbox, from one `/proc` scan: the seeds (a recorded group,
    /// the marker variable, a working directory inside the sandbox) and all their
    /// descendants. This process and its ancestors are never members. Processes of other users
    /// are seeds only through their group (their environment and cwd are unreadable), but are
    /// members when they descend from one.
    pub(crate) fn members(&self) -> Vec<Member> {
        let processes = live_processes();
        let mut marker = Vec::with_capacity(SANDBOX_MARKER_ENV.len() + 1 + 256);
        marker.extend_from_slice(SANDBOX_MARKER_ENV.as_bytes());
        marker.push(b'=');
        marker.extend_from_slice(self.dir.as_os_str().as_bytes());
        let mine = me_and_my_ancestors(&processes);
        let seeds: Vec<i32> = processes
            .iter()
            .filter(|(pid, stat)| {
                *pid > 1
                    && !mine.contains(pid)
                    && (self.groups.binary_search(&stat.pgrp).is_ok()
                        || self.works_inside(*pid)
                        || self.marked(*pid, &marker))
            })
            .map(|(pid, _)| *pid)
            .collect();
        let found = with_descendants(&processes, &seeds);
        processes
            .into_iter()
            .filter(|(pid, _)| *pid > 1 && found.contains(pid) && !mine.contains(pid))
            .map(|(pid, stat)| Member {
                pid,
                start_time: stat.start_time,
                keeper: stat.keeper(),
                comm: stat.comm,
            })
            .collect()
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

    /// SIGTERM to everything but the keepers, up to `grace` for it to leave, then SIGKILL until
    /// nothing is left: descendants first, keepers only once they hold nothing (a keeper killed
    /// earlier would hand its orphans to init). Every round rescans, so what was forked in
    /// between is hit too. Anything still alive `kill_wait` after the first SIGKILL is returned
    /// as survivors: the caller must not report the sandbox gone.
    pub(crate) async fn terminate(
        &self,
        grace: Duration,
        kill_wait: Duration,
        send: &SendSignal,
    ) -> Result<(), Survivors> {
        let members = self.members();
        if members.is_empty() {
            return Ok(());
        }
        signal_members(members.iter().filter(|m| !m.keeper), Signal::SIGTERM, send);
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            if !self.members().iter().any(|m| !m.keeper) {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(GROUP_POLL).await;
        }
        let deadline = tokio::time::Instant::now() + kill_wait;
        loop {
            let members = self.members();
            if members.is_empty() {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Survivors(members));
            }
            let descendants_left = members.iter().any(|m| !m.keeper);
            signal_members(
                members.iter().filter(|m| m.keeper != descendants_left),
                Signal::SIGKILL,
                send,
            );
            tokio::time::sleep(GROUP_POLL).await;
        }
    }
}

/// Signals each member still the process that was scanned (a pid reused since is spared). A
/// process that vanished is skipped; one that cannot be signalled is logged and stays a member,
/// so it is reported if it survives.
fn signal_members<'a>(
    members: impl Iterator<Item = &'a Member>,
    signal: Signal,
    send: &SendSignal,
) {
    for member in members {
        if start_time(member.pid) != member.start_time {
            continue;
        }
        match send(member.pid, signal) {
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(e) => {
                tracing::warn!(pid = member.pid, error = %e, "cannot signal a process of the sandbox")
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A real process that never receives its signals (a stand-in for one the reaper cannot
    /// kill: another user's, or stuck in the kernel) must fail the kill, not pass as gone.
    #[tokio::test]
    async fn a_process_that_survives_sigkill_is_reported_not_passed_as_gone() {
        let dir = tempfile::tempdir().unwrap();
        let mut stubborn = std::process::Command::new("sleep")
            .arg("1000")
            .current_dir(dir.path())
            .spawn()
            .unwrap();
        let pid = stubborn.id() as i32;
        let deaf = move |target: i32, signal: Signal| {
            if target == pid {
                Ok(())
            } else {
                send_signal(target, signal)
            }
        };
        let processes = SandboxProcesses::new(dir.path(), Vec::new());
        let result = processes
            .terminate(Duration::ZERO, Duration::from_millis(50), &deaf)
            .await;
        let _ = stubborn.kill();
        let _ = stubborn.wait();
        let survivors = result.expect_err("a live process passed as gone");
        assert_eq!(
            survivors.0.iter().map(|m| m.pid).collect::<Vec<_>>(),
            vec![pid]
        );
        assert!(survivors
            .to_string()
            .contains(&format!("pid {pid} (sleep)")));
    }
}
