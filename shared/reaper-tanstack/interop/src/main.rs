//! The Rust side of the TypeScript package's tests: everything here goes through the reaper's own
//! store ports, so a test that passes proves the two languages agree on the same database.
//!
//! ```text
//! reaper-tanstack-interop schema                       the SQLite migrations, as JSON
//! reaper-tanstack-interop write <backend>  < corpus    writes a corpus through the Rust stores
//! reaper-tanstack-interop read <backend>   < ids       reads it back, prints the corpus
//! reaper-tanstack-interop drive <backend> <runId> <owner> <chunks> <leaseTtlMs>
//!                                                      claims the run as the reaper does, appends
//!                                                      fenced chunks, writes the fenced terminal
//! reaper-tanstack-interop sweep <backend> <sandboxRoot> <ttlMs> <journalDir> <runBudgetMs>
//!                                                      one sweep of the Rust core (journal probe,
//!                                                      replay drive, reclaim) over local sandboxes;
//!                                                      prints the report
//! reaper-tanstack-interop agents <sandboxRoot> <journalDir> <command> <runId>...
//!                                                      one finished agent per run, each in its own
//!                                                      new local sandbox; prints where, once all exited
//! reaper-tanstack-interop agent <sandboxRoot> <runId> <command> <journalDir>
//!                                                      starts the agent in a new local sandbox,
//!                                                      prints where, and waits for it to exit
//!
//! reaper-tanstack-interop schema-postgres              the PostgreSQL migrations, as JSON
//! ```
//!
//! `<backend>` is `sqlite:<path>`, `dynamodb:<table>` (endpoint from `AWS_ENDPOINT_URL_DYNAMODB`)
//! a `postgres://…` URL (the store's default schema, `reaper`) or `d1-stdio`: the Rust D1 store
//! (`reaper-d1`, the crate the reaper's Worker runs as wasm) with each of its batches sent as a
//! line `@batch {"batch":[{"sql","params"}]}` on stdout and answered by a line on stdin
//! (`{"results":[[row…]…]}` or `{"error":"…"}`): the test relays them to a real D1 binding in
//! workerd. The command's own JSON input is then the first line of stdin.

use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use reaper_core::claim::{Claim, ClaimError};
use reaper_core::domain::{
    NewRun, Patch, RunPatch, RunRecord, SandboxInstanceRecord, TerminalStatus, TerminalWrite,
    Transcript,
};
use reaper_core::ports::{
    DeliveryLog, Fenced, LeaseStore, MessageStore, RunStore, SandboxInstanceStore,
};
use reaper_core::Chunk;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// One run and everything kept about it, as both languages write it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    run: RunRecord,
    #[serde(default)]
    chunks: Vec<Value>,
    #[serde(default)]
    closed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    transcript: Option<Transcript>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    instance: Option<SandboxInstanceRecord>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Ids {
    run_ids: Vec<String>,
    #[serde(default)]
    instance_keys: Vec<Option<String>>,
}

/// Stdin as lines, shared by the command's input and the D1 bridge's answers.
fn stdin_lines() -> &'static tokio::sync::Mutex<tokio::io::BufReader<tokio::io::Stdin>> {
    static LINES: std::sync::OnceLock<tokio::sync::Mutex<tokio::io::BufReader<tokio::io::Stdin>>> =
        std::sync::OnceLock::new();
    LINES.get_or_init(|| tokio::sync::Mutex::new(tokio::io::BufReader::new(tokio::io::stdin())))
}

/// The D1 store's SQL seam over stdio: one batch out, its rows (or D1's error message) back.
struct StdioD1;

#[async_trait::async_trait]
impl reaper_d1::SqlClient for StdioD1 {
    async fn batch(
        &self,
        statements: Vec<reaper_d1::Statement>,
    ) -> Result<Vec<Vec<reaper_d1::Row>>, reaper_core::StoreError> {
        use reaper_d1::SqlValue;
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
        let batch: Vec<Value> = statements
            .iter()
            .map(|s| {
                let params: Vec<Value> = s
                    .params
                    .iter()
                    .map(|p| match p {
                        SqlValue::Null => Value::Null,
                        SqlValue::Integer(i) => json!(i),
                        SqlValue::Text(t) => json!(t),
                    })
                    .collect();
                json!({"sql": s.sql, "params": params})
            })
            .collect();
        let bridge =
            |e: std::io::Error| reaper_core::StoreError::Unavailable(format!("D1 bridge: {e}"));
        // Holding stdin across the exchange keeps one batch in flight, as a request would.
        let mut lines = stdin_lines().lock().await;
        let mut out = tokio::io::stdout();
        out.write_all(format!("@batch {}\n", json!({ "batch": batch })).as_bytes())
            .await
            .map_err(bridge)?;
        out.flush().await.map_err(bridge)?;
        let mut answer = String::new();
        lines.read_line(&mut answer).await.map_err(bridge)?;
        let answer: Value = serde_json::from_str(&answer).map_err(|e| {
            reaper_core::StoreError::Unavailable(format!("D1 bridge answered no JSON: {e}"))
        })?;
        if let Some(message) = answer.get("error").and_then(Value::as_str) {
            return Err(reaper_d1::classify_d1_error(message));
        }
        serde_json::from_value(answer["results"].clone()).map_err(|e| {
            reaper_core::StoreError::Backend(format!("D1 bridge rows do not decode: {e}"))
        })
    }
}

trait Stores: RunStore + DeliveryLog + MessageStore + SandboxInstanceStore + LeaseStore {}
impl<T: RunStore + DeliveryLog + MessageStore + SandboxInstanceStore + LeaseStore> Stores for T {}

/// The core's sweep as the handlers compose it (`ReapDeps::journaled`), over one backend.
async fn sweep(
    backend: &str,
    root: &str,
    ttl_ms: u64,
    journals: &str,
    budget_ms: u64,
) -> Result<Value> {
    let provider: Arc<dyn reaper_core::ports::SandboxProvider> = Arc::new(
        reaper_local::LocalSandboxProvider::new(reaper_local::LocalProviderOptions::new(root)),
    );
    let clock = Arc::new(reaper_local::SystemClock);
    let sleeper = Arc::new(reaper_local::TokioSleeper);
    let deps = if let Some(path) = backend.strip_prefix("sqlite:") {
        let store =
            reaper_sqlite::SqliteStore::open(path).map_err(|e| anyhow!("opening {path}: {e}"))?;
        reaper_core::reap::ReapDeps::journaled(
            Arc::new(store),
            provider,
            clock,
            sleeper,
            Some(journals.to_string()),
        )
    } else if let Some(table) = backend.strip_prefix("dynamodb:") {
        let store =
            reaper_dynamodb::DynamoStore::connect(reaper_dynamodb::DynamoOptions::new(table)).await;
        reaper_core::reap::ReapDeps::journaled(
            Arc::new(store),
            provider,
            clock,
            sleeper,
            Some(journals.to_string()),
        )
    } else if reaper_postgres::is_postgres_url(backend) {
        let store = postgres(backend).await?;
        reaper_core::reap::ReapDeps::journaled(
            Arc::new(store),
            provider,
            clock,
            sleeper,
            Some(journals.to_string()),
        )
    } else {
        bail!("backend {backend:?} is neither sqlite:<path>, dynamodb:<table> nor postgres://…")
    };
    let mut options =
        reaper_core::reap::ReapOptions::new(ttl_ms, format!("interop:{}", std::process::id()));
    // The app's own host stopped appending before the sweep starts in these tests.
    options.fence_quiet_ms = 0;
    options.run_budget_ms = budget_ms;
    options.max_runs = 1000;
    let report = reaper_core::reap::sweep(&deps, &options, 60_000).await;
    Ok(serde_json::to_value(&report)?)
}

async fn open(backend: &str) -> Result<Arc<dyn Stores>> {
    if let Some(path) = backend.strip_prefix("sqlite:") {
        let store =
            reaper_sqlite::SqliteStore::open(path).map_err(|e| anyhow!("opening {path}: {e}"))?;
        Ok(Arc::new(store))
    } else if let Some(table) = backend.strip_prefix("dynamodb:") {
        let store =
            reaper_dynamodb::DynamoStore::connect(reaper_dynamodb::DynamoOptions::new(table)).await;
        Ok(Arc::new(store))
    } else if reaper_postgres::is_postgres_url(backend) {
        Ok(Arc::new(postgres(backend).await?))
    } else if backend == "d1-stdio" {
        let store = reaper_d1::D1Store::open(Arc::new(StdioD1))
            .await
            .map_err(|e| anyhow!("opening D1 through the bridge: {e}"))?;
        Ok(Arc::new(store))
    } else {
        bail!("backend {backend:?} is neither sqlite:<path>, dynamodb:<table> nor postgres://…")
    }
}

async fn postgres(url: &str) -> Result<reaper_postgres::PostgresStore> {
    reaper_postgres::PostgresStore::connect(url)
        .await
        .map_err(|e| anyhow!("opening {url}: {e}"))
}

/// The command's JSON input: the first line of stdin (the D1 bridge's answers follow it).
async fn stdin_json<T: for<'de> Deserialize<'de>>() -> Result<T> {
    use tokio::io::AsyncBufReadExt;
    let mut text = String::new();
    stdin_lines().lock().await.read_line(&mut text).await?;
    serde_json::from_str(&text).context("reading JSON from the first line of stdin")
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn set<T>(v: Option<T>) -> Patch<T> {
    v.map(Patch::Set).unwrap_or_default()
}

async fn write(stores: &dyn Stores, entries: Vec<Entry>) -> Result<()> {
    for e in entries {
        let r = e.run;
        stores
            .create_or_resume(NewRun {
                run_id: r.run_id.clone(),
                thread_id: r.thread_id.clone(),
                started_at: r.started_at,
                status: Some(r.status),
            })
            .await?;
        if !e.chunks.is_empty() {
            let chunks = e
                .chunks
                .into_iter()
                .map(|v| Chunk::from_value(v).ok_or_else(|| anyhow!("a chunk is not an object")))
                .collect::<Result<Vec<_>>>()?;
            stores.append(&r.run_id, None, chunks, now_ms()).await?;
        }
        if e.closed {
            stores.close(&r.run_id, None, now_ms()).await?;
        }
        stores
            .update(
                &r.run_id,
                RunPatch {
                    status: None,
                    finished_at: set(r.finished_at),
                    error: set(r.error),
                    usage: set(r.usage),
                    sandbox_key: set(r.sandbox_key),
                    detached_since: set(r.detached_since),
                    cancel_requested: set(r.cancel_requested),
                    driver_epoch: set(r.driver_epoch),
                },
            )
            .await?;
        if let Some(t) = e.transcript {
            stores.save_transcript(&t, None).await?;
        }
        if let Some(i) = e.instance {
            SandboxInstanceStore::upsert(stores, i).await?;
        }
    }
    Ok(())
}

async fn read(stores: &dyn Stores, ids: Ids) -> Result<Vec<Entry>> {
    let mut out = Vec::new();
    for (i, run_id) in ids.run_ids.iter().enumerate() {
        let run = RunStore::get(stores, run_id)
            .await?
            .ok_or_else(|| anyhow!("run {run_id:?} is missing"))?;
        let snapshot = stores.snapshot(run_id).await?;
        let mut chunks = Vec::new();
        let mut from = 0;
        loop {
            let page = stores.read(run_id, from, 500).await?;
            if page.is_empty() {
                break;
            }
            for entry in page {
                if entry.offset != from {
                    bail!(
                        "run {run_id:?}: offset {} where {from} was next",
                        entry.offset
                    );
                }
                from += 1;
                chunks.push(serde_json::from_str(entry.chunk.as_json())?);
            }
        }
        let transcript = stores.get_transcript(run_id).await?;
        let instance = match ids.instance_keys.get(i).cloned().flatten() {
            Some(key) => SandboxInstanceStore::get(stores, &key).await?,
            None => None,
        };
        out.push(Entry {
            run,
            chunks,
            closed: snapshot.closed,
            transcript,
            instance,
        });
    }
    Ok(out)
}

/// What the reaper's drive does with a claimed run, reduced to its writes: claim (lease, then
/// epoch bump), fenced appends one chunk at a time, the fenced terminal write, release.
async fn drive(
    stores: Arc<dyn Stores>,
    run_id: &str,
    owner: &str,
    n: usize,
    ttl: u64,
) -> Result<Value> {
    let runs: &dyn RunStore = &*stores;
    let leases: &dyn LeaseStore = &*stores;
    let claim = match Claim::acquire(runs, leases, run_id, owner, now_ms(), ttl).await {
        Ok(c) => c,
        Err(ClaimError::Refused(e)) => return Ok(json!({"claimed": false, "why": e.to_string()})),
        Err(ClaimError::Store(e)) => bail!("claim: {e}"),
    };
    let mut appended = 0;
    let mut superseded = false;
    for i in 0..n {
        if claim.signal().is_cancelled() {
            superseded = true;
            break;
        }
        let chunk = Chunk::from_value(json!({
            "type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": format!("rust-{i} ")
        }))
        .ok_or_else(|| anyhow!("chunk"))?;
        match stores
            .append(run_id, Some(claim.epoch), vec![chunk], now_ms())
            .await?
        {
            Fenced::Written(_) => appended += 1,
            Fenced::Superseded { .. } => {
                superseded = true;
                break;
            }
        }
    }
    let mut terminal = false;
    if !superseded {
        let write = TerminalWrite {
            status: TerminalStatus::Completed,
            finished_at: now_ms(),
            error: None,
        };
        terminal = matches!(
            runs.write_terminal(run_id, claim.epoch, &write).await?,
            Fenced::Written(true)
        );
        if terminal {
            stores.close(run_id, Some(claim.epoch), now_ms()).await?;
        }
    }
    claim.release(leases).await;
    Ok(json!({
        "claimed": true, "epoch": claim.epoch, "appended": appended,
        "superseded": superseded, "terminal": terminal
    }))
}

async fn agent(root: &str, run_id: &str, command: &str, journals: &str) -> Result<()> {
    let provider =
        reaper_local::LocalSandboxProvider::new(reaper_local::LocalProviderOptions::new(root));
    let sandbox = provider
        .create(reaper_local::CreateOptions {
            journal_dir: Some(journals.to_string()),
            ..Default::default()
        })
        .await
        .map_err(|e| anyhow!("creating the sandbox: {e}"))?;
    let mut process = sandbox
        .start_agent(run_id, command, None)
        .await
        .map_err(|e| anyhow!("starting the agent: {e}"))?;
    println!(
        "{}",
        json!({
            "sandboxId": reaper_core::ports::SandboxHandle::id(&sandbox),
            "provider": reaper_local::DEFAULT_PROVIDER_NAME,
            "dir": sandbox.dir(),
        })
    );
    let code = process
        .wait()
        .await
        .map_err(|e| anyhow!("waiting for the agent: {e}"))?;
    eprintln!("agent exited {code}");
    Ok(())
}

async fn agents(root: &str, journals: &str, command: &str, run_ids: &[String]) -> Result<()> {
    let provider = Arc::new(reaper_local::LocalSandboxProvider::new(
        reaper_local::LocalProviderOptions::new(root),
    ));
    // Concurrently: staging many trials must not dominate the test's time.
    let mut tasks = tokio::task::JoinSet::new();
    for (i, run_id) in run_ids.iter().enumerate() {
        let (provider, run_id) = (provider.clone(), run_id.clone());
        let (journals, command) = (journals.to_string(), command.to_string());
        tasks.spawn(async move {
            let sandbox = provider
                .create(reaper_local::CreateOptions {
                    journal_dir: Some(journals),
                    ..Default::default()
                })
                .await
                .map_err(|e| anyhow!("creating the sandbox: {e}"))?;
            let mut process = sandbox
                .start_agent(&run_id, &command, None)
                .await
                .map_err(|e| anyhow!("starting the agent: {e}"))?;
            let code = process
                .wait()
                .await
                .map_err(|e| anyhow!("waiting for the agent: {e}"))?;
            let id = reaper_core::ports::SandboxHandle::id(&sandbox).to_string();
            anyhow::Ok((
                i,
                json!({ "runId": run_id, "sandboxId": id, "exitCode": code }),
            ))
        });
    }
    let mut out = vec![Value::Null; run_ids.len()];
    while let Some(done) = tasks.join_next().await {
        let (i, v) = done??;
        out[i] = v;
    }
    println!("{}", Value::Array(out));
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| {
        args.get(i)
            .cloned()
            .ok_or_else(|| anyhow!("missing argument {i}; see the usage in src/main.rs"))
    };
    match arg(0)?.as_str() {
        "schema" => {
            let migrations: Vec<Value> = reaper_sql::MIGRATIONS
                .iter()
                .map(|m| {
                    json!({"version": m.version, "description": m.description,
                           "statements": m.statements})
                })
                .collect();
            let b = reaper_sql::BASELINE;
            let baseline = json!({"version": b.version, "description": b.description,
                                  "statements": b.statements});
            println!(
                "{}",
                json!({"version": reaper_sql::SCHEMA_VERSION, "migrations": migrations,
                       "baseline": baseline})
            );
        }
        "schema-postgres" => {
            let migrations: Vec<Value> = reaper_postgres::schema::MIGRATIONS
                .iter()
                .map(|m| {
                    json!({"version": m.version, "description": m.description,
                           "statements": m.statements})
                })
                .collect();
            println!(
                "{}",
                json!({"version": reaper_postgres::SCHEMA_VERSION, "migrations": migrations,
                       "shape": reaper_postgres::schema::SHAPE})
            );
        }
        // The input first: on `d1-stdio` the lines after it answer the store's batches.
        "write" => {
            let input = stdin_json().await?;
            let stores = open(&arg(1)?).await?;
            write(&*stores, input).await?;
        }
        "read" => {
            let input = stdin_json().await?;
            let stores = open(&arg(1)?).await?;
            let out = read(&*stores, input).await?;
            println!("{}", serde_json::to_string(&out)?);
        }
        "drive" => {
            let stores = open(&arg(1)?).await?;
            let out = drive(
                stores,
                &arg(2)?,
                &arg(3)?,
                arg(4)?.parse()?,
                arg(5)?.parse()?,
            )
            .await?;
            println!("{out}");
        }
        "sweep" => {
            let report = sweep(
                &arg(1)?,
                &arg(2)?,
                arg(3)?.parse()?,
                &arg(4)?,
                arg(5)?.parse()?,
            )
            .await?;
            println!("{report}");
        }
        "agents" => agents(&arg(1)?, &arg(2)?, &arg(3)?, &args[4..]).await?,
        "agent" => agent(&arg(1)?, &arg(2)?, &arg(3)?, &arg(4)?).await?,
        other => bail!("unknown command {other:?}; see the usage in src/main.rs"),
    }
    Ok(())
}
