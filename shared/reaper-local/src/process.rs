//! Process groups: every command and agent runs as the leader of its own group, so one signal
//! reaches everything it forked.

use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

/// How often a kill re-checks whether a group has emptied. The wait is bounded by the grace
/// period; this only sets its resolution.
const GROUP_POLL: Duration = Duration::from_millis(10);

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

/// SIGTERM to every group, up to `grace` for them all to leave, then SIGKILL to the rest. An
/// error names a group a signal could not be delivered to: it may still be running.
pub(crate) async fn terminate_groups(groups: &[i32], grace: Duration) -> Result<(), (i32, Errno)> {
    for &pgid in groups {
        signal_group(pgid, Signal::SIGTERM).map_err(|e| (pgid, e))?;
    }
    if wait_groups_gone(groups, grace).await? {
        return Ok(());
    }
    for &pgid in groups {
        signal_group(pgid, Signal::SIGKILL).map_err(|e| (pgid, e))?;
    }
    // A leader that is our own unreaped child stays a zombie until tokio reaps it; SIGKILL has
    // been delivered either way, so a group that lingers past this wait is not an error.
    wait_groups_gone(groups, AFTER_KILL_WAIT).await?;
    Ok(())
}

async fn wait_groups_gone(groups: &[i32], within: Duration) -> Result<bool, (i32, Errno)> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let mut any = false;
        for &pgid in groups {
            any |= group_alive(pgid).map_err(|e| (pgid, e))?;
        }
        if !any {
            return Ok(true);
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(GROUP_POLL).await;
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
