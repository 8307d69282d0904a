//! The `reaper_reclaim_intents` table (version 2): the reclaim ledger. One row per terminal run
//! whose aftermath (closing its log, destroying its sandbox) is not yet confirmed; the sweep
//! deletes the row once the provider confirms the sandbox gone.

/// The table name.
pub const TABLE: &str = "reaper_reclaim_intents";

/// The columns in the order every ledger query selects them (`concat!` needs a literal).
macro_rules! intent_columns {
    () => {
        "run_id, sandbox_key, provider, provider_sandbox_id, first_seen, attempts, \
         next_attempt_at, last_error"
    };
}

/// Every column of an intent row, in the order the queries below select them and
/// [`RECORD`] and [`UPDATE`] bind them (`?1`…`?8`).
pub const COLUMNS: &str = intent_columns!();

/// Inserts an intent unless the run has one (the existing entry and its history win): `?1`…`?8`
/// in [`COLUMNS`] order. Returns the run id only when it inserted, so "inserted?" is answered by
/// the statement itself, atomically, however many sweepers race.
pub const RECORD: &str = concat!(
    "INSERT INTO reaper_reclaim_intents (",
    intent_columns!(),
    ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT (run_id) DO NOTHING RETURNING run_id"
);

/// Replaces every field of an existing intent and returns its run id; matches no row (and so
/// never resurrects an entry) once it was resolved. Parameters as [`RECORD`].
pub const UPDATE: &str = "UPDATE reaper_reclaim_intents SET sandbox_key = ?2, provider = ?3, \
                          provider_sandbox_id = ?4, first_seen = ?5, attempts = ?6, \
                          next_attempt_at = ?7, last_error = ?8 \
                          WHERE run_id = ?1 RETURNING run_id";

/// Removes a run's intent: `?1` the run id.
pub const RESOLVE: &str = "DELETE FROM reaper_reclaim_intents WHERE run_id = ?1";

/// One intent by run id: `?1` the run id.
pub const SELECT_BY_ID: &str = concat!(
    "SELECT ",
    intent_columns!(),
    " FROM reaper_reclaim_intents WHERE run_id = ?1"
);

/// Up to `?2` intents due at `?1` (inclusive), earliest first, ties by run id. Read from the
/// index `reaper_reclaim_intents_due`, so it stops after `?2` rows however long the ledger is.
pub const DUE: &str = concat!(
    "SELECT ",
    intent_columns!(),
    " FROM reaper_reclaim_intents WHERE next_attempt_at <= ?1 \
     ORDER BY next_attempt_at, run_id LIMIT ?2"
);

/// The ledger's counts in one aggregate: `pending`, `leaked` (entries with a failed attempt) and
/// `oldest_first_seen` (NULL when the ledger is empty).
pub const COUNTS: &str = "SELECT COUNT(*) AS pending, \
                          COALESCE(SUM(attempts > 0), 0) AS leaked, \
                          MIN(first_seen) AS oldest_first_seen \
                          FROM reaper_reclaim_intents";

/// `attempts` as a count: never negative, and within `u32`.
pub fn attempts(stored: i64) -> Result<u32, String> {
    u32::try_from(stored).map_err(|_| format!("attempts is {stored}, expected 0 to {}", u32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_intent_query_selects_the_columns_in_one_order() {
        for sql in [RECORD, SELECT_BY_ID, DUE] {
            assert!(sql.contains(COLUMNS), "{sql}");
        }
    }

    #[test]
    fn the_due_listing_orders_by_the_index_columns_and_pushes_the_limit_down() {
        let index = crate::schema::fresh_statements()
            .find(|s| s.starts_with("CREATE INDEX reaper_reclaim_intents_due"))
            .unwrap();
        assert!(index.ends_with("(next_attempt_at, run_id)"), "{index}");
        assert!(
            DUE.ends_with("ORDER BY next_attempt_at, run_id LIMIT ?2"),
            "{DUE}"
        );
    }

    #[test]
    fn attempts_refuse_negative_and_oversized_counts() {
        assert_eq!(attempts(0), Ok(0));
        assert_eq!(attempts(3), Ok(3));
        assert!(attempts(-1).unwrap_err().contains("-1"));
        assert!(attempts(i64::from(u32::MAX) + 1).is_err());
    }
}
