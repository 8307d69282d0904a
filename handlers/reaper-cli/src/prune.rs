//! `reaper prune`: the journal prune in every sandbox of every configured provider (the local
//! sandboxes under the root, this Docker provider's labelled containers), then the delivery-log
//! event retention.

use std::fmt::Write;

use reaper_core::prune::{prune_journals, PruneOptions, PruneReport};
use reaper_core::SandboxProvider;
use reaper_core::{Clock, EpochMs};
use reaper_docker::DockerProvider;
use reaper_local::{validate_sandbox_id, LocalSandboxProvider, SystemClock};
use serde::Serialize;

use crate::config::{PruneCmd, PruneSettings, Settings};
use crate::render::{human_ms, Table};
use crate::sweep::journal_dir;
use crate::wiring::{Providers, Store};
use crate::{wiring, Exit, Failure};

/// Events deleted per transaction, so an application writing to the same file waits at most one
/// short batch.
const EVENT_BATCH: usize = 500;

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxPrune {
    /// The provider name, as instance records carry it.
    pub provider: String,
    pub sandbox: String,
    pub journal_dir: String,
    #[serde(flatten)]
    pub report: PruneReport,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Skipped {
    pub provider: String,
    pub sandbox: String,
    pub error: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventsPruned {
    pub retention_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events_deleted: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What one prune did across every sandbox and the event log.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PruneAll {
    /// A dry run: nothing was deleted; each sandbox's `planned` says what would be.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
    pub journals: Vec<SandboxPrune>,
    /// Sandboxes that could not be pruned (their metadata is unreadable, or listing failed).
    pub skipped: Vec<Skipped>,
    pub events: EventsPruned,
}

impl PruneAll {
    pub fn deleted(&self) -> usize {
        self.journals.iter().map(|j| j.report.deleted.len()).sum()
    }

    pub fn failures(&self) -> usize {
        self.journals
            .iter()
            .map(|j| j.report.failures.len())
            .sum::<usize>()
            + self.skipped.len()
            + usize::from(self.events.error.is_some())
    }

    pub fn summary(&self) -> String {
        if self.dry_run {
            let planned: usize = self.journals.iter().map(|j| j.report.planned.len()).sum();
            return format!(
                "dry run: {planned} journal(s) would be deleted in {} sandbox(es), {} \
                 failure(s); nothing was deleted and no events were aged out",
                self.journals.len(),
                self.failures()
            );
        }
        let events = match (&self.events.error, self.events.events_deleted) {
            (Some(e), _) => format!("event retention failed: {e}"),
            (None, n) => format!(
                "{} events of {} runs finished over {} ago deleted",
                n.unwrap_or(0),
                self.events.runs.unwrap_or(0),
                human_ms(self.events.retention_ms as i64)
            ),
        };
        format!(
            "{} journal(s) deleted in {} sandbox(es), {} failure(s); {events}",
            self.deleted(),
            self.journals.len(),
            self.failures()
        )
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut table = Table::new(&["PROVIDER", "SANDBOX", "DELETED", "KEPT", "FAILURES"]);
        for j in &self.journals {
            let kept: Vec<String> = j
                .report
                .kept
                .iter()
                .map(|k| {
                    format!(
                        "{} ({})",
                        k.run_id.clone().unwrap_or_else(|| k.names.join(" ")),
                        k.reason
                    )
                })
                .collect();
            let failures: Vec<String> = j
                .report
                .failures
                .iter()
                .map(|f| f.message.clone())
                .collect();
            let deleted: Vec<String> = if self.dry_run {
                j.report
                    .planned
                    .iter()
                    .map(|p| format!("would delete {} ({})", p.run_id, p.proof))
                    .collect()
            } else {
                j.report.deleted.clone()
            };
            table.row(vec![
                j.provider.clone(),
                j.sandbox.clone(),
                dash(deleted.join(", ")),
                dash(kept.join(", ")),
                dash(failures.join("; ")),
            ]);
        }
        for s in &self.skipped {
            table.row(vec![
                s.provider.clone(),
                s.sandbox.clone(),
                "-".into(),
                "-".into(),
                s.error.clone(),
            ]);
        }
        if table.is_empty() {
            out.push_str("no sandboxes to prune\n");
        } else {
            out.push_str(&table.render());
        }
        let _ = writeln!(out, "\n{}", self.summary());
        out
    }
}

fn dash(s: String) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s
    }
}

/// Prunes every sandbox of every configured provider (local ones in name order, then Docker
/// containers in id order), then ages out events. Never fails: every problem is in the result.
/// A sandbox is pruned through its own provider only, so a reaper never lists or deletes in a
/// provider it was not configured with.
pub async fn prune_all(
    store: &Store,
    providers: &Providers,
    journal_dir: Option<&str>,
    s: &PruneSettings,
    now: EpochMs,
) -> PruneAll {
    let mut all = PruneAll {
        dry_run: s.dry_run,
        journals: Vec::new(),
        skipped: Vec::new(),
        events: EventsPruned {
            retention_ms: s.event_retention_ms,
            runs: None,
            events_deleted: None,
            error: None,
        },
    };
    let options = |dir: Option<String>| {
        let mut options = PruneOptions::new(now);
        options.dir = dir;
        options.orphan_ttl_ms = s.orphan_ttl_ms;
        options.max_deletes = s.max_deletes;
        options.dry_run = s.dry_run;
        options
    };
    if let Some(local) = &providers.local {
        prune_local(&*store.ports().runs, local, journal_dir, &options, &mut all).await;
    }
    if let Some(docker) = &providers.docker {
        prune_docker(
            &*store.ports().runs,
            docker,
            journal_dir,
            &options,
            &mut all,
        )
        .await;
    }
    if s.dry_run {
        // The event retention is a write: a dry run leaves the events as they are.
        return all;
    }
    all.events = match store
        .prune_events(now, s.event_retention_ms, EVENT_BATCH)
        .await
    {
        Ok(r) => EventsPruned {
            retention_ms: s.event_retention_ms,
            runs: Some(r.runs),
            events_deleted: Some(r.events_deleted),
            error: None,
        },
        Err(e) => EventsPruned {
            retention_ms: s.event_retention_ms,
            runs: None,
            events_deleted: None,
            error: Some(e.to_string()),
        },
    };
    all
}

async fn prune_local(
    store: &dyn reaper_core::RunStore,
    provider: &LocalSandboxProvider,
    journal_dir: Option<&str>,
    options: &impl Fn(Option<String>) -> PruneOptions,
    all: &mut PruneAll,
) {
    let name = provider.name().to_string();
    let mut ids: Vec<String> = match std::fs::read_dir(provider.root()) {
        Ok(entries) => entries
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|name| validate_sandbox_id(name).is_ok())
            .collect(),
        Err(e) => {
            all.skipped.push(Skipped {
                provider: name,
                sandbox: provider.root().display().to_string(),
                error: format!("cannot list the sandbox root: {e}"),
            });
            return;
        }
    };
    ids.sort();
    for id in ids {
        let sandbox = match provider.open(&id).await {
            Ok(Some(sandbox)) => sandbox,
            // A directory without metadata is not a sandbox (or one half destroyed).
            Ok(None) => continue,
            Err(e) => {
                all.skipped.push(Skipped {
                    provider: name.clone(),
                    sandbox: id,
                    error: e.to_string(),
                });
                continue;
            }
        };
        let dir = journal_dir
            .map(str::to_string)
            .unwrap_or_else(|| sandbox.journal_dir().to_string());
        let report = prune_journals(&sandbox, store, &options(Some(dir.clone()))).await;
        all.journals.push(SandboxPrune {
            provider: name.clone(),
            sandbox: id,
            journal_dir: dir,
            report,
        });
    }
}

/// The journals of this provider's running containers (labelled with its name; a stopped one
/// cannot run the prune and holds no live agent), in the configured directory or the core's
/// default one.
async fn prune_docker(
    store: &dyn reaper_core::RunStore,
    provider: &DockerProvider,
    journal_dir: Option<&str>,
    options: &impl Fn(Option<String>) -> PruneOptions,
    all: &mut PruneAll,
) {
    let name = provider.name().to_string();
    let ids = match provider.list().await {
        Ok(ids) => ids,
        Err(e) => {
            all.skipped.push(Skipped {
                provider: name,
                sandbox: "-".into(),
                error: format!("cannot list the Docker sandboxes: {e}"),
            });
            return;
        }
    };
    let dir = journal_dir.unwrap_or(reaper_core::journal::DEFAULT_JOURNAL_DIR);
    for id in ids {
        let sandbox = match provider.open(&id).await {
            Ok(Some(sandbox)) => sandbox,
            // Stopped or removed since the listing.
            Ok(None) => continue,
            Err(e) => {
                all.skipped.push(Skipped {
                    provider: name.clone(),
                    sandbox: id,
                    error: e.to_string(),
                });
                continue;
            }
        };
        let report = prune_journals(&sandbox, store, &options(Some(dir.to_string()))).await;
        all.journals.push(SandboxPrune {
            provider: name.clone(),
            sandbox: sandbox.id().to_string(),
            journal_dir: dir.to_string(),
            report,
        });
    }
}

pub async fn run(a: &PruneCmd, s: Settings<'_>) -> Result<Exit, Failure> {
    let mut settings = PruneSettings::parse(s, &a.prune)?;
    settings.dry_run = a.dry_run;
    let journal_dir = journal_dir(&a.sandboxes.journal_dir)?;
    let store = if a.dry_run {
        wiring::open_read_only(&a.db).await?
    } else {
        wiring::open(&a.db).await?
    };
    let providers = Providers::from_settings(s, &a.sandboxes).await?;
    let result = prune_all(
        &store,
        &providers,
        journal_dir.as_deref(),
        &settings,
        SystemClock.now_ms(),
    )
    .await;
    if a.output.json {
        println!(
            "{}",
            serde_json::to_string(&result).unwrap_or_else(|_| "null".into())
        );
    } else {
        print!("{}", result.render());
    }
    Ok(if result.failures() > 0 {
        Exit::Failures
    } else {
        Exit::Ok
    })
}
