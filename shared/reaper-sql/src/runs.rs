//! The `reaper_runs` table: its columns, the statements both backends run on it, and the rules for
//! decoding its stored values.

/// The table name.
pub const TABLE: &str = "reaper_runs";

/// The run columns in the order every run query selects them (`concat!` needs a literal).
macro_rules! run_columns {
    () => {
        "run_id, thread_id, status, started_at, finished_at, error_message, error_code, usage, \
         sandbox_key, detached_since, cancel_requested, driver_epoch"
    };
}

/// Every column of a run row, in the order the run queries below select them.
pub const COLUMNS: &str = run_columns!();

/// One run by id: `?1` the run id.
pub const SELECT_BY_ID: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM reaper_runs WHERE run_id = ?1"
);

/// The reclaimable listing: running runs detached at or before the cutoff `?1`, longest detached
/// first. Spelled so the partial index `reaper_runs_reclaimable` applies: its WHERE is implied verbatim.
/// After [`COLUMNS`] it selects the `rowid`, which names a row whose `run_id` cannot be read.
pub const LIST_RECLAIMABLE: &str = concat!(
    "SELECT ",
    run_columns!(),
    ", rowid AS rowid FROM reaper_runs WHERE status = 'running' AND detached_since IS NOT NULL \
     AND detached_since <= ?1 ORDER BY detached_since, rowid"
);

/// One bounded page of the reclaimable listing (the run store's `ReclaimableQuery`): running runs
/// with `detached_since <= ?1`, strictly after the keyset `(?2, ?3)` in `(detached_since, run_id)`
/// order, at most `?4` of them. The keyset is the page's only lower bound, so the partial index
/// `runs_reclaimable (detached_since, run_id)` seeks straight to it and the LIMIT stops the scan
/// at the page: a page reads its own rows whatever the backlog before it. Built by
/// [`page_statement`]. Selects the `rowid` after [`COLUMNS`], as [`LIST_RECLAIMABLE`] does.
pub const LIST_RECLAIMABLE_PAGE: &str = concat!(
    "SELECT ",
    run_columns!(),
    ", rowid AS rowid FROM reaper_runs WHERE status = 'running' AND detached_since IS NOT NULL \
     AND detached_since <= ?1 AND (detached_since, run_id) > (?2, ?3) \
     ORDER BY detached_since, run_id LIMIT ?4"
);

/// [`LIST_RECLAIMABLE_PAGE`] from the keyset `(?2, ?3)` inclusive: the first page of a range,
/// whose floor `detached_since > after` is the keyset `(after + 1, '')`, and `''` is a run id too.
pub const LIST_RECLAIMABLE_PAGE_FROM: &str = concat!(
    "SELECT ",
    run_columns!(),
    ", rowid AS rowid FROM reaper_runs WHERE status = 'running' AND detached_since IS NOT NULL \
     AND detached_since <= ?1 AND (detached_since, run_id) >= (?2, ?3) \
     ORDER BY detached_since, run_id LIMIT ?4"
);

/// A page of the listing as a statement and its four parameters, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageStatement {
    /// The statement ([`LIST_RECLAIMABLE_PAGE`], or the same without the lower bound on a
    /// first page).
    pub sql: &'static str,
    /// `?1`: only runs detached at or before this time (epoch ms).
    pub detached_until: i64,
    /// `?2`: the lower bound on `detached_since` (the range's floor or the cursor's, the later)
    pub since: i64,
    /// `?3`: the cursor's run id, for ties on `detached_since` (keyset pagination).
    pub run_id: String,
    /// `?4`: the most rows the page holds.
    pub limit: i64,
}

/// The statement for one page: `detached_after < detachedSince <= detached_until`, strictly after
/// the cursor `after`, at most `limit` rows. The range's floor and the cursor are both lower
/// bounds; only the later one is bound, because SQLite seeks the index to one lower bound and
/// filters the rest: with both, a resumed page would read every run between the floor and the
/// cursor (half the backlog on average) to return a page.
pub fn page_statement(
    detached_until: i64,
    detached_after: Option<i64>,
    after: Option<(i64, &str)>,
    limit: usize,
) -> PageStatement {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let floor = match detached_after {
        None => i64::MIN,
        Some(a) => match a.checked_add(1) {
            Some(floor) => floor,
            // Nothing is detached after the largest instant: an empty page.
            None => {
                return PageStatement {
                    sql: LIST_RECLAIMABLE_PAGE_FROM,
                    detached_until,
                    since: i64::MAX,
                    run_id: String::new(),
                    limit: 0,
                }
            }
        },
    };
    match after {
        // Past the cursor: everything after it is past the floor too.
        Some((since, run_id)) if since >= floor => PageStatement {
            sql: LIST_RECLAIMABLE_PAGE,
            detached_until,
            since,
            run_id: run_id.to_owned(),
            limit,
        },
        _ => PageStatement {
            sql: LIST_RECLAIMABLE_PAGE_FROM,
            detached_until,
            since: floor,
            run_id: String::new(),
            limit,
        },
    }
}

/// How many rows the reclaimable listing holds with `?2 < detached_since <= ?1`, stopping at
/// `?3` (bind the bound plus one, so a count past the bound tells "at least"; an absent lower
/// bound is `i64::MIN`). Counted inside the partial index `reaper_runs_reclaimable` (the inner `LIMIT`
/// stops the index scan), so the cost is bounded by `?3` whatever the backlog. Column `n`.
pub const COUNT_RECLAIMABLE: &str = "SELECT COUNT(*) AS n FROM (SELECT 1 FROM reaper_runs \
     WHERE status = 'running' AND detached_since IS NOT NULL \
     AND detached_since <= ?1 AND detached_since > ?2 LIMIT ?3)";

/// How a listing names a row whose `run_id` cannot be read: by its `rowid`.
pub fn row_key(rowid: Option<i64>) -> String {
    rowid.map_or_else(
        || "reaper_runs row (unknown rowid)".into(),
        |r| format!("reaper_runs rowid {r}"),
    )
}

/// The condition [`UNLISTABLE_WHERE`] spells (a macro, because `concat!` needs a literal).
/// Released in migration 5's index: never edit it, add a new migration and constant instead.
/// A NULL status is caught by `coalesce`, not `status IS NULL`: SQLite 3.54 (D1's, Node's)
/// drops `IS NULL` on a NOT NULL column from a query but not from an index's WHERE, and then no
/// longer sees that the query implies the index (a scan of `reaper_runs` instead).
macro_rules! unlistable_where {
    () => {
        "detached_since IS NOT NULL AND (coalesce(status, '') NOT IN ('running', \
         'interrupted', 'completed', 'failed', 'aborted') OR (status = 'running' AND \
         (typeof(detached_since) NOT IN ('integer', 'real') OR detached_since > \
         9007199254740991)))"
    };
}
pub(crate) use unlistable_where;

/// Which rows look detached (`detached_since` is set) but that the reclaimable listing cannot
/// take, and that nothing would otherwise report: a status that is no run status (`'RUNNING'`,
/// a typo, NULL), which the listing's `status = 'running'` never matches, or a `running` row
/// whose `detached_since` is no instant a listing range reaches (a text or blob value, or a
/// number past [`MAX_SAFE_INTEGER`]). The partial index `reaper_runs_unlistable` (schema version 5)
/// holds exactly these rows.
pub const UNLISTABLE_WHERE: &str = unlistable_where!();

/// Up to `?1` rows [`UNLISTABLE_WHERE`] selects. The sweep and `reaper status` report them as
/// corrupt by the same rule. The WHERE is the index's verbatim and the order is the index's
/// own, so SQLite reads the partial index `reaper_runs_unlistable` and nothing else: a healthy
/// database reads none of its runs (D1 bills rows read; it counts 1 for the empty seek), a
/// damaged one at most `?1` of them. Selects `run_id`, `rowid`, `status`, `detached_since` as
/// text (`detached_text`) and its type (`detached_type`), named because D1 keys a row's values
/// by column name.
pub const LIST_UNLISTABLE: &str = concat!(
    "SELECT run_id, rowid AS rowid, status, CAST(detached_since AS TEXT) AS detached_text, \
     typeof(detached_since) AS detached_type FROM reaper_runs WHERE ",
    unlistable_where!(),
    " ORDER BY detached_since, rowid LIMIT ?1"
);

/// Why a row [`LIST_UNLISTABLE`] selected is corrupt.
pub fn unlistable(status: Option<&str>, detached_since: &str, kind: &str) -> String {
    match status {
        Some("running") => format!(
            "the detached run's detached_since is {kind} {detached_since:?}, which is no time in milliseconds since the Unix epoch (expected 0 to {MAX_SAFE_INTEGER}); no listing reaches it"
        ),
        Some(raw) => format!(
            "{}; the run is detached (detached_since {detached_since}) but no listing reaches it",
            unknown_status(raw)
        ),
        None => format!(
            "status is NULL; the run is detached (detached_since {detached_since}) but no listing reaches it"
        ),
    }
}

/// A thread's latest running run: `?1` the thread id.
pub const FIND_ACTIVE: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM reaper_runs WHERE thread_id = ?1 AND status = 'running' \
     ORDER BY started_at DESC, rowid DESC LIMIT 1"
);

/// Up to `?2` runs of any thread that are not terminal and name the sandbox key `?1`: the
/// reclaim keeps a sandbox any of them may use. A scan of `reaper_runs` (no index covers the key): one
/// per reclaim, against a destroy that would kill a live agent.
pub const LIVE_BY_SANDBOX_KEY: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM reaper_runs WHERE sandbox_key = ?1 AND status IN ('running', 'interrupted') LIMIT ?2"
);

/// A thread's runs, oldest first: `?1` the thread id.
pub const LIST_BY_THREAD: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM reaper_runs WHERE thread_id = ?1 ORDER BY started_at, rowid"
);

/// Creates a run unless it exists (a retry keeps the original row): `?1` run id, `?2` thread
/// id, `?3` status, `?4` started at.
pub const INSERT_IF_ABSENT: &str =
    "INSERT INTO reaper_runs (run_id, thread_id, status, started_at) \
                                    VALUES (?1, ?2, ?3, ?4) ON CONFLICT (run_id) DO NOTHING";

/// Seeding a whole row (tests, demos): inserts the identity columns or overwrites them, with
/// the same parameters as [`INSERT_IF_ABSENT`]; an [`update`] then writes the rest.
pub const SEED: &str = "INSERT INTO reaper_runs (run_id, thread_id, status, started_at) \
                        VALUES (?1, ?2, ?3, ?4) \
                        ON CONFLICT (run_id) DO UPDATE SET thread_id = excluded.thread_id, \
                        started_at = excluded.started_at";

/// The claim: bumps the fencing epoch of a running or interrupted run `?1` and returns the row.
/// Unknown and terminal runs match no row; [`STATUS_BY_ID`] then says which.
pub const BUMP_EPOCH: &str = concat!(
    "UPDATE reaper_runs SET driver_epoch = COALESCE(driver_epoch, 0) + 1 \
     WHERE run_id = ?1 AND status IN ('running', 'interrupted') RETURNING ",
    run_columns!()
);

/// A run's stored status: `?1` the run id.
pub const STATUS_BY_ID: &str = "SELECT status FROM reaper_runs WHERE run_id = ?1";

/// A run's fencing epoch: `?1` the run id.
pub const EPOCH_BY_ID: &str = "SELECT driver_epoch FROM reaper_runs WHERE run_id = ?1";

/// The fenced terminal write, keeping the stored error: `?1` run id, `?2` status, `?3` finished
/// at, `?4` the held epoch. The fence is in the statement itself, so a superseded holder cannot
/// land it whatever its timing; it returns the run id when it landed.
pub const WRITE_TERMINAL: &str = "UPDATE reaper_runs SET status = ?2, finished_at = ?3 \
                                  WHERE run_id = ?1 \
                                  AND (driver_epoch IS NULL OR driver_epoch <= ?4) \
                                  RETURNING run_id";

/// [`WRITE_TERMINAL`] that also writes the error: `?5` its message, `?6` its code.
pub const WRITE_TERMINAL_WITH_ERROR: &str =
    "UPDATE reaper_runs SET status = ?2, finished_at = ?3, error_message = ?5, error_code = ?6 \
     WHERE run_id = ?1 AND (driver_epoch IS NULL OR driver_epoch <= ?4) RETURNING run_id";

/// The fenced terminal write, with or without the error columns.
pub fn write_terminal(with_error: bool) -> &'static str {
    if with_error {
        WRITE_TERMINAL_WITH_ERROR
    } else {
        WRITE_TERMINAL
    }
}

/// One `UPDATE` of the named columns of run `?1`, bound in order as `?2`, `?3`, …; `None` when
/// there is nothing to write.
pub fn update<'a>(columns: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let set: Vec<String> = columns
        .into_iter()
        .enumerate()
        .map(|(i, name)| format!("{name} = ?{}", i + 2))
        .collect();
    (!set.is_empty()).then(|| {
        format!(
            "UPDATE reaper_runs SET {} WHERE run_id = ?1",
            set.join(", ")
        )
    })
}

/// [`update`] conditional on the fence: `?1` the run, the columns `?2 …`, then the held epoch
/// last (`?{columns + 2}`). The fence is in the statement, as in [`WRITE_TERMINAL`]; it returns
/// the run id when it landed. With no columns it still checks the fence (a no-op write), so the
/// answer says whether the holder is current.
pub fn update_fenced<'a>(columns: impl IntoIterator<Item = &'a str>) -> String {
    let mut set: Vec<String> = columns
        .into_iter()
        .enumerate()
        .map(|(i, name)| format!("{name} = ?{}", i + 2))
        .collect();
    let held = set.len() + 2;
    if set.is_empty() {
        set.push("run_id = run_id".into());
    }
    format!(
        "UPDATE reaper_runs SET {} WHERE run_id = ?1 \
         AND (driver_epoch IS NULL OR driver_epoch <= ?{held}) RETURNING run_id",
        set.join(", ")
    )
}

/// Why a stored status is corrupt: it is none of the five the schema allows. Such a row is
/// never read as terminal, or as anything else.
pub fn unknown_status(raw: &str) -> String {
    format!(
        "status {raw:?} is not a run status (expected running, interrupted, completed, failed \
         or aborted)"
    )
}

/// `error_message` and `error_code` as one optional error: a code needs a message.
pub fn error(
    message: Option<String>,
    code: Option<String>,
) -> Result<Option<(String, Option<String>)>, String> {
    match (message, code) {
        (Some(message), code) => Ok(Some((message, code))),
        (None, None) => Ok(None),
        (None, Some(_)) => Err("error_code is set without error_message".into()),
    }
}

/// `cancel_requested`: NULL (never asked), 0 and 1 are three distinct values.
pub fn cancel_requested(stored: Option<i64>) -> Result<Option<bool>, String> {
    match stored {
        None => Ok(None),
        Some(0) => Ok(Some(false)),
        Some(1) => Ok(Some(true)),
        Some(other) => Err(format!(
            "cancel_requested is {other}, expected 0, 1 or NULL"
        )),
    }
}

/// The largest integer a JavaScript number carries exactly. The schema is shared with
/// JavaScript applications (and D1 hands integers to a Worker as doubles), so a stored instant
/// past it cannot be the one that was meant.
pub const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

/// An instant column (`started_at`, `finished_at`, `detached_since`): milliseconds since the
/// Unix epoch, so never negative and within [`MAX_SAFE_INTEGER`]. Anything else is a value some
/// writer got wrong, and a TTL computed from it would be meaningless.
pub fn instant(column: &str, stored: i64) -> Result<i64, String> {
    if (0..=MAX_SAFE_INTEGER).contains(&stored) {
        Ok(stored)
    } else {
        Err(format!(
            "{column} is {stored}, which is no time in milliseconds since the Unix epoch \
             (expected 0 to {MAX_SAFE_INTEGER})"
        ))
    }
}

/// `driver_epoch`: NULL on a run never claimed, never negative.
pub fn driver_epoch(stored: Option<i64>) -> Result<Option<u64>, String> {
    stored
        .map(u64::try_from)
        .transpose()
        .map_err(|_| "driver_epoch is negative".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_patch_is_no_statement_and_columns_bind_after_the_run_id() {
        assert_eq!(update([]), None);
        assert_eq!(
            update(["status", "finished_at"]).as_deref(),
            Some("UPDATE reaper_runs SET status = ?2, finished_at = ?3 WHERE run_id = ?1")
        );
    }

    #[test]
    fn every_run_query_selects_the_columns_in_one_order() {
        for sql in [
            SELECT_BY_ID,
            LIST_RECLAIMABLE,
            LIST_RECLAIMABLE_PAGE,
            FIND_ACTIVE,
            LIST_BY_THREAD,
            BUMP_EPOCH,
        ] {
            assert!(sql.contains(COLUMNS), "{sql}");
        }
        assert!(COLUMNS.starts_with("run_id, ") && COLUMNS.ends_with(", driver_epoch"));
    }

    #[test]
    fn the_reclaimable_count_implies_the_partial_index_condition_verbatim() {
        let index = crate::schema::fresh_statements()
            .find(|s| s.starts_with("CREATE INDEX reaper_runs_reclaimable"))
            .unwrap();
        let condition = index.split("WHERE ").nth(1).unwrap();
        assert!(COUNT_RECLAIMABLE.contains(condition), "{condition}");
    }

    #[test]
    fn the_reclaimable_listing_implies_the_partial_index_condition_verbatim() {
        let index = crate::schema::fresh_statements()
            .find(|s| s.starts_with("CREATE INDEX reaper_runs_reclaimable"))
            .unwrap();
        let condition = index.split("WHERE ").nth(1).unwrap();
        assert!(LIST_RECLAIMABLE.contains(condition), "{condition}");
        assert!(LIST_RECLAIMABLE_PAGE.contains(condition), "{condition}");
        assert!(
            LIST_RECLAIMABLE_PAGE_FROM.contains(condition),
            "{condition}"
        );
    }

    #[test]
    fn both_terminal_writes_carry_the_same_fence() {
        for sql in [write_terminal(false), write_terminal(true)] {
            assert!(
                sql.contains("WHERE run_id = ?1 AND (driver_epoch IS NULL OR driver_epoch <= ?4)")
                    && sql.ends_with("RETURNING run_id"),
                "{sql}"
            );
        }
        assert!(!write_terminal(false).contains("error_message"));
    }

    #[test]
    fn an_unknown_status_is_named_in_its_reason() {
        for raw in ["toString", "__proto__", "RUNNING", "", "complete"] {
            assert!(unknown_status(raw).contains(&format!("{raw:?}")));
        }
    }

    #[test]
    fn a_code_without_a_message_is_corrupt_and_a_message_alone_is_an_error() {
        assert!(error(None, Some("E1".into())).is_err());
        assert_eq!(error(None, None), Ok(None));
        assert_eq!(
            error(Some("boom".into()), None),
            Ok(Some(("boom".into(), None)))
        );
    }

    #[test]
    fn cancel_requested_keeps_null_zero_and_one_apart_and_refuses_other_values() {
        assert_eq!(cancel_requested(None), Ok(None));
        assert_eq!(cancel_requested(Some(0)), Ok(Some(false)));
        assert_eq!(cancel_requested(Some(1)), Ok(Some(true)));
        assert!(cancel_requested(Some(2)).unwrap_err().contains('2'));
    }

    #[test]
    fn an_instant_is_never_negative_nor_past_what_javascript_carries() {
        assert_eq!(instant("started_at", 0), Ok(0));
        assert_eq!(
            instant("started_at", MAX_SAFE_INTEGER),
            Ok(MAX_SAFE_INTEGER)
        );
        for bad in [-1, MAX_SAFE_INTEGER + 1, i64::MIN, i64::MAX] {
            let reason = instant("detached_since", bad).unwrap_err();
            assert!(reason.contains("detached_since") && reason.contains(&bad.to_string()));
        }
    }

    #[test]
    fn a_negative_epoch_is_corrupt() {
        assert_eq!(driver_epoch(None), Ok(None));
        assert_eq!(driver_epoch(Some(7)), Ok(Some(7)));
        assert!(driver_epoch(Some(-1)).is_err());
    }
}
