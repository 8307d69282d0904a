//! One malformed row never hides the others (issue 12.3): every variant of a spoilt `reaper_runs` row
//! is reported in the listing's `corrupt` (named by its run id, or by its rowid when the id is
//! what is spoilt) while every good row is still listed, and reading it by id is a
//! `StoreError::Corrupt` naming the run, never a record.

mod common;

use reaper_core::{RunStore, StoreError};
use reaper_sqlite::SqliteStore;
use rusqlite::Connection;

include!("../../reaper-sql/tests/support/malformed_rows.rs");

/// A migrated file seeded with `variant`; with `loose`, its `reaper_runs` table has no constraints.
fn seeded(variant: &Malformed, loose: bool) -> common::TempStore {
    let fresh = common::TempStore::new();
    let conn = Connection::open(fresh.path()).unwrap();
    if loose {
        conn.execute_batch(LOOSE_RUNS).unwrap();
    }
    conn.execute_batch(&seed_sql(variant))
        .unwrap_or_else(|e| panic!("{}: seeding failed: {e}", variant.name));
    // Reopen, so the store sees the table as the seeding left it.
    let dir = fresh.dir;
    let store = SqliteStore::open(dir.path().join("reaper.db")).unwrap();
    common::TempStore { store, dir }
}

fn check_listing(variant: &Malformed, loose: bool) -> Result<(), String> {
    let store = seeded(variant, loose);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let listing = rt
        .block_on(store.list_reclaimable_listing(10, 0))
        .map_err(|e| format!("the listing failed as a whole: {e}"))?;
    let ids: Vec<&str> = listing.runs.iter().map(|r| r.run_id.as_str()).collect();
    if ids != ["good-1", "good-2"] {
        return Err(format!("listed {ids:?}, expected both good runs"));
    }
    match &listing.corrupt[..] {
        [StoreError::Corrupt { key, reason }]
            if key == expected_key(variant) && reason.contains(variant.column) => {}
        other => {
            return Err(format!(
                "corrupt is {other:?}, expected one entry keyed {:?} naming {}",
                expected_key(variant),
                variant.column
            ))
        }
    }
    if !variant.by_rowid {
        match rt.block_on(store.get("bad")) {
            Err(StoreError::Corrupt { key, .. }) if key == "bad" => {}
            other => return Err(format!("get(bad) returned {other:?}")),
        }
        if rt.block_on(store.list_reclaimable(10, 0)).is_ok() {
            return Err("the plain listing, which has no place for it, hid the row".into());
        }
    }
    Ok(())
}

#[test]
fn every_malformed_row_is_listed_as_corrupt_beside_every_good_row() {
    let mut failures = Vec::new();
    for variant in MALFORMED {
        let mut modes = vec![true];
        if !variant.loose_only {
            modes.push(false);
        }
        for loose in modes {
            if let Err(e) = check_listing(variant, loose) {
                let table = if loose { "loose" } else { "schema" };
                failures.push(format!("{} ({table} table): {e}", variant.name));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_schema_s_own_constraints_refuse_the_loose_only_variants() {
    // Why those variants need a table without constraints: the schema itself refuses them.
    for variant in MALFORMED.iter().filter(|v| v.loose_only) {
        let store = common::TempStore::new();
        let conn = Connection::open(store.path()).unwrap();
        let converted_or_refused = match conn.execute_batch(&seed_sql(variant)) {
            Err(_) => true,
            // TEXT affinity stores the number 42 as the text "42", which is a fine thread id.
            Ok(()) => {
                conn.query_row(
                    "SELECT typeof(thread_id) FROM reaper_runs WHERE rowid = 2",
                    [],
                    |r| r.get::<_, String>(0),
                )
                .unwrap()
                    == "text"
            }
        };
        assert!(converted_or_refused, "{}", variant.name);
    }
}
