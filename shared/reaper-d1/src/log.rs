//! The `logs` and `log_entries` tables: [`DeliveryLog`], and the retention that ages events
//! out so the database stays below D1's size limit.

use std::collections::VecDeque;

use reaper_core::{
    Appended, Chunk, DeliveryLog, EpochMs, Fenced, LogEntry, LogSnapshot, StoreError,
};

use reaper_sql::logs::{self as sql, RetentionReport};

use crate::client::{SqlValue, Statement};
use crate::row::{corrupt, safe, safe_u, RowExt};
use crate::D1Store;

/// Round trips one [`D1Store::prune_events`] call makes by default: each is one subrequest of
/// the Worker's invocation.
pub const DEFAULT_RETENTION_ROUND_TRIPS: usize = 12;

/// Runs one retention batch works on at most (two statements each).
const RUNS_PER_BATCH: usize = 32;

/// Aged-out logs one listing fetches: several batches' worth, so a listing (which walks the
/// terminal runs in finish order) is not repeated for every batch.
const LISTED: usize = 4 * RUNS_PER_BATCH;

/// A log the listing found, and an upper bound of the events it still holds.
struct AgedOut {
    run_id: String,
    events: i64,
}

/// True unless the run's epoch is past the held one (`?2`; NULL means no fence). A missing run
/// record does not refuse the append.
const FENCE_OK: &str =
    "(?2 IS NULL OR NOT EXISTS (SELECT 1 FROM reaper_runs WHERE run_id = ?1 AND driver_epoch > ?2))";

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl DeliveryLog for D1Store {
    async fn append(
        &self,
        run_id: &str,
        fence: Option<u64>,
        chunks: Vec<Chunk>,
        now: EpochMs,
    ) -> Result<Fenced<Appended>, StoreError> {
        // A chunk is its JSON text already: stored as is.
        let encoded: Vec<String> = chunks.into_iter().map(Chunk::into_json).collect();
        // The chunks travel as one JSON array of strings, so any number of them is one bound
        // parameter and one INSERT, and each chunk's text is stored exactly as serialised.
        let array = serde_json::to_string(&encoded)
            .map_err(|e| StoreError::Backend(format!("chunks do not serialise: {e}")))?;
        let held = SqlValue::from(fence.map(safe_u));
        let key = || vec![SqlValue::from(run_id), held.clone()];
        // One batch, one transaction: the state read first is the state every conditional
        // write below sees, so the outcome decided from it is the one that landed.
        let mut statements = vec![
            Statement::new(
                "SELECT (SELECT driver_epoch FROM reaper_runs WHERE run_id = ?1) AS epoch, \
                 (SELECT closed FROM reaper_logs WHERE run_id = ?1) AS closed, \
                 (SELECT next_seq FROM reaper_logs WHERE run_id = ?1) AS next_seq",
                vec![run_id.into()],
            ),
            Statement::new(
                format!(
                    "INSERT INTO reaper_logs (run_id) SELECT ?1 WHERE {FENCE_OK} \
                     ON CONFLICT (run_id) DO NOTHING"
                ),
                key(),
            ),
        ];
        if !encoded.is_empty() {
            let mut insert = key();
            insert.push(array.into());
            statements.push(Statement::new(
                format!(
                    "INSERT INTO reaper_log_entries (run_id, seq, chunk) \
                     SELECT ?1, reaper_logs.next_seq + j.key, j.value FROM reaper_logs, json_each(?3) AS j \
                     WHERE reaper_logs.run_id = ?1 AND reaper_logs.closed = 0 AND {FENCE_OK}"
                ),
                insert,
            ));
            let mut advance = key();
            advance.push((encoded.len() as i64).into());
            advance.push(now.into());
            statements.push(Statement::new(
                format!(
                    "UPDATE reaper_logs SET next_seq = next_seq + ?3, last_append_at = ?4 \
                     WHERE run_id = ?1 AND closed = 0 AND {FENCE_OK}"
                ),
                advance,
            ));
        }
        let out = self.batch(statements).await?;
        let before = out[0]
            .first()
            .ok_or_else(|| StoreError::Backend(format!("log {run_id}: state read no row")))?;
        if let Some(held) = fence {
            let observed = reaper_sql::runs::driver_epoch(before.opt_int("epoch", run_id)?)
                .map_err(|reason| corrupt(run_id, reason))?;
            if let Some(observed) = observed.filter(|o| *o > held) {
                return Ok(Fenced::Superseded { observed });
            }
        }
        if before.opt_int("closed", run_id)? == Some(1) {
            return Ok(Fenced::Written(Appended::Closed));
        }
        let first = sql::next_seq(before.opt_int("next_seq", run_id)?.unwrap_or(0))
            .map_err(|reason| corrupt(run_id, reason))?;
        Ok(Fenced::Written(Appended::At { first }))
    }

    async fn close(
        &self,
        run_id: &str,
        fence: Option<u64>,
        _now: EpochMs,
    ) -> Result<Fenced<()>, StoreError> {
        let held = SqlValue::from(fence.map(safe_u));
        let close = Statement::new(sql::CLOSE_FENCED, vec![run_id.into(), held]);
        self.fenced(close, run_id, fence).await
    }

    async fn snapshot(&self, run_id: &str) -> Result<LogSnapshot, StoreError> {
        let rows = self
            .one(Statement::new(sql::SNAPSHOT, vec![run_id.into()]))
            .await?;
        let Some(r) = rows.first() else {
            return Ok(LogSnapshot::default());
        };
        let what = format!("log {run_id}");
        let len = if r.int("pruned", &what)? != 0 {
            0
        } else {
            sql::next_seq(r.int("next_seq", &what)?).map_err(|reason| corrupt(&what, reason))?
        };
        Ok(LogSnapshot {
            len,
            last_append_at: r.opt_int("last_append_at", &what)?,
            closed: r.int("closed", &what)? != 0,
        })
    }

    async fn read(
        &self,
        run_id: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<LogEntry>, StoreError> {
        let rows = self
            .one(Statement::new(
                sql::READ,
                vec![
                    run_id.into(),
                    safe_u(from).into(),
                    safe_u(limit as u64).into(),
                ],
            ))
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let seq = r.int("seq", run_id)?;
            let key = format!("{run_id}#{seq}");
            let raw = r.text("chunk", &key)?;
            let chunk = Chunk::from_json(&raw)
                .ok_or_else(|| corrupt(&key, sql::chunk_not_json(raw.len())))?;
            out.push(LogEntry {
                offset: u64::try_from(seq).map_err(|_| corrupt(&key, "seq is negative"))?,
                chunk,
            });
        }
        Ok(out)
    }
}

impl D1Store {
    /// Ages out delivery-log events, with at most `max_round_trips` round trips (at least 2: a
    /// listing and a batch), so a Worker knows the subrequests it spends: deletes the events of
    /// runs that are terminal with `finished_at <= now - retention_ms`, oldest finish first, at
    /// most `batch_limit` events per batch (one transaction), and marks a log pruned and closed
    /// in the same batch once none of its events is left. `more` says the bound was reached with
    /// aged-out events possibly left; calling again carries on. The statements are
    /// `reaper_sql::logs`', the SQLite store's, and each write re-checks in its own transaction
    /// that the run is still aged out. Run rows and transcripts are never deleted; a terminal
    /// run without `finished_at` keeps its events.
    pub async fn prune_events(
        &self,
        now: EpochMs,
        retention_ms: u64,
        batch_limit: usize,
        max_round_trips: usize,
    ) -> Result<RetentionReport, StoreError> {
        let now = safe(now);
        let cutoff = safe(sql::retention_cutoff(now, retention_ms));
        let batch_limit = safe_u(batch_limit.max(1) as u64);
        let max_round_trips = max_round_trips.max(2);
        let mut report = RetentionReport::default();
        let mut round_trips = 0;
        let mut queue: VecDeque<AgedOut> = VecDeque::new();
        // The last listing returned every aged-out log and each was marked once emptied: no
        // need for another listing to learn that nothing is left.
        let mut finished = false;
        loop {
            if queue.is_empty() {
                if finished {
                    break;
                }
                if round_trips == max_round_trips {
                    report.more = true;
                    break;
                }
                round_trips += 1;
                let rows = self
                    .one(Statement::new(
                        sql::AGED_OUT,
                        vec![cutoff.into(), (LISTED as i64).into()],
                    ))
                    .await?;
                if rows.is_empty() {
                    break;
                }
                finished = rows.len() < LISTED;
                for row in &rows {
                    let run_id = row.text("run_id", "aged-out log with an unreadable run_id")?;
                    let events = row.int("next_seq", &format!("log {run_id}"))?.max(0);
                    queue.push_back(AgedOut { run_id, events });
                }
            }
            if round_trips == max_round_trips {
                report.more = true;
                break;
            }
            round_trips += 1;
            let (statements, targets) = next_batch(&mut queue, batch_limit, now, cutoff);
            let out = self.batch(statements).await?;
            let mut touched = false;
            for (i, whole) in targets.into_iter().enumerate() {
                let deleted = out[2 * i].len() as u64;
                let marked = !out[2 * i + 1].is_empty();
                report.events_deleted += deleted;
                report.runs += u64::from(marked);
                touched |= deleted > 0 || marked;
                // A log the listing's bound did not cover (events planted past `next_seq`) is
                // listed again by the next listing rather than assumed gone.
                finished &= marked || !whole;
            }
            report.batches += u64::from(touched);
        }
        Ok(report)
    }
}

/// The next batch: for the logs at the front of the queue, delete up to their bound of events
/// (within `batch_limit` in all) and mark each pruned if none is left. Returns the statements and,
/// per log, whether the batch covers its whole bound (a log it covers only in part stays at the
/// front for the next batch).
fn next_batch(
    queue: &mut VecDeque<AgedOut>,
    batch_limit: i64,
    now: EpochMs,
    cutoff: EpochMs,
) -> (Vec<Statement>, Vec<bool>) {
    let mut budget = batch_limit;
    let mut statements = Vec::new();
    let mut targets = Vec::new();
    while budget > 0 && targets.len() < RUNS_PER_BATCH {
        let Some(front) = queue.front_mut() else {
            break;
        };
        // At least one: a log whose bound is 0 but that holds events still makes progress.
        let take = front.events.max(1).min(budget);
        let run_id = SqlValue::from(front.run_id.as_str());
        statements.push(Statement::new(
            sql::DELETE_AGED_OUT_EVENTS,
            vec![run_id.clone(), take.into(), cutoff.into()],
        ));
        statements.push(Statement::new(
            sql::MARK_PRUNED,
            vec![run_id, now.into(), cutoff.into()],
        ));
        budget -= take;
        let whole = take >= front.events;
        targets.push(whole);
        if whole {
            queue.pop_front();
        } else {
            front.events -= take;
        }
    }
    (statements, targets)
}
