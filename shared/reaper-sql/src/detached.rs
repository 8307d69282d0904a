//! The detached view `reaper status` lists (`reaper_core::detached`): one aggregate over the
//! partial index `reaper_runs_reclaimable` for the summary, and one joined, filtered, limited statement
//! for the rows, so the cost follows the rows shown, not the backlog. Only listable rows are
//! read (a `detached_since` that is an integer up to [`crate::runs::MAX_SAFE_INTEGER`]: text and
//! blobs sort after every number); the others are the sweep's unlistable rows, reported apart.

/// The condition every statement here shares: the partial index's own WHERE, and the listable
/// range, so SQLite reads `reaper_runs_reclaimable` in order.
macro_rules! detached_where {
    () => {
        "r.status = 'running' AND r.detached_since IS NOT NULL \
         AND r.detached_since <= 9007199254740991"
    };
}

/// The filters: `?1` the latest `detached_since` the age filter admits (NULL: none), `?2` the
/// provider (NULL: any), `?3` the outcome of the newest history entry (NULL: any).
macro_rules! detached_filters {
    () => {
        " AND (?1 IS NULL OR r.detached_since <= ?1) \
          AND (?2 IS NULL OR i.provider = ?2) \
          AND (?3 IS NULL OR json_extract((SELECT h.entry FROM reaper_run_history AS h \
          WHERE h.run_id = r.run_id ORDER BY h.at DESC, h.sweep_id DESC LIMIT 1), '$.outcome') = ?3)"
    };
}

/// The summary of every listable detached run: `count`, `oldest` (the least `detached_since`)
/// and `past_ttl` (how many have `detached_since <= ?1`; 0 when `?1` is NULL). A covering read
/// of the partial index: no run row is read.
pub const SUMMARY: &str = concat!(
    "SELECT COUNT(*) AS count, MIN(r.detached_since) AS oldest, \
     COALESCE(SUM(r.detached_since <= ?1), 0) AS past_ttl FROM reaper_runs AS r WHERE ",
    detached_where!()
);

/// How many listable detached runs pass the filters (`?1`–`?3`, see the rows statement).
pub const MATCHING: &str = concat!(
    "SELECT COUNT(*) AS count FROM reaper_runs AS r \
     LEFT JOIN reaper_sandbox_instances AS i ON i.key = r.sandbox_key WHERE ",
    detached_where!(),
    detached_filters!()
);

/// The run columns, qualified by the alias `r` (the join's other table has a `thread_id` too);
/// the order is [`crate::runs::COLUMNS`]'s.
pub const RUN_COLUMNS: &str = "r.run_id, r.thread_id, r.status, r.started_at, r.finished_at, \
     r.error_message, r.error_code, r.usage, r.sandbox_key, r.detached_since, \
     r.cancel_requested, r.driver_epoch";

/// What a rows statement selects after [`RUN_COLUMNS`]: the run's `rowid`, its instance record
/// (all NULL without one) and its newest history entry's JSON (NULL without one).
macro_rules! detached_select {
    () => {
        "SELECT r.run_id, r.thread_id, r.status, r.started_at, r.finished_at, \
         r.error_message, r.error_code, r.usage, r.sandbox_key, r.detached_since, \
         r.cancel_requested, r.driver_epoch, r.rowid AS rowid, \
         i.key AS i_key, i.provider AS i_provider, i.provider_sandbox_id AS i_sandbox_id, \
         i.latest_snapshot_id AS i_snapshot_id, i.thread_id AS i_thread_id, \
         i.latest_run_id AS i_latest_run_id, i.updated_at AS i_updated_at, \
         (SELECT h.entry FROM reaper_run_history AS h WHERE h.run_id = r.run_id \
         ORDER BY h.at DESC, h.sweep_id DESC LIMIT 1) AS last_entry \
         FROM reaper_runs AS r LEFT JOIN reaper_sandbox_instances AS i ON i.key = r.sandbox_key WHERE "
    };
}

/// Up to `?6` listable detached runs passing the filters (`?1`–`?3`), from the keyset
/// `(?4, ?5)` inclusive, in `(detached_since, run_id)` order: the first page (`?4` the least
/// integer, `?5` `''`). The keyset seeks the partial index and the LIMIT stops the walk, so a
/// page reads the rows it shows and those the filters skip before them.
pub const ROWS_FROM: &str = concat!(
    detached_select!(),
    detached_where!(),
    detached_filters!(),
    " AND (r.detached_since, r.run_id) >= (?4, ?5) ORDER BY r.detached_since, r.run_id LIMIT ?6"
);

/// [`ROWS_FROM`] strictly after the keyset `(?4, ?5)`: a following page.
pub const ROWS_AFTER: &str = concat!(
    detached_select!(),
    detached_where!(),
    detached_filters!(),
    " AND (r.detached_since, r.run_id) > (?4, ?5) ORDER BY r.detached_since, r.run_id LIMIT ?6"
);

/// How many columns a rows statement selects before the instance record: the run's and its
/// `rowid`.
pub const INSTANCE_AT: usize = 13;

/// The column of the newest history entry's JSON.
pub const LAST_ENTRY_AT: usize = 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_qualified_run_columns_are_the_run_columns_in_order() {
        assert_eq!(RUN_COLUMNS.replace("r.", ""), crate::runs::COLUMNS);
        assert!(ROWS_FROM.starts_with(&format!("SELECT {RUN_COLUMNS}, r.rowid AS rowid, ")));
        assert_eq!(crate::runs::COLUMNS.split(", ").count() + 1, INSTANCE_AT);
        assert_eq!(INSTANCE_AT + 7, LAST_ENTRY_AT);
    }

    #[test]
    fn every_statement_repeats_the_partial_index_condition_so_sqlite_reads_the_index() {
        for sql in [SUMMARY, MATCHING, ROWS_FROM, ROWS_AFTER] {
            assert!(
                sql.contains("r.status = 'running' AND r.detached_since IS NOT NULL"),
                "{sql}"
            );
        }
    }
}
