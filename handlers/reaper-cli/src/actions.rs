//! The operator's actions (issue 25): `reaper expire RUN_ID`, `reaper ledger retry RUN_ID`,
//! `reaper ledger forget RUN_ID`, `reaper pause`, `reaper resume`. Each asks for confirmation
//! (`--yes`, or a prompt when stdin is a terminal; refused otherwise), does its work through the
//! core's own paths (`reaper_core::actions`, `reaper_core::pause`), and leaves an audit entry:
//! a structured log line (target `reaper::audit`) and a record in the store (the note of the
//! `reaper:audit` lease key, the last [`AUDIT_KEPT`] actions), until the per-run history gives
//! actions a place of their own.

use std::io::{BufRead, IsTerminal, Write};

use clap::{Args, Subcommand};
use reaper_core::actions::{expire_now, forget_leak, retry_reclaim_now, ActionError};
use reaper_core::pause::{read_pause, record_pause, PauseMark};
use reaper_core::reap::ReapOptions;
use reaper_core::{Clock, EpochMs, LeaseGrant, LeaseStore, StoreError};
use reaper_local::SystemClock;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::config::{Db, Output, Sandboxes, Settings, MAX_TIMER_MS, QUIET_WINDOW, RUN_BUDGET};
use crate::wiring::{self, DriveTuning, Progress, Providers, Sweeper};
use crate::{Exit, Failure};

/// The lease key whose note keeps the audit trail of operator actions.
pub const AUDIT_KEY: &str = "reaper:audit";
/// Audit entries kept in the store (older ones are still in the logs).
pub const AUDIT_KEPT: usize = 100;

/// `--yes`: the confirmation for scripts.
#[derive(Debug, Args)]
pub struct Confirm {
    /// Do it without asking. Without it, the command asks on a terminal and refuses otherwise.
    #[arg(long, short = 'y')]
    pub yes: bool,
}

#[derive(Debug, Args)]
pub struct ExpireCmd {
    /// The run to expire (it must be detached and not terminal).
    #[arg(value_name = "RUN_ID")]
    pub run_id: String,
    #[command(flatten)]
    pub db: Db,
    #[command(flatten)]
    pub sandboxes: Sandboxes,
    /// How long the run's drive may take.
    #[arg(
        long,
        env = "REAPER_RUN_BUDGET",
        default_value = "30s",
        value_name = "DURATION",
        allow_hyphen_values = true
    )]
    pub run_budget: String,
    /// How long the delivery log must be quiet before the drive appends.
    #[arg(
        long,
        env = "REAPER_QUIET_WINDOW",
        default_value = "5s",
        value_name = "DURATION",
        allow_hyphen_values = true
    )]
    pub quiet_window: String,
    #[command(flatten)]
    pub confirm: Confirm,
    #[command(flatten)]
    pub output: Output,
}

#[derive(Debug, Subcommand)]
pub enum LedgerCmd {
    /// Retry a reclaim-ledger entry now, under the run's claim, whatever its backoff.
    Retry(LedgerArgs),
    /// Forget a leak destroyed by hand: only once the provider confirms the sandbox gone.
    Forget(LedgerArgs),
}

impl LedgerCmd {
    pub fn output(&self) -> &Output {
        match self {
            LedgerCmd::Retry(a) | LedgerCmd::Forget(a) => &a.output,
        }
    }
}

#[derive(Debug, Args)]
pub struct LedgerArgs {
    /// The run whose ledger entry to act on (reaper status lists the ledger).
    #[arg(value_name = "RUN_ID")]
    pub run_id: String,
    #[command(flatten)]
    pub db: Db,
    #[command(flatten)]
    pub sandboxes: Sandboxes,
    #[command(flatten)]
    pub confirm: Confirm,
    #[command(flatten)]
    pub output: Output,
}

#[derive(Debug, Args)]
pub struct PauseCmd {
    #[command(flatten)]
    pub db: Db,
    /// Why (kept with the mark and shown by every paused sweep).
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    #[command(flatten)]
    pub confirm: Confirm,
    #[command(flatten)]
    pub output: Output,
}

/// One audit entry.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    pub at: EpochMs,
    pub by: String,
    pub action: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// What came of it, in words.
    pub result: String,
}

/// Who is acting: the user and this process's owner id.
fn operator() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "unknown-user".into());
    format!("{user}@{}", wiring::owner_id())
}

/// Asks before acting: `--yes`, or a `y` on a terminal. Anything else refuses, exit 1.
fn confirm(confirm: &Confirm, what: &str) -> Result<(), Failure> {
    if confirm.yes {
        return Ok(());
    }
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(Failure::usage(format!(
            "refusing to {what} without confirmation: stdin is not a terminal, so pass --yes"
        )));
    }
    eprint!("reaper: {what}? [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    stdin
        .lock()
        .read_line(&mut answer)
        .map_err(|e| Failure::usage(format!("cannot read the answer: {e}")))?;
    match answer.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Ok(()),
        _ => Err(Failure::usage(format!("not confirmed: did not {what}"))),
    }
}

/// Logs the action and appends it to the store's audit note. Never fails the action: a failed
/// record is a warning (the log line stays).
async fn audit(leases: &dyn LeaseStore, entry: AuditEntry) {
    tracing::info!(
        target: "reaper::audit",
        action = %entry.action,
        run_id = entry.run_id.as_deref(),
        by = %entry.by,
        at = entry.at,
        result = %entry.result,
        "operator action"
    );
    if let Err(error) = record_audit(leases, &entry).await {
        tracing::warn!(target: "reaper", %error, "recording the audit entry in the store failed; the log line above is the record");
    }
}

async fn record_audit(leases: &dyn LeaseStore, entry: &AuditEntry) -> Result<(), StoreError> {
    let lease = match leases
        .acquire(AUDIT_KEY, &entry.by, entry.at, 30_000)
        .await?
    {
        LeaseGrant::Acquired(lease) => lease,
        LeaseGrant::Held { owner, .. } => {
            return Err(StoreError::Conflict(format!(
                "{owner} is writing the audit trail right now"
            )))
        }
    };
    let written = async {
        let mut trail: Vec<AuditEntry> = match leases.note(AUDIT_KEY).await? {
            // A trail this build cannot read is started afresh rather than lose this entry.
            Some(note) => serde_json::from_str(&note).unwrap_or_default(),
            None => Vec::new(),
        };
        trail.push(entry.clone());
        let drop = trail.len().saturating_sub(AUDIT_KEPT);
        trail.drain(..drop);
        let note = serde_json::to_string(&trail)
            .map_err(|e| StoreError::Backend(format!("cannot encode the audit trail: {e}")))?;
        leases.set_note(&lease, &note).await
    }
    .await;
    let _ = leases.release(&lease).await;
    match written? {
        true => Ok(()),
        false => Err(StoreError::Conflict("the audit lease was lost".into())),
    }
}

fn print(output: &Output, value: &Value, text: &str) {
    if output.json {
        println!("{value}");
    } else {
        println!("{text}");
    }
}

fn action_failure(error: ActionError) -> Failure {
    match error {
        ActionError::Options(e) => Failure::usage(e.to_string()),
        ActionError::Store(e) => Failure::cannot_run(format!("the store failed: {e}")),
        ActionError::Refused(why) => Failure {
            exit: Exit::Failures,
            message: why,
        },
        other => Failure::cannot_run(other.to_string()),
    }
}

fn options(owner: String) -> ReapOptions {
    ReapOptions::new(1, owner)
}

pub async fn run_expire(a: &ExpireCmd, s: Settings<'_>) -> Result<Exit, Failure> {
    let mut options = options(operator());
    options.run_budget_ms = s.duration_ms(RUN_BUDGET, &a.run_budget, 1, MAX_TIMER_MS)?;
    options.fence_quiet_ms = s.duration_ms(QUIET_WINDOW, &a.quiet_window, 0, MAX_TIMER_MS)?;
    let journal_dir = crate::sweep::journal_dir(&a.sandboxes.journal_dir)?;
    let store = wiring::open(&a.db).await?;
    let providers = Providers::from_settings(s, &a.sandboxes).await?;
    confirm(
        &a.confirm,
        &format!(
            "expire run {} now (cancel it, drive it, reclaim its sandbox)",
            a.run_id
        ),
    )?;
    let sweeper = Sweeper::new(
        &store,
        &providers,
        journal_dir,
        Progress::new(None),
        DriveTuning::default(),
    );
    let result = expire_now(&sweeper.deps, &options, &a.run_id).await;
    let (words, failure) = match &result {
        Ok(entry) => (format!("{}: {}", entry.outcome, entry.reason), None),
        Err(e) => (format!("refused: {e}"), Some(e.clone())),
    };
    audit(
        &*store.ports().leases,
        AuditEntry {
            at: SystemClock.now_ms(),
            by: options.owner.clone(),
            action: "expire".into(),
            run_id: Some(a.run_id.clone()),
            result: words.clone(),
        },
    )
    .await;
    if let Some(error) = failure {
        return Err(action_failure(error));
    }
    let entry = result.expect("checked above");
    print(
        &a.output,
        &json!({"action": "expire", "runId": a.run_id, "entry": entry}),
        &format!("run {}: {words}", a.run_id),
    );
    Ok(match entry.outcome {
        reaper_core::reap::ReapOutcome::Expired => Exit::Ok,
        _ => Exit::Failures,
    })
}

pub async fn run_ledger(cmd: &LedgerCmd, s: Settings<'_>) -> Result<Exit, Failure> {
    let (a, forget) = match cmd {
        LedgerCmd::Retry(a) => (a, false),
        LedgerCmd::Forget(a) => (a, true),
    };
    let options = options(operator());
    let journal_dir = crate::sweep::journal_dir(&a.sandboxes.journal_dir)?;
    let store = wiring::open(&a.db).await?;
    let providers = Providers::from_settings(s, &a.sandboxes).await?;
    let what = if forget {
        format!(
            "forget run {}'s leaked sandbox (only if its provider confirms it gone)",
            a.run_id
        )
    } else {
        format!("retry run {}'s reclaim now", a.run_id)
    };
    confirm(&a.confirm, &what)?;
    let ports = store.ports();
    let (value, words, failure) = if forget {
        let forgotten = forget_leak(
            &*ports.leases,
            &*ports.ledger,
            &*ports.instances,
            &*providers.set,
            &options,
            SystemClock.now_ms(),
            &a.run_id,
        )
        .await;
        match forgotten {
            Ok(f) => (
                json!({"action": "ledger-forget", "runId": a.run_id, "forgotten": f}),
                format!(
                    "forgotten: the {} sandbox {} is gone (its provider says so); the ledger \
                     entry{} removed",
                    f.provider,
                    f.sandbox_id,
                    if f.instance_record_deleted {
                        " and the instance record were"
                    } else {
                        " was"
                    }
                ),
                None,
            ),
            Err(e) => (Value::Null, format!("refused: {e}"), Some(e)),
        }
    } else {
        let sweeper = Sweeper::new(
            &store,
            &providers,
            journal_dir,
            Progress::new(None),
            DriveTuning::default(),
        );
        match retry_reclaim_now(&sweeper.deps, &options, &a.run_id).await {
            Ok(r) => {
                let words = match &r {
                    reaper_core::actions::RetryNow::Settled => {
                        "settled: the entry is resolved".to_string()
                    }
                    reaper_core::actions::RetryNow::Failed { error } => {
                        format!("failed again (the entry stays, rescheduled): {error}")
                    }
                    #[allow(unreachable_patterns)]
                    _ => "done".to_string(),
                };
                (
                    json!({"action": "ledger-retry", "runId": a.run_id, "retry": r}),
                    words,
                    None,
                )
            }
            Err(e) => (Value::Null, format!("refused: {e}"), Some(e)),
        }
    };
    audit(
        &*ports.leases,
        AuditEntry {
            at: SystemClock.now_ms(),
            by: options.owner.clone(),
            action: if forget {
                "ledger-forget"
            } else {
                "ledger-retry"
            }
            .into(),
            run_id: Some(a.run_id.clone()),
            result: words.clone(),
        },
    )
    .await;
    if let Some(error) = failure {
        return Err(action_failure(error));
    }
    print(&a.output, &value, &format!("run {}: {words}", a.run_id));
    Ok(if words.starts_with("failed") {
        Exit::Failures
    } else {
        Exit::Ok
    })
}

pub async fn run_pause(a: &PauseCmd, paused: bool) -> Result<Exit, Failure> {
    let store = wiring::open(&a.db).await?;
    let leases = store.ports().leases;
    let what = if paused {
        "pause sweeping (every handler on this database stops sweeping until reaper resume)"
    } else {
        "resume sweeping"
    };
    confirm(&a.confirm, what)?;
    let before = read_pause(&*leases).await.ok().flatten();
    let mark = PauseMark {
        paused,
        by: operator(),
        at: SystemClock.now_ms(),
        reason: a.reason.clone(),
    };
    let recorded = record_pause(&*leases, &mark).await;
    let words = match (&recorded, paused) {
        (Ok(()), true) => "paused: sweeps do nothing until reaper resume".to_string(),
        (Ok(()), false) => match before {
            Some(b) if b.paused => format!("resumed (paused by {} at {})", b.by, b.at),
            _ => "resumed (it was not paused)".to_string(),
        },
        (Err(e), _) => format!("refused: {e}"),
    };
    audit(
        &*leases,
        AuditEntry {
            at: mark.at,
            by: mark.by.clone(),
            action: if paused { "pause" } else { "resume" }.into(),
            run_id: None,
            result: words.clone(),
        },
    )
    .await;
    if let Err(e) = recorded {
        return Err(Failure::cannot_run(format!(
            "recording the pause mark failed: {e}"
        )));
    }
    print(
        &a.output,
        &json!({"action": if paused { "pause" } else { "resume" }, "mark": mark}),
        &words,
    );
    Ok(Exit::Ok)
}
