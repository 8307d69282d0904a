//! Every page reads a bounded number of rows, whatever the backlog: the stores are wrapped to
//! count the rows each answer carries, and a page is rendered over a backlog many times its
//! bound.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use reaper_core::memory::MemoryStore;
use reaper_core::*;
use tower::ServiceExt;

use super::*;

const NOW: EpochMs = 1_800_000_000_000;
const MINUTE: i64 = 60_000;

/// A memory store that counts the rows (runs, entries, instance records) its reads hand back.
struct Counted {
    inner: MemoryStore,
    rows: AtomicUsize,
}

impl Counted {
    fn add(&self, n: usize) {
        self.rows.fetch_add(n, Ordering::SeqCst);
    }
    fn take(&self) -> usize {
        self.rows.swap(0, Ordering::SeqCst)
    }
}

#[async_trait::async_trait]
impl RunStore for Counted {
    async fn create_or_resume(&self, new: NewRun) -> Result<RunRecord, StoreError> {
        self.inner.create_or_resume(new).await
    }
    async fn update(&self, run_id: &str, patch: RunPatch) -> Result<(), StoreError> {
        self.inner.update(run_id, patch).await
    }
    async fn update_fenced(
        &self,
        run_id: &str,
        held_epoch: u64,
        patch: RunPatch,
    ) -> Result<Fenced<bool>, StoreError> {
        self.inner.update_fenced(run_id, held_epoch, patch).await
    }
    async fn get(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        let r = RunStore::get(&self.inner, run_id).await?;
        self.add(r.is_some() as usize);
        Ok(r)
    }
    async fn find_active_run(&self, thread_id: &str) -> Result<Option<RunRecord>, StoreError> {
        let r = self.inner.find_active_run(thread_id).await?;
        self.add(r.is_some() as usize);
        Ok(r)
    }
    async fn list_by_thread(&self, thread_id: &str) -> Result<Vec<RunRecord>, StoreError> {
        let r = self.inner.list_by_thread(thread_id).await?;
        self.add(r.len());
        Ok(r)
    }
    async fn list_reclaimable_page(
        &self,
        query: ReclaimableQuery,
    ) -> Result<ReclaimablePage, StoreError> {
        let page = self.inner.list_reclaimable_page(query).await?;
        self.add(page.runs.len() + page.corrupt.len());
        Ok(page)
    }
    async fn count_reclaimable(
        &self,
        detached_after: Option<EpochMs>,
        detached_until: EpochMs,
        at_most: u64,
    ) -> Result<BoundedCount, StoreError> {
        let c = self
            .inner
            .count_reclaimable(detached_after, detached_until, at_most)
            .await?;
        self.add(c.count as usize);
        Ok(c)
    }
    async fn bump_epoch(&self, run_id: &str) -> Result<EpochBump, StoreError> {
        self.inner.bump_epoch(run_id).await
    }
    async fn write_terminal(
        &self,
        run_id: &str,
        held_epoch: u64,
        write: &TerminalWrite,
    ) -> Result<Fenced<bool>, StoreError> {
        self.inner.write_terminal(run_id, held_epoch, write).await
    }
    async fn record_history(
        &self,
        entries: &[reaper_core::history::HistoryEntry],
    ) -> Result<(), StoreError> {
        self.inner.record_history(entries).await
    }
    async fn run_history(
        &self,
        run_id: &str,
        limit: usize,
    ) -> Result<Vec<reaper_core::history::HistoryEntry>, StoreError> {
        let entries = self.inner.run_history(run_id, limit).await?;
        self.add(entries.len());
        Ok(entries)
    }
    async fn write_sweep_history(
        &self,
        history: &reaper_core::history::SweepHistory,
    ) -> Result<reaper_core::history::SweepWritten, StoreError> {
        self.inner.write_sweep_history(history).await
    }
    async fn recent_sweeps(
        &self,
        limit: usize,
    ) -> Result<Vec<reaper_core::sweeps::SweepRecord>, StoreError> {
        let records = self.inner.recent_sweeps(limit).await?;
        self.add(records.len());
        Ok(records)
    }
}

#[async_trait::async_trait]
impl ReclaimLedger for Counted {
    async fn record_intent(&self, intent: &ReclaimIntent) -> Result<bool, StoreError> {
        self.inner.record_intent(intent).await
    }
    async fn update_intent(&self, intent: &ReclaimIntent) -> Result<bool, StoreError> {
        self.inner.update_intent(intent).await
    }
    async fn resolve_intent(&self, run_id: &str) -> Result<(), StoreError> {
        self.inner.resolve_intent(run_id).await
    }
    async fn get_intent(&self, run_id: &str) -> Result<Option<ReclaimIntent>, StoreError> {
        let r = self.inner.get_intent(run_id).await?;
        self.add(r.is_some() as usize);
        Ok(r)
    }
    async fn due_intents(
        &self,
        now: EpochMs,
        limit: usize,
    ) -> Result<Vec<ReclaimIntent>, StoreError> {
        let r = self.inner.due_intents(now, limit).await?;
        self.add(r.len());
        Ok(r)
    }
    async fn ledger_counts(&self) -> Result<LedgerCounts, StoreError> {
        self.inner.ledger_counts().await
    }
}

#[async_trait::async_trait]
impl SandboxInstanceStore for Counted {
    async fn get(&self, key: &str) -> Result<Option<SandboxInstanceRecord>, StoreError> {
        let r = SandboxInstanceStore::get(&self.inner, key).await?;
        self.add(r.is_some() as usize);
        Ok(r)
    }
    async fn upsert(&self, record: SandboxInstanceRecord) -> Result<(), StoreError> {
        self.inner.upsert(record).await
    }
    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.inner.delete(key).await
    }
}

struct FixedClock;
impl Clock for FixedClock {
    fn now_ms(&self) -> EpochMs {
        NOW
    }
}

/// `runs` detached runs (each in its own sandbox) and `leaks` leaked ledger entries.
async fn seeded(runs: usize, leaks: usize) -> (Arc<Counted>, Dashboard) {
    let inner = MemoryStore::new();
    for i in 0..runs {
        let id = format!("run-{i:06}");
        let mut r = RunRecord::new(&id, format!("thread-{i}"), NOW - 120 * MINUTE);
        r.detached_since = Some(NOW - 90 * MINUTE + i as i64);
        r.sandbox_key = Some(format!("local:thread-{i}"));
        inner.put_run(r);
        SandboxInstanceStore::upsert(
            &inner,
            SandboxInstanceRecord {
                key: format!("local:thread-{i}"),
                provider: "local".into(),
                provider_sandbox_id: format!("sbx-{i}"),
                latest_snapshot_id: None,
                thread_id: format!("thread-{i}"),
                latest_run_id: Some(id),
                updated_at: NOW,
            },
        )
        .await
        .unwrap();
    }
    for i in 0..leaks {
        let r = RunRecord::new(format!("leak-{i:06}"), "t", NOW - 60 * MINUTE);
        let mut intent = ReclaimIntent::new(&r, NOW - 30 * MINUTE);
        intent.attempts = 2;
        intent.last_error = Some("the provider answered 502".into());
        inner.record_intent(&intent).await.unwrap();
    }
    // As many sweep records as runs, from two hosts: more than any page shows.
    for i in 0..runs {
        let record = sweep_record(i, if i % 2 == 0 { "cron-host" } else { "lambda" });
        inner
            .write_sweep_history(&record_alone(record))
            .await
            .unwrap();
    }
    let counted = Arc::new(Counted {
        inner: inner.clone(),
        rows: AtomicUsize::new(0),
    });
    let ports = Ports {
        runs: counted.clone(),
        leases: Arc::new(inner.clone()),
        logs: Arc::new(inner.clone()),
        messages: Arc::new(inner.clone()),
        ledger: counted.clone(),
        instances: counted.clone(),
    };
    let dashboard = Dashboard {
        ports,
        limits: crate::health::limits(30 * MINUTE as u64, 60 * MINUTE as u64, MINUTE as u64),
        recent: Arc::default(),
        token: None,
        clock: Arc::new(FixedClock),
    };
    (counted, dashboard)
}

/// The `i`th sweep record (a minute apart, the newest last), one run expired in each.
fn sweep_record(i: usize, host: &str) -> reaper_core::sweeps::SweepRecord {
    let finished_at = NOW - 10_000 * MINUTE + i as i64 * MINUTE;
    reaper_core::sweeps::SweepRecord {
        sweep_id: format!("sweep-{i:06}"),
        host: host.into(),
        started_at: finished_at - 1_500,
        finished_at,
        duration_ms: 1_500,
        considered: 3,
        outcomes: reaper_core::reap::OutcomeCounts {
            expired: 1,
            producing: 2,
            ..Default::default()
        },
        reclaims_retried: 0,
        reclaims_settled: 0,
        concurrency: 2,
        concurrency_cap: 32,
        dry_run: false,
        failed: false,
        error: None,
    }
}

/// A sweep's end write of its record alone, pruning nothing.
fn record_alone(record: reaper_core::sweeps::SweepRecord) -> reaper_core::history::SweepHistory {
    reaper_core::history::SweepHistory {
        entries: Vec::new(),
        prune_before: 0,
        prune_max: 0,
        record: Some(record),
    }
}

async fn get(d: &Dashboard, path: &str) -> (StatusCode, String) {
    let response = d
        .clone()
        .router()
        .oneshot(Request::get(path).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

#[tokio::test]
async fn every_dashboard_page_reads_a_bounded_number_of_rows_over_a_large_backlog() {
    let (counted, d) = seeded(2_000, 1_000).await;
    let bound_detached = PAGE_ROWS + 1 + PAGE_ROWS;
    let bound_health = reaper_core::health::STATUS_LISTING_LIMIT;
    for (path, bound) in [
        ("/", bound_health + read::OVERVIEW_SWEEP_ROWS),
        ("/runs", bound_detached),
        ("/runs?after=1799994600500.run-000500", bound_detached),
        ("/ledger", LEDGER_ROWS + 1),
        ("/sweeps", read::STORE_SWEEP_ROWS),
        ("/runs/run-001999", 3 + read::RUN_HISTORY_ROWS),
    ] {
        counted.take();
        let (status, body) = get(&d, path).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
        let read = counted.take();
        assert!(
            read <= bound,
            "{path} read {read} rows over a backlog of 2,000 runs and 1,000 ledger entries; \
             its bound is {bound}"
        );
    }
}

#[tokio::test]
async fn the_detached_runs_pages_walk_the_whole_backlog_once_by_their_next_links() {
    let (_, d) = seeded(PAGE_ROWS * 2 + 7, 0).await;
    let mut path = "/runs".to_string();
    let mut seen = Vec::new();
    loop {
        let (status, body) = get(&d, &path).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        seen.extend(
            body.match_indices("href=\"/runs/run-")
                .map(|(i, _)| body[i + 12..i + 22].to_string()),
        );
        match body.split_once("rel=\"next\" href=\"") {
            Some((_, rest)) => path = rest.split('"').next().unwrap().replace("&amp;", "&"),
            None => break,
        }
    }
    let expected: Vec<String> = (0..PAGE_ROWS * 2 + 7)
        .map(|i| format!("run-{i:06}"))
        .collect();
    assert_eq!(seen, expected);
}

#[tokio::test]
async fn run_ids_and_errors_from_the_store_are_escaped_on_every_page() {
    let (_, d) = seeded(0, 0).await;
    let evil = "run-<script>alert(1)</script>&\"x";
    let mut r = RunRecord::new(evil, "<b>thread</b>", NOW - 60 * MINUTE);
    r.detached_since = Some(NOW - 40 * MINUTE);
    r.error = Some(RunError::new("<img src=x onerror=alert(2)>"));
    let store = MemoryStore::new();
    store.put_run(r.clone());
    let mut intent = ReclaimIntent::new(&r, NOW - MINUTE);
    intent.attempts = 1;
    intent.last_error = Some("<iframe>".into());
    store.record_intent(&intent).await.unwrap();
    let s = Arc::new(store);
    let d = Dashboard {
        ports: Ports {
            runs: s.clone(),
            leases: s.clone(),
            logs: s.clone(),
            messages: s.clone(),
            ledger: s.clone(),
            instances: s,
        },
        ..d
    };
    let encoded = "/runs/run-%3Cscript%3Ealert%281%29%3C%2Fscript%3E%26%22x";
    for path in ["/runs", "/ledger", encoded] {
        let (status, body) = get(&d, path).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
        for raw in ["<script>", "<b>thread", "<img", "<iframe>"] {
            assert!(!body.contains(raw), "{path} let {raw:?} through:\n{body}");
        }
        assert!(
            body.contains("run-&lt;script&gt;alert(1)&lt;/script&gt;&amp;&quot;x"),
            "{path} does not show the run id escaped:\n{body}"
        );
    }
    let (_, runs) = get(&d, "/runs").await;
    assert!(runs.contains(&format!("href=\"{encoded}\"")), "{runs}");
}

#[tokio::test]
async fn an_unknown_run_is_a_404_page_and_a_bad_page_position_a_400() {
    let (_, d) = seeded(3, 0).await;
    let (status, body) = get(&d, "/runs/nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        body.contains("The store has no run with id &quot;nope&quot;"),
        "{body}"
    );
    let (status, _) = get(&d, "/runs?after=not-a-position").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn the_dashboard_answers_401_without_the_status_token() {
    let (_, mut d) = seeded(1, 0).await;
    d.token = Some(crate::health::StatusToken::parse("dashboard-token-0123456789").unwrap());
    for path in ["/", "/runs", "/runs/run-000000", "/ledger", "/sweeps"] {
        let (status, _) = get(&d, path).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
    }
}

#[tokio::test]
async fn a_run_page_shows_the_newest_history_entries_escaped_and_no_more_than_its_bound() {
    let (counted, d) = seeded(3, 0).await;
    let entries: Vec<reaper_core::history::HistoryEntry> = (0..30)
        .map(|i| reaper_core::history::HistoryEntry {
            run_id: "run-000001".into(),
            sweep_id: format!("sweep-{i:02}"),
            at: NOW - (30 - i) * MINUTE,
            host: "host-a".into(),
            outcome: "producing".into(),
            reason_code: "producing/journal-growing".into(),
            reason: format!("entry {i:02} <script>alert(1)</script>"),
            sandbox: Some("kept".into()),
            ledger: vec!["recorded".into()],
        })
        .collect();
    counted.inner.record_history(&entries).await.unwrap();
    counted.take();
    let (status, body) = get(&d, "/runs/run-000001").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(counted.take() <= 3 + read::RUN_HISTORY_ROWS);
    assert!(
        body.contains("entry 29 "),
        "the newest entry is shown: {body}"
    );
    assert!(body.contains("entry 10 "), "{body}");
    assert!(!body.contains("entry 09 "), "only the newest 20: {body}");
    assert!(!body.contains("<script>alert"), "reasons are escaped");
    assert!(body.contains("&lt;script&gt;"), "{body}");
    assert!(!body.contains("keeps no per-run history"), "{body}");
}

#[tokio::test]
async fn the_sweeps_page_lists_the_store_s_newest_sweeps_of_every_host_with_their_outcome_counts() {
    let (counted, d) = seeded(200, 0).await;
    let mut failed = sweep_record(500, "vercel <script>x</script>");
    failed.failed = true;
    failed.error = Some("the listing failed: disk I/O error".into());
    failed.outcomes = Default::default();
    counted
        .inner
        .write_sweep_history(&record_alone(failed))
        .await
        .unwrap();
    counted.take();
    let (status, body) = get(&d, "/sweeps").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(counted.take() <= read::STORE_SWEEP_ROWS);
    let rows = body.matches("<td><code>").count();
    assert_eq!(
        rows,
        read::STORE_SWEEP_ROWS,
        "one row per record shown: {body}"
    );
    assert!(
        body.contains("cron-host") && body.contains("lambda"),
        "{body}"
    );
    assert!(
        body.contains("expired <b>1</b>, producing <b>2</b>"),
        "{body}"
    );
    assert!(
        body.contains("the listing failed: disk I/O error"),
        "{body}"
    );
    assert!(!body.contains("<script>x"), "hosts are escaped: {body}");
    // Newest first: the failed sweep, then sweep 199; sweep 150 is past the page's bound.
    let first = body
        .find("vercel &lt;script&gt;")
        .expect("the newest record");
    assert!(first < body.find("cron-host").unwrap(), "{body}");
    assert!(
        !body.contains("this store keeps no sweep records"),
        "{body}"
    );

    let (status, body) = get(&d, "/").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body.matches("<td><code>").count(),
        read::OVERVIEW_SWEEP_ROWS,
        "the overview shows the last few: {body}"
    );
    assert!(body.contains("href=\"/sweeps\""), "{body}");
}
