//! `reaper demo`: a realistic scene on the embedded default, in a fresh directory. A dozen runs
//! with real agents in real local sandboxes, written into SQLite the way an application's chat
//! routes write them; one sweep and one prune, exactly as `reaper sweep` and `reaper prune` run
//! them (only the budgets are short); then a table of what happened, and a cleanup that leaves
//! nothing running.

use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use reaper_core::journal::journal_paths;
use reaper_core::reap::{ReapOptions, ReapRunEntry};
use reaper_core::{
    Clock, EpochMs, MessageStore, NewRun, Patch, RunPatch, RunRecord, RunStatus, RunStore,
    SandboxInstanceRecord, SandboxInstanceStore, SandboxProvider, Transcript, TranscriptMessage,
};
use reaper_local::{
    AgentProcess, CreateOptions, LocalSandbox, LocalSandboxProvider, SystemClock,
    DESTROY_FAILS_FLAG,
};
use reaper_sqlite::SqliteStore;
use serde::Serialize;
use serde_json::json;

use crate::config::{DemoArgs, PruneSettings};
use crate::prune::{prune_all, PruneAll};
use crate::render::{human_ms, outcome_totals, Table};
use crate::sweep::{sweep_once, Swept};
use crate::wiring::{self, DriveTuning, Progress, Providers, Sweeper};
use crate::{Exit, Failure};

/// The file that marks a directory as made by `reaper demo`: only such a directory is wiped.
const MARKER: &str = ".reaper-demo";
const MINUTE: i64 = 60_000;
const HOUR: i64 = 60 * MINUTE;
/// The demo's settings: a real TTL, and budgets short enough to finish in seconds.
const TTL_MS: u64 = 10 * MINUTE as u64;
const RUN_BUDGET_MS: u64 = 1_000;
const QUIET_MS: u64 = 50;
const POLL_MS: u64 = 50;
const ORPHAN_TTL_MS: u64 = HOUR as u64;
/// Agents that keep producing print a delta this often.
const TICK: &str = "while :; do printf '{\"delta\":\".\"}\\n'; sleep 0.2; done";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Agent {
    /// Runs to its end before the sweep.
    Finishes(&'static str),
    /// Still running when the sweep comes.
    Keeps(&'static str),
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Record {
    /// Running, detached this long ago.
    Detached(i64),
    /// Detached, then a viewer came back (detachedSince cleared).
    Reattached,
    /// A human-in-the-loop pause, detached this long ago.
    Interrupted(i64),
    /// Completed while a viewer watched; its sandbox stays for the thread's next turn.
    CompletedEarlier,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Normal,
    DestroyFails,
    VanishedBefore,
    NoSandbox,
}

struct Scene {
    run_id: &'static str,
    what: &'static str,
    prompt: &'static str,
    agent: Agent,
    record: Record,
    fate: Fate,
    /// The outcome, or "not listed".
    expect: &'static str,
    expect_sandbox: &'static str,
}

const NOT_LISTED: &str = "not listed";

fn scenes() -> Vec<Scene> {
    let s = |run_id, what, prompt, agent, record, fate, expect, expect_sandbox| Scene {
        run_id,
        what,
        prompt,
        agent,
        record,
        fate,
        expect,
        expect_sandbox,
    };
    use Agent::*;
    use Fate::*;
    use Record::*;
    vec![
        s(
            "run-hello",
            "finished while detached",
            "Say hello",
            Finishes(r#"printf '{"delta":"Hello"}\n{"delta":", world"}\n{"delta":"!"}\n'"#),
            Detached(2 * MINUTE),
            Normal,
            "finalized",
            "destroyed",
        ),
        s(
            "run-essay",
            "finished while detached, with tool calls",
            "Summarise the release notes",
            Finishes(
                r#"printf '{"type":"TOOL_CALL_START","toolCallId":"t1","toolCallName":"fetch_notes"}\n{"type":"TOOL_CALL_END","toolCallId":"t1"}\n'; for w in Three fixes, one feature, no breaking changes.; do printf '{"delta":"%s "}\n' "$w"; done"#,
            ),
            Detached(4 * MINUTE),
            Normal,
            "finalized",
            "destroyed",
        ),
        s(
            "run-crash",
            "agent exited 3 while detached",
            "Refactor the parser",
            Finishes(
                r#"printf '{"delta":"Reading the parser..."}\n'; echo 'fatal: out of memory' >&2; exit 3"#,
            ),
            Detached(MINUTE),
            Normal,
            "finalized",
            "destroyed",
        ),
        s(
            "run-noisy",
            "finished, with plain-text lines",
            "Run the tests",
            Finishes(
                r#"echo 'running 12 tests'; printf '{"delta":"All 12 tests pass."}\n'; echo 'warning: slow test' >&2"#,
            ),
            Detached(3 * MINUTE),
            Normal,
            "finalized",
            "destroyed",
        ),
        s(
            "run-typing",
            "still producing",
            "Write a long story",
            Keeps(TICK),
            Detached(MINUTE),
            Normal,
            "producing",
            "kept",
        ),
        s(
            "run-thinking",
            "still producing, silent so far",
            "Think hard",
            Keeps("sleep 300"),
            Detached(30_000),
            Normal,
            "producing",
            "kept",
        ),
        s(
            "run-stale",
            "past its TTL, still producing",
            "Crawl the whole web",
            Keeps(TICK),
            Detached(2 * HOUR),
            Normal,
            "expired",
            "destroyed",
        ),
        s(
            "run-forgotten",
            "past its TTL, finished long ago",
            "Translate the README",
            Finishes(r#"printf '{"delta":"Done: README.fr.md"}\n'"#),
            Detached(3 * HOUR),
            Normal,
            "expired",
            "destroyed",
        ),
        s(
            "run-back",
            "viewer came back (not detached)",
            "Pair on the bug",
            Keeps(TICK),
            Reattached,
            Normal,
            NOT_LISTED,
            "kept",
        ),
        s(
            "run-leaky",
            "finished; sandbox destroy fails",
            "Build the docs",
            Finishes(r#"printf '{"delta":"Docs built."}\n'"#),
            Detached(2 * MINUTE),
            DestroyFails,
            "reclaim-failed",
            "LEAKED",
        ),
        s(
            "run-vanished",
            "its sandbox vanished",
            "Lint everything",
            Finishes(r#"printf '{"delta":"ok"}\n'"#),
            Detached(5 * MINUTE),
            VanishedBefore,
            "unknown",
            "gone before",
        ),
        s(
            "run-paused",
            "interrupted: waits for a human",
            "Deploy to prod?",
            None,
            Interrupted(HOUR),
            NoSandbox,
            NOT_LISTED,
            "-",
        ),
        s(
            "run-earlier",
            "completed while watched",
            "Fix the typo",
            Finishes(r#"printf '{"delta":"Fixed."}\n'"#),
            CompletedEarlier,
            Normal,
            NOT_LISTED,
            "kept",
        ),
    ]
}

/// A run as staged: its scene, its sandbox, its agent if still running.
struct Staged {
    scene: Scene,
    sandbox_id: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Row {
    run_id: String,
    scene: String,
    outcome: String,
    status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    exit_code: Option<i64>,
    sandbox: String,
    note: String,
    expected: bool,
}

fn setup_failed(what: &str, e: impl std::fmt::Display) -> Failure {
    Failure::cannot_run(format!("demo setup failed: {what}: {e}"))
}

pub async fn run(a: &DemoArgs) -> Result<Exit, Failure> {
    let started = Instant::now();
    let dir = prepare_dir(&a.dir).await?;
    let db_path = dir.join("reaper.db");
    let root = dir.join("sandboxes");
    std::fs::create_dir_all(&root).map_err(|e| setup_failed("creating the sandbox root", e))?;
    let store = SqliteStore::open(&db_path).map_err(|e| setup_failed("opening the database", e))?;
    let provider = wiring::provider(&root, Some(Duration::from_millis(500)), true)?;

    let result = stage_sweep_and_explain(&store, &provider, &dir, &db_path, started).await;
    // Whatever happened, nothing of the demo keeps running.
    let cleanup = cleanup(&provider, &root).await;
    // The cleanup destroyed the leaked sandbox too, so the ledger must learn it is gone: else
    // `reaper status` on the demo's database reports a leak that no longer exists.
    let settled = settle_leaks(&store, &provider).await;
    let (mut text, mut json, exit) = result?;
    let _ = writeln!(
        text,
        "cleanup: stopped {} agent(s) still running and removed {} sandbox(es) (the leaked one \
         too: a ledger retry confirmed {} leak(s) gone); no demo process is left running",
        cleanup.stopped, cleanup.removed, settled
    );
    let _ = writeln!(
        text,
        "took {}. Look around: reaper status --db {}",
        human_ms(started.elapsed().as_millis() as i64),
        db_path.display()
    );
    json["cleanup"] = json!({
        "stoppedAgents": cleanup.stopped,
        "removedSandboxes": cleanup.removed,
        "settledLeaks": settled,
    });
    if a.output.json {
        println!("{json}");
    } else {
        print!("{text}");
    }
    Ok(exit)
}

/// Creates the directory, or wipes it when it holds a previous demo. Anything else is refused.
async fn prepare_dir(dir: &Path) -> Result<PathBuf, Failure> {
    if dir.exists() {
        let refuse = |why: &str| {
            Failure::usage(format!(
                "refusing to use {}: {why}; `reaper demo` only wipes a directory it made (with a \
                 {MARKER} marker inside): pass --dir a new path or a previous demo directory",
                dir.display()
            ))
        };
        if !dir.is_dir() {
            return Err(refuse("it is not a directory"));
        }
        let empty = std::fs::read_dir(dir)
            .map_err(|e| setup_failed("reading the demo directory", e))?
            .next()
            .is_none();
        if !empty {
            if !dir.join(MARKER).is_file() {
                return Err(refuse("it is not empty and was not made by `reaper demo`"));
            }
            // A previous demo that was interrupted may have left agents running.
            let root = dir.join("sandboxes");
            if root.is_dir() {
                cleanup(&LocalSandboxProvider::with_root(&root), &root).await;
            }
            std::fs::remove_dir_all(dir)
                .map_err(|e| setup_failed("wiping the previous demo", e))?;
        }
    }
    std::fs::create_dir_all(dir).map_err(|e| setup_failed("creating the demo directory", e))?;
    std::fs::write(
        dir.join(MARKER),
        "made by `reaper demo`; wiped by the next one\n",
    )
    .map_err(|e| setup_failed("writing the demo marker", e))?;
    Ok(dir.to_path_buf())
}

type Explained = (String, serde_json::Value, Exit);

async fn stage_sweep_and_explain(
    store: &SqliteStore,
    provider: &LocalSandboxProvider,
    dir: &Path,
    db_path: &Path,
    started: Instant,
) -> Result<Explained, Failure> {
    let now = SystemClock.now_ms();
    let mut staged = Vec::new();
    for scene in scenes() {
        staged.push(stage(store, provider, scene, now).await?);
    }
    let orphan = plant_orphan(provider, &staged)?;
    let setup_took = started.elapsed();

    let providers = Providers::local_only(provider.clone());
    let any_store = &wiring::Store::Sqlite(store.clone());
    let sweeper = Sweeper::new(
        any_store,
        &providers,
        None,
        Progress::new(None),
        DriveTuning { poll_ms: POLL_MS },
    );
    let mut options = ReapOptions::new(TTL_MS, wiring::owner_id());
    options.run_budget_ms = RUN_BUDGET_MS;
    options.fence_quiet_ms = QUIET_MS;
    let swept = sweep_once(&sweeper, &options, None).await;
    let prune_settings = PruneSettings {
        orphan_ttl_ms: ORPHAN_TTL_MS,
        max_deletes: reaper_core::journal::DEFAULT_MAX_DELETES,
        event_retention_ms: reaper_sqlite::DEFAULT_EVENT_RETENTION_MS,
        dry_run: false,
    };
    let pruned = prune_all(
        any_store,
        &providers,
        None,
        &prune_settings,
        SystemClock.now_ms(),
    )
    .await;

    let mut rows = Vec::new();
    for s in &staged {
        rows.push(explain(store, provider, s, &swept).await?);
    }
    let text = render(
        dir, db_path, &staged, &rows, &swept, &pruned, &orphan, setup_took,
    );
    let unexpected = rows.iter().filter(|r| !r.expected).count();
    let json = json!({
        "dir": dir,
        "database": db_path,
        "runs": rows,
        "orphanJournal": orphan,
        "sweep": swept.json(),
        "prune": pruned,
        "unexpected": unexpected,
    });
    let exit = if unexpected > 0 || swept.report.sweep != reaper_core::reap::SweepStatus::Swept {
        Exit::Failures
    } else {
        Exit::Ok
    };
    Ok((text, json, exit))
}

/// Writes one run as a chat route would: create the run, save the user's message, start the
/// agent in the thread's sandbox and record the instance, then detach with the sandbox key.
async fn stage(
    store: &SqliteStore,
    provider: &LocalSandboxProvider,
    scene: Scene,
    now: EpochMs,
) -> Result<Staged, Failure> {
    let run_id = scene.run_id;
    let thread_id = format!("thread-{}", run_id.trim_start_matches("run-"));
    let at = |what: &str| format!("{what} of {run_id}");
    let ago = match scene.record {
        Record::Detached(ago) | Record::Interrupted(ago) => ago,
        Record::Reattached | Record::CompletedEarlier => 5 * MINUTE,
    };
    let started_at = now - ago - 30_000;
    store
        .create_or_resume(NewRun {
            run_id: run_id.into(),
            thread_id: thread_id.clone(),
            started_at,
            status: None,
        })
        .await
        .map_err(|e| setup_failed(&at("creating the run"), e))?;
    store
        .save_transcript(
            &Transcript {
                run_id: run_id.into(),
                thread_id: thread_id.clone(),
                messages: vec![TranscriptMessage {
                    role: "user".into(),
                    content: scene.prompt.into(),
                }],
                exit_code: None,
                saved_at: started_at,
            },
            None,
        )
        .await
        .map_err(|e| setup_failed(&at("saving the prompt"), e))?;

    let mut sandbox_id = None;
    let mut sandbox_key = None;
    if scene.fate != Fate::NoSandbox {
        let sandbox = provider
            .create(CreateOptions::default())
            .await
            .map_err(|e| setup_failed(&at("creating the sandbox"), e))?;
        let key = format!("local:{thread_id}");
        SandboxInstanceStore::upsert(
            store,
            SandboxInstanceRecord {
                key: key.clone(),
                provider: provider.name().to_string(),
                provider_sandbox_id: sandbox.id_str().to_string(),
                latest_snapshot_id: None,
                thread_id: thread_id.clone(),
                latest_run_id: Some(run_id.into()),
                updated_at: started_at,
            },
        )
        .await
        .map_err(|e| setup_failed(&at("recording the sandbox instance"), e))?;
        match scene.agent {
            Agent::Finishes(cmd) => {
                let mut agent = start(&sandbox, run_id, cmd).await?;
                // A real process event, not a sleep: the sentinel is written when this returns.
                agent
                    .wait()
                    .await
                    .map_err(|e| setup_failed(&at("waiting for the agent"), e))?;
            }
            Agent::Keeps(cmd) => {
                start(&sandbox, run_id, cmd).await?;
            }
            Agent::None => {}
        }
        match scene.fate {
            Fate::DestroyFails => std::fs::write(sandbox.dir().join(DESTROY_FAILS_FLAG), "")
                .map_err(|e| setup_failed(&at("arming the destroy fault"), e))?,
            Fate::VanishedBefore => provider
                .destroy(sandbox.id_str())
                .await
                .map_err(|e| setup_failed(&at("destroying the sandbox"), e))?,
            Fate::Normal | Fate::NoSandbox => {}
        }
        sandbox_id = Some(sandbox.id_str().to_string());
        sandbox_key = Some(key);
    }

    let patch = match scene.record {
        Record::Detached(ago) => RunPatch::detach(now - ago, sandbox_key),
        Record::Reattached => RunPatch {
            detached_since: Patch::Clear,
            sandbox_key: sandbox_key.map(Patch::Set).unwrap_or_default(),
            ..Default::default()
        },
        Record::Interrupted(ago) => RunPatch {
            status: Some(RunStatus::Interrupted),
            ..RunPatch::detach(now - ago, sandbox_key)
        },
        Record::CompletedEarlier => RunPatch {
            status: Some(RunStatus::Completed),
            finished_at: Patch::Set(now - 4 * MINUTE),
            sandbox_key: sandbox_key.map(Patch::Set).unwrap_or_default(),
            ..Default::default()
        },
    };
    if scene.record == Record::Reattached {
        // The detach happened first; the returning viewer's takeover cleared it.
        store
            .update(run_id, RunPatch::detach(now - 3 * MINUTE, None))
            .await
            .map_err(|e| setup_failed(&at("detaching the run"), e))?;
    }
    store
        .update(run_id, patch)
        .await
        .map_err(|e| setup_failed(&at("recording the detach"), e))?;
    Ok(Staged { scene, sandbox_id })
}

async fn start(sandbox: &LocalSandbox, run_id: &str, cmd: &str) -> Result<AgentProcess, Failure> {
    sandbox
        .start_agent(run_id, cmd, None)
        .await
        .map_err(|e| setup_failed(&format!("starting the agent of {run_id}"), e))
}

trait IdStr {
    fn id_str(&self) -> &str;
}

impl IdStr for LocalSandbox {
    fn id_str(&self) -> &str {
        reaper_core::SandboxHandle::id(self)
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Orphan {
    run_id: String,
    sandbox: String,
    age_ms: i64,
}

/// A journal whose run record is gone (its thread was deleted), last written two hours ago, in
/// the sandbox of a run that survives the sweep.
fn plant_orphan(provider: &LocalSandboxProvider, staged: &[Staged]) -> Result<Orphan, Failure> {
    let host = staged
        .iter()
        .find(|s| s.scene.run_id == "run-typing")
        .and_then(|s| s.sandbox_id.clone())
        .ok_or_else(|| setup_failed("planting the orphan", "run-typing has no sandbox"))?;
    let journal_dir = provider.root().join(&host).join("journals");
    let run_id = "run-of-a-deleted-thread";
    let paths = journal_paths(run_id, journal_dir.to_str())
        .map_err(|e| setup_failed("naming the orphan journal", e))?;
    let age = 2 * HOUR;
    let write = |path: &str| -> std::io::Result<()> {
        std::fs::write(path, "{\"delta\":\"nobody reads this\"}\n")?;
        let file = std::fs::OpenOptions::new().write(true).open(path)?;
        file.set_modified(SystemTime::now() - Duration::from_millis(age as u64))
    };
    write(&paths.journal)
        .and_then(|()| write(&paths.stderr))
        .map_err(|e| setup_failed("writing the orphan journal", e))?;
    Ok(Orphan {
        run_id: run_id.into(),
        sandbox: host,
        age_ms: age,
    })
}

async fn explain(
    store: &SqliteStore,
    provider: &LocalSandboxProvider,
    s: &Staged,
    swept: &Swept,
) -> Result<Row, Failure> {
    let run_id = s.scene.run_id;
    let read = |e: reaper_core::StoreError| setup_failed(&format!("reading back {run_id}"), e);
    let entry: Option<&ReapRunEntry> = swept.report.report.runs.iter().find(|e| e.run_id == run_id);
    let record: Option<RunRecord> = RunStore::get(store, run_id).await.map_err(read)?;
    let transcript = store.get_transcript(run_id).await.map_err(read)?;
    let alive = match &s.sandbox_id {
        Some(id) => provider.open(id).await.ok().flatten().is_some(),
        None => false,
    };
    let sandbox = match (&s.sandbox_id, alive, s.scene.fate) {
        (None, _, _) => "-".to_string(),
        (Some(_), true, Fate::DestroyFails) => "LEAKED".into(),
        (Some(_), true, _) => "kept".into(),
        (Some(_), false, Fate::VanishedBefore) => "gone before".into(),
        (Some(_), false, _) => "destroyed".into(),
    };
    let outcome = entry
        .map(|e| e.outcome.to_string())
        .unwrap_or_else(|| NOT_LISTED.into());
    let status = record
        .as_ref()
        .map(|r| r.status.to_string())
        .unwrap_or_else(|| "-".into());

    let mut notes: Vec<String> = Vec::new();
    let said = transcript
        .as_ref()
        .and_then(|t| t.messages.iter().rev().find(|m| m.role == "assistant"))
        .map(|m| m.content.trim().to_string());
    match outcome.as_str() {
        "producing" => notes.push("agent still writing: left alone".into()),
        "unknown" => notes.push("sandbox is gone, cannot tell: left alone".into()),
        NOT_LISTED => notes.push(match s.scene.record {
            Record::Reattached => "a viewer is attached: untouched".into(),
            Record::Interrupted(_) => "interrupted is not running: untouched".into(),
            _ => "already terminal: untouched".into(),
        }),
        _ => {}
    }
    if record.as_ref().and_then(|r| r.cancel_requested) == Some(true) {
        notes.push("cancel recorded".into());
    }
    if let Some(said) = said {
        notes.push(format!("transcript saved: {:?}", shorten(&said, 36)));
    } else if outcome == "expired" {
        notes.push("stopped by the run budget, no transcript".into());
    }
    if let Some(err) = record.as_ref().and_then(|r| r.error.as_ref()) {
        notes.push(err.message.clone());
    }
    if let Some(err) = entry.and_then(|e| e.error.as_ref()) {
        if outcome == "reclaim-failed" {
            notes.push("destroy refused: the sandbox may still be running".into());
        } else {
            notes.push(err.to_string());
        }
    }
    let expected = outcome == s.scene.expect
        && (sandbox == s.scene.expect_sandbox
            || (s.scene.expect_sandbox == "LEAKED" && sandbox == "LEAKED"));
    if !expected {
        notes.push(format!(
            "UNEXPECTED: the scene expects {} / sandbox {}",
            s.scene.expect, s.scene.expect_sandbox
        ));
    }
    Ok(Row {
        run_id: run_id.into(),
        scene: s.scene.what.into(),
        outcome,
        status,
        exit_code: entry.and_then(|e| e.exit_code),
        sandbox,
        note: notes.join("; "),
        expected,
    })
}

fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let cut: String = s.chars().take(max - 1).collect();
    format!("{cut}…")
}

#[allow(clippy::too_many_arguments)]
fn render(
    dir: &Path,
    db_path: &Path,
    staged: &[Staged],
    rows: &[Row],
    swept: &Swept,
    pruned: &PruneAll,
    orphan: &Orphan,
    setup_took: Duration,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "reaper demo: {} runs with real agents in local sandboxes under {}, recorded in {} as a \
         chat route records them (set up in {})",
        rows.len(),
        dir.join("sandboxes").display(),
        db_path.display(),
        human_ms(setup_took.as_millis() as i64)
    );
    let _ = writeln!(
        out,
        "settings: detached-run TTL {}, run budget {}, quiet window {} (short budgets for the \
         demo; `reaper sweep` defaults to 30s and 5s)\n",
        human_ms(TTL_MS as i64),
        human_ms(RUN_BUDGET_MS as i64),
        human_ms(QUIET_MS as i64)
    );
    let _ = writeln!(
        out,
        "one sweep: {}\n",
        crate::render::sweep_headline(&swept.report)
    );
    let mut table = Table::new(&[
        "RUN", "SCENE", "OUTCOME", "STATUS", "EXIT", "SANDBOX", "NOTE",
    ]);
    for r in rows {
        table.row(vec![
            r.run_id.clone(),
            r.scene.clone(),
            r.outcome.clone(),
            r.status.clone(),
            r.exit_code
                .map(|c| c.to_string())
                .unwrap_or_else(|| "-".into()),
            r.sandbox.clone(),
            r.note.clone(),
        ]);
    }
    out.push_str(&table.render());

    let owner = |sandbox: &str| {
        staged
            .iter()
            .find(|s| s.sandbox_id.as_deref() == Some(sandbox))
            .map(|s| s.scene.run_id)
            .unwrap_or("?")
    };
    let _ = writeln!(
        out,
        "\njournal prune in the sandboxes still standing (journals of terminal runs; orphans \
         older than {}; {} is an orphan {} old):",
        human_ms(ORPHAN_TTL_MS as i64),
        orphan.run_id,
        human_ms(orphan.age_ms)
    );
    let mut prune_table = Table::new(&["SANDBOX OF", "DELETED", "KEPT"]);
    // In the scene's order, not the sandboxes' random ids.
    let mut journals: Vec<_> = pruned.journals.iter().collect();
    journals.sort_by_key(|j| {
        staged
            .iter()
            .position(|s| s.sandbox_id.as_deref() == Some(j.sandbox.as_str()))
    });
    for j in journals {
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
        let mut deleted = j.report.deleted.join(", ");
        if deleted.is_empty() {
            deleted = "-".into();
        }
        prune_table.row(vec![
            owner(&j.sandbox).to_string(),
            deleted,
            if kept.is_empty() {
                "-".into()
            } else {
                kept.join(", ")
            },
        ]);
    }
    out.push_str(&prune_table.render());

    let listed_out = rows.iter().filter(|r| r.outcome == NOT_LISTED).count();
    let destroyed = rows.iter().filter(|r| r.sandbox == "destroyed").count();
    let leaked = rows.iter().filter(|r| r.sandbox == "LEAKED").count();
    let _ = writeln!(
        out,
        "\ntotals: {} runs: {} · {NOT_LISTED} {listed_out}",
        rows.len(),
        outcome_totals(&swept.report.report.outcomes)
    );
    let _ = writeln!(
        out,
        "        sandboxes destroyed {destroyed} · leaked {leaked} · journals pruned {} · events \
         aged out {} · prune failures {}",
        pruned.deleted(),
        pruned.events.events_deleted.unwrap_or(0),
        pruned.failures()
    );
    let _ = writeln!(
        out,
        "        {}",
        crate::render::ledger_line(
            &swept.report.report.reclaims,
            swept.report.started_at + swept.report.duration_ms
        )
    );
    let unexpected = rows.iter().filter(|r| !r.expected).count();
    if unexpected > 0 {
        let _ = writeln!(
            out,
            "WARNING: {unexpected} run(s) did not end as their scene expects"
        );
    }
    out
}

/// Makes the ledger's entries due now and runs the reaper's own ledger pass over them (a sweep
/// that takes no new runs), exactly as the next sweep would after the retry backoff: it closes
/// each run's log, confirms its sandbox gone and resolves the entry. Returns how many settled.
async fn settle_leaks(store: &SqliteStore, provider: &LocalSandboxProvider) -> usize {
    use reaper_core::ReclaimLedger;
    let now = SystemClock.now_ms();
    let Ok(entries) = store.due_intents(EpochMs::MAX, 1_000).await else {
        return 0;
    };
    for mut entry in entries {
        entry.next_attempt_at = now;
        let _ = store.update_intent(&entry).await;
    }
    let providers = Providers::local_only(provider.clone());
    let sweeper = Sweeper::new(
        &wiring::Store::Sqlite(store.clone()),
        &providers,
        None,
        Progress::new(None),
        DriveTuning { poll_ms: POLL_MS },
    );
    let mut options = ReapOptions::new(TTL_MS, wiring::owner_id());
    options.max_runs = 0;
    let swept = sweep_once(&sweeper, &options, None).await;
    swept.report.report.reclaims.settled
}

struct Cleanup {
    stopped: usize,
    removed: usize,
}

/// Destroys every sandbox under the root (disarming the destroy fault first), which kills every
/// agent process group still running, then confirms the agents are gone.
async fn cleanup(provider: &LocalSandboxProvider, root: &Path) -> Cleanup {
    let mut stopped = 0;
    let mut removed = 0;
    let Ok(entries) = std::fs::read_dir(root) else {
        return Cleanup { stopped, removed };
    };
    for entry in entries.flatten() {
        let Ok(id) = entry.file_name().into_string() else {
            continue;
        };
        let Ok(Some(sandbox)) = provider.open(&id).await else {
            continue;
        };
        if let Ok(meta) = sandbox.metadata().await {
            stopped += meta.agents.iter().filter(|a| pid_alive(a.pid)).count();
        }
        let _ = std::fs::remove_file(sandbox.dir().join(DESTROY_FAILS_FLAG));
        match provider.destroy(&id).await {
            Ok(()) => removed += 1,
            Err(error) => {
                eprintln!("reaper demo: cleanup could not destroy sandbox {id}: {error}")
            }
        }
    }
    Cleanup { stopped, removed }
}

/// A live process, not a zombie waiting to be reaped.
fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .map(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X'))
            .unwrap_or(false),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scene_is_a_dozen_runs_with_distinct_ids() {
        let scenes = scenes();
        assert!(scenes.len() >= 12);
        let mut ids: Vec<_> = scenes.iter().map(|s| s.run_id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), scenes.len());
    }

    #[test]
    fn this_process_is_alive_and_a_missing_pid_is_not() {
        assert!(pid_alive(std::process::id()));
        assert!(!pid_alive(u32::MAX - 1));
    }
}
