//! The sweep records' count cap ([`MAX_SWEEPS_KEPT`]), one case every store keeping sweep
//! records runs on a store of its own, written through [`RunStore::write_sweep_history`]:
//!
//! ```text
//! #[tokio::test]
//! async fn at_most_a_thousand_sweep_records_are_kept_the_oldest_dropped_first() {
//!     let store = fresh_store().await;
//!     reaper_testkit::conformance::sweep_cap::run(&*store).await;
//! }
//! ```
//!
//! Not in the run-store case list: the cap is store-wide, so the case writes a thousand records
//! and drops every other one in the store, which would take records from under other cases in a
//! runner sharing one store between cases running at once (SQLite's shared file).

use reaper_core::ports::{RunStore, RunStoreCapabilities};
use reaper_core::sweeps::{SweepRecord, MAX_SWEEPS_KEPT, MAX_SWEEPS_READ};
use reaper_core::{EpochMs, StoreError};

use super::run_store::{sweep_record, sweep_write, sweeps_gate, NO_PRUNE};
use super::{conclude, native_nonce, CaseContext, CaseResult, Verdict};

/// The case's name, as its tests are named.
pub const NAME: &str = "at_most_a_thousand_sweep_records_are_kept_the_oldest_dropped_first";

/// Past any clock a real sweep reads.
const BASE: EpochMs = 4_100_000_000_000_000;

/// Runs [`at_most_a_thousand_sweep_records_are_kept_the_oldest_dropped_first`] on `store` and
/// panics on a failure (a skip, for a store without sweep records, is printed).
pub async fn run<S: RunStore + ?Sized>(store: &S) {
    let ctx = CaseContext::new(&native_nonce(), NAME, RunStoreCapabilities::default());
    conclude(
        NAME,
        at_most_a_thousand_sweep_records_are_kept_the_oldest_dropped_first(store, &ctx).await,
    );
}

/// One sweep's end write holding only its record; nothing is past the retention, so only the
/// cap deletes.
async fn write<S: RunStore + ?Sized>(store: &S, record: SweepRecord) -> Result<(), StoreError> {
    let written = store
        .write_sweep_history(&sweep_write(Some(record), Vec::new(), NO_PRUNE))
        .await?;
    match written.write_error {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

/// A store keeps at most [`MAX_SWEEPS_KEPT`] sweep records: each write past the cap drops the
/// records written longest ago, whenever they finished. The records are written newest-finished
/// first, so a record the cap should have dropped would be the first [`RunStore::recent_sweeps`]
/// returns, and one kept past the cap would push the last written out of the read.
pub async fn at_most_a_thousand_sweep_records_are_kept_the_oldest_dropped_first<
    S: RunStore + ?Sized,
>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    if let Some(skip) = sweeps_gate(store).await? {
        return Ok(skip);
    }
    ensure!(
        MAX_SWEEPS_READ as u64 >= MAX_SWEEPS_KEPT,
        "one read must see every kept record for this case to tell"
    );
    let id = |i: u64| ctx.id(&format!("sweep-{i:06}"));
    let ids = |v: Vec<SweepRecord>| v.into_iter().map(|r| r.sweep_id).collect::<Vec<_>>();
    let dropped = 3;
    let written = MAX_SWEEPS_KEPT + dropped;
    for i in 0..written {
        write(store, sweep_record(&id(i), BASE - i as EpochMs)).await?;
    }
    let kept = ids(store.recent_sweeps(MAX_SWEEPS_READ).await?);
    ensure_eq!(
        kept.len() as u64,
        MAX_SWEEPS_KEPT,
        "the store keeps the cap's worth"
    );
    ensure_eq!(
        kept.first(),
        Some(&id(dropped)),
        "the {dropped} written first are gone, though they finished last"
    );
    ensure_eq!(
        kept.last(),
        Some(&id(written - 1)),
        "the last written is kept"
    );
    let want: Vec<String> = (dropped..written).map(id).collect();
    ensure!(
        kept == want,
        "the kept records are the newest written, in finish order"
    );

    // One more write, finishing after all of them, drops exactly the oldest written.
    write(store, sweep_record(&id(written), BASE + 1)).await?;
    let kept = ids(store.recent_sweeps(MAX_SWEEPS_READ).await?);
    ensure_eq!(kept.len() as u64, MAX_SWEEPS_KEPT, "still the cap's worth");
    ensure_eq!(kept.first(), Some(&id(written)), "the new record is kept");
    ensure!(
        !kept.contains(&id(dropped)) && kept.contains(&id(dropped + 1)),
        "the oldest written went, the next stays"
    );
    Ok(Verdict::Passed)
}
