//! A real sandbox provider on this machine, and the native adapters for the core's time ports.
//!
//! A sandbox is a directory `<root>/<id>/` plus the processes started in it:
//!
//! ```text
//! <root>/<id>/sandbox.json   metadata: id, createdAt, journalDir, path?, agents [{runId, pid, pgid, startTime?}]
//! <root>/<id>/work/          the working directory of every command
//! <root>/<id>/journals/      the journal directory, unless `CreateOptions::journal_dir` says otherwise
//! ```
//!
//! [`LocalSandboxProvider`] implements the core's `SandboxProvider` port and [`LocalSandbox`]
//! its `SandboxHandle` port: `exec` runs a real `/bin/sh -c` with a clean environment, a timeout
//! that kills the command's process group, and output limits; [`LocalSandbox::start_agent`]
//! starts a real agent under the journaled wrapper so it writes a real journal.
//!
//! Invariants:
//! - A sandbox id is validated (`[A-Za-z0-9-]`, 1–64 characters) before it is joined to the
//!   root, so a hostile id is refused and never becomes a path.
//! - Every command and agent runs under a *keeper*, a child subreaper that leads its own process
//!   group (`keeper.rs`, the crate's only unsafe code): orphans re-parent to it, never to init,
//!   so whatever a command started stays its descendant however it left (`&`, `nohup`,
//!   `setsid`, double forks, `cd /`, `env -i`). `destroy` kills the descendants of every keeper
//!   and every process that carries the sandbox's marker variable (`REAPER_SANDBOX_DIR`) or works
//!   inside its directory (a keeper always does, and the marker is the net for a process whose
//!   keeper was SIGKILLed), the keepers last; anything alive after SIGKILL fails the destroy.
//!   This needs no privilege, no cgroup and no namespace, so it works the same as root or not,
//!   in a container or on a host.
//! - The `.destroy-fails` fault-injection file is honoured only by a provider built to honour it
//!   (demos, tests): an agent can write it, so production providers ignore it.
//! - `exec` output is bounded while it is read: past the limit the command is killed and the
//!   call fails, having held at most the limit in memory.
//! - A recorded group is only signalled while it is still the one recorded (its leader's start
//!   time matches), so a reused pid is never killed.
#![warn(missing_docs)]

mod keeper;
mod meta;
mod process;
mod provider;
mod sandbox;
pub mod time;

pub use meta::{validate_sandbox_id, AgentRecord, SandboxMetadata};
pub use provider::{
    CreateOptions, LocalProviderOptions, LocalSandboxProvider, DEFAULT_KILL_GRACE,
    DEFAULT_OUTPUT_LIMIT, DEFAULT_PROVIDER_NAME, DEFAULT_SANDBOX_PATH, DESTROY_FAILS_FLAG,
};
pub use sandbox::{AgentProcess, LocalSandbox};
pub use time::{SystemClock, TokioSleeper};
