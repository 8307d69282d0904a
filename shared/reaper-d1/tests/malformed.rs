//! One malformed row never hides the others (issue 12.3), in D1: the same variants as the
//! SQLite store's, planted with raw SQL, each reported in the listing's `corrupt` while every
//! good row is still listed, and a lookup by id is `StoreError::Corrupt` naming the run.

mod common;

use reaper_core::{RunStore, StoreError};

include!("../../reaper-sql/tests/support/malformed_rows.rs");

async fn check_listing(variant: &Malformed, loose: bool) -> Result<(), String> {
    let (store, client) = common::store().await;
    if loose {
        client.execute(LOOSE_RUNS);
    }
    client.execute(&seed_sql(variant));
    let listing = store
        .list_reclaimable_listing(10, 0)
        .await
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
        match store.get("bad").await {
            Err(StoreError::Corrupt { key, .. }) if key == "bad" => {}
            other => return Err(format!("get(bad) returned {other:?}")),
        }
    }
    Ok(())
}

#[tokio::test]
async fn every_malformed_row_is_listed_as_corrupt_beside_every_good_row() {
    let mut failures = Vec::new();
    for variant in MALFORMED.iter().filter(|v| v.d1_can_tell) {
        let mut modes = vec![true];
        if !variant.loose_only {
            modes.push(false);
        }
        for loose in modes {
            if let Err(e) = check_listing(variant, loose).await {
                let table = if loose { "loose" } else { "schema" };
                failures.push(format!("{} ({table} table): {e}", variant.name));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
