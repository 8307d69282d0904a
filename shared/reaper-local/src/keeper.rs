//! The keeper: every command and agent of a sandbox runs under a process of its own that is a
//! *child subreaper* (`prctl(PR_SET_CHILD_SUBREAPER)`, Linux 3.4+, no privilege needed). An
//! orphan is re-parented to its nearest living subreaper ancestor, not to init, so whatever the
//! command starts — `setsid`, a double fork, a changed working directory, a cleared environment
//! — stays a descendant of its keeper for as long as the keeper lives, and `destroy` finds it
//! by walking parent links in `/proc`.
//!
//! The keeper is the process `spawn` creates. Before the command is executed, the spawned child
//! (still inside `pre_exec`) marks itself a subreaper and forks: the new grandchild returns and
//! becomes the command; the keeper never returns. It lets go of every inherited descriptor
//! (so the command's output pipes reach EOF when the command's side closes them, and the spawn's
//! own error pipe closes), ignores the signals a group kill or a terminal sends (so a SIGTERM to
//! the group reaches the command but leaves the keeper holding the rest), reaps every child and
//! re-parented orphan, and exits once it has none left. Over a pipe it reports the command's pid
//! and then its exit code, which the caller would otherwise learn from `wait`.
//!
//! Only SIGKILL (or SIGSTOP) stops a keeper early; a process of the sandbox that kills its own
//! keeper that way re-parents its tree to init and is then found only by the sandbox's marker
//! variable or working directory.
//!
//! This is the crate's only unsafe code. Between `fork` and `exec` (and in the keeper, which
//! never execs) a child of a multi-threaded process may only make async-signal-safe calls: no
//! allocation, no locks. Everything below the fork uses raw libc calls on stack values only.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;

/// The keeper's name in `/proc/<pid>/comm`, so `destroy` can kill a keeper last (after its
/// descendants, which would otherwise re-parent to init). A process that names itself so is
/// only killed later, never spared.
pub(crate) const KEEPER_COMM: &str = "reaper-keeper";

/// The descriptor the keeper reports on, once it has closed everything else.
const REPORT_FD: RawFd = 3;

/// A keeper about to be spawned: the report pipe, both ends.
pub(crate) struct Pending {
    read: OwnedFd,
    write: OwnedFd,
}

/// What a spawned keeper reports: the command's pid, then its exit code.
pub(crate) struct Report {
    read: pipe::Receiver,
}

/// Makes `command`, once spawned, run under a keeper. Call [`Pending::spawned`] after `spawn`.
pub(crate) fn install(command: &mut tokio::process::Command) -> io::Result<Pending> {
    let (read, write) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from)?;
    // A caller started with a standard descriptor closed gets the pipe there, where the child's
    // stdio setup would overwrite it; a clone is numbered 3 or above.
    let write = if write.as_raw_fd() <= 2 {
        write.try_clone()?
    } else {
        write
    };
    let report = write.as_raw_fd();
    // SAFETY: the closure runs in the child between fork and exec. It only calls `split`, which
    // makes async-signal-safe system calls on values copied into the closure (a descriptor
    // number), allocates nothing and takes no lock.
    unsafe {
        command.pre_exec(move || split(report));
    }
    Ok(Pending { read, write })
}

impl Pending {
    /// After `spawn` succeeded: drops this process's write end, so the report reads EOF once the
    /// keeper is gone (killed before it could report), and hands back the read end.
    pub(crate) fn spawned(self) -> io::Result<Report> {
        drop(self.write);
        Ok(Report {
            read: pipe::Receiver::from_owned_fd(self.read)?,
        })
    }
}

impl Report {
    /// The command's pid; `None` if the keeper died before reporting it.
    pub(crate) async fn command_pid(&mut self) -> Option<u32> {
        self.next().await.and_then(|pid| u32::try_from(pid).ok())
    }

    /// The command's exit code (128 + N for signal N); `None` if the keeper died first.
    pub(crate) async fn exit_code(&mut self) -> Option<i32> {
        self.next().await
    }

    async fn next(&mut self) -> Option<i32> {
        let mut word = [0u8; 4];
        self.read.read_exact(&mut word).await.ok()?;
        Some(i32::from_le_bytes(word))
    }
}

/// In the spawned child, before exec: become a subreaper and fork. The grandchild returns `Ok`
/// and is executed as the command; this process becomes the keeper and never returns.
fn split(report: RawFd) -> io::Result<()> {
    // SAFETY: prctl and fork are async-signal-safe. PR_SET_CHILD_SUBREAPER is not inherited by
    // fork, so the command itself is an ordinary process.
    unsafe {
        if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        match libc::fork() {
            -1 => Err(io::Error::last_os_error()),
            0 => Ok(()),
            command => keep(command, report),
        }
    }
}

/// The keeper's whole life. Only async-signal-safe calls on stack values.
unsafe fn keep(command: libc::pid_t, report: RawFd) -> ! {
    // SAFETY (whole function): every call is an async-signal-safe system call taking plain
    // integers or pointers to stack values and static strings that live for the call.
    unsafe {
        for signal in [
            libc::SIGTERM,
            libc::SIGINT,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGPIPE,
            libc::SIGUSR1,
            libc::SIGUSR2,
            libc::SIGTSTP,
            libc::SIGTTIN,
            libc::SIGTTOU,
        ] {
            libc::signal(signal, libc::SIG_IGN);
        }
        // A handler inherited from the parent's runtime would run here with nothing to serve;
        // the default lets `waitpid` see every child.
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);
        libc::prctl(libc::PR_SET_NAME, c"reaper-keeper".as_ptr(), 0, 0, 0);
        // Let go of the command's stdio (its output pipes must reach EOF without us) ...
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
        }
        // ... keep the report pipe at a known number, and close everything else (the spawn's
        // error pipe above all: the parent's `spawn` waits for it to close).
        if report != REPORT_FD {
            libc::dup2(report, REPORT_FD);
        }
        close_from(REPORT_FD + 1);
        report_word(command);
        let mut reported = false;
        loop {
            let mut status: libc::c_int = 0;
            let pid = libc::waitpid(-1, &mut status, 0);
            if pid == -1 {
                if *libc::__errno_location() == libc::EINTR {
                    continue;
                }
                // ECHILD: nothing of the command is left.
                break;
            }
            if pid == command && !reported {
                let code = if libc::WIFEXITED(status) {
                    libc::WEXITSTATUS(status)
                } else if libc::WIFSIGNALED(status) {
                    128 + libc::WTERMSIG(status)
                } else {
                    -1
                };
                report_word(code);
                libc::close(REPORT_FD);
                reported = true;
            }
        }
        libc::_exit(0)
    }
}

/// Writes one little-endian word to the report pipe; a reader that has gone is ignored.
unsafe fn report_word(word: i32) {
    let bytes = word.to_le_bytes();
    // SAFETY: writes 4 bytes from a stack array; SIGPIPE is ignored, so a closed reader is EPIPE.
    unsafe {
        libc::write(REPORT_FD, bytes.as_ptr().cast(), bytes.len());
    }
}

/// Closes every descriptor from `first` up: `close_range` (Linux 5.9+), else one by one up to
/// the open-file limit.
unsafe fn close_from(first: RawFd) {
    // SAFETY: close_range, getrlimit and close are async-signal-safe system calls.
    unsafe {
        if libc::syscall(
            libc::SYS_close_range,
            first as libc::c_uint,
            libc::c_uint::MAX,
            0,
        ) == 0
        {
            return;
        }
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur.min(1 << 20) as RawFd
        } else {
            1024
        };
        for fd in first..max {
            libc::close(fd);
        }
    }
}
