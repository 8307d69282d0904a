// Malformed `reaper_runs` rows, shared by the SQLite and D1 store tests (`include!`d by both, so the two
// backends are held to one list). Each variant takes a good detached run `bad` and spoils one
// thing with raw SQL, the way a careless application, a hand edit or another tool might.

/// One way a stored run can be malformed.
#[derive(Debug, Clone, Copy)]
pub struct Malformed {
    pub name: &'static str,
    /// The `SET` clause applied to the row `bad` (CHECK constraints off).
    pub set: &'static str,
    /// Needs a `reaper_runs` table without the schema's NOT NULL constraints and column types (an
    /// application that created the table itself): the real schema refuses or converts it.
    pub loose_only: bool,
    /// The run id itself is unreadable, so the row is named by its rowid.
    pub by_rowid: bool,
    /// The column the reason must name.
    pub column: &'static str,
    /// D1 hands rows to a Worker as JavaScript values, where invalid UTF-8 has already become
    /// U+FFFD: such a row is indistinguishable from a valid one there.
    pub d1_can_tell: bool,
}

const fn bad(name: &'static str, set: &'static str, column: &'static str) -> Malformed {
    Malformed {
        name,
        set,
        loose_only: false,
        by_rowid: false,
        column,
        d1_can_tell: true,
    }
}

pub const MALFORMED: &[Malformed] = &[
    bad("fractional started_at", "started_at = 1.5", "started_at"),
    bad("negative started_at", "started_at = -1", "started_at"),
    bad(
        "started_at past 2^53",
        "started_at = 9007199254740993",
        "started_at",
    ),
    bad(
        "started_at as a huge real",
        "started_at = 1e300",
        "started_at",
    ),
    bad(
        "text in started_at",
        "started_at = 'yesterday'",
        "started_at",
    ),
    bad(
        "negative detached_since",
        "detached_since = -5",
        "detached_since",
    ),
    bad(
        "fractional detached_since",
        "detached_since = 4.5",
        "detached_since",
    ),
    bad("negative finished_at", "finished_at = -2", "finished_at"),
    bad("bad JSON in usage", "usage = 'not json'", "usage"),
    bad("a blob in usage", "usage = x'7b7d'", "usage"),
    bad(
        "cancel_requested = 7",
        "cancel_requested = 7",
        "cancel_requested",
    ),
    bad(
        "text in cancel_requested",
        "cancel_requested = 'yes'",
        "cancel_requested",
    ),
    bad("negative driver_epoch", "driver_epoch = -1", "driver_epoch"),
    bad(
        "fractional driver_epoch",
        "driver_epoch = 1.5",
        "driver_epoch",
    ),
    bad(
        "a huge real driver_epoch",
        "driver_epoch = 1e20",
        "driver_epoch",
    ),
    bad(
        "error_code without error_message",
        "error_code = 'E42', error_message = NULL",
        "error_code",
    ),
    bad(
        "a blob in error_message",
        "error_message = x'00ff'",
        "error_message",
    ),
    bad(
        "a blob in sandbox_key",
        "sandbox_key = x'01'",
        "sandbox_key",
    ),
    Malformed {
        by_rowid: true,
        ..bad("a blob run_id", "run_id = x'6261642d626c6f62'", "run_id")
    },
    Malformed {
        by_rowid: true,
        d1_can_tell: false,
        ..bad(
            "a non-UTF-8 run_id",
            "run_id = CAST(x'62ff64' AS TEXT)",
            "run_id",
        )
    },
    Malformed {
        loose_only: true,
        ..bad("NULL thread_id", "thread_id = NULL", "thread_id")
    },
    Malformed {
        loose_only: true,
        ..bad("NULL started_at", "started_at = NULL", "started_at")
    },
    Malformed {
        loose_only: true,
        ..bad("a number in thread_id", "thread_id = 42", "thread_id")
    },
    Malformed {
        loose_only: true,
        by_rowid: true,
        ..bad("NULL run_id", "run_id = NULL", "run_id")
    },
];

/// Seeds `good-1`, `bad` and `good-2` (detached at 5, 5 and 6: listed in that order at any
/// cutoff from 6) and spoils `bad` as `variant` says. `bad` is rowid 2.
pub fn seed_sql(variant: &Malformed) -> String {
    format!(
        "PRAGMA ignore_check_constraints = ON; \
         INSERT INTO reaper_runs (run_id, thread_id, status, started_at, detached_since) VALUES \
         ('good-1', 't', 'running', 1, 5), ('bad', 't', 'running', 1, 5), \
         ('good-2', 't', 'running', 1, 6); \
         UPDATE reaper_runs SET {} WHERE rowid = 2; \
         PRAGMA ignore_check_constraints = OFF;",
        variant.set
    )
}

/// Replaces `reaper_runs` by a table with the same columns and no types or constraints, as an
/// application creating the table by hand might.
pub const LOOSE_RUNS: &str = "DROP TABLE reaper_runs; CREATE TABLE reaper_runs (run_id, thread_id, status, \
                              started_at, finished_at, error_message, error_code, usage, \
                              sandbox_key, detached_since, cancel_requested, driver_epoch);";

/// The key the corrupt entry must carry.
pub fn expected_key(variant: &Malformed) -> &'static str {
    if variant.by_rowid {
        "reaper_runs rowid 2"
    } else {
        "bad"
    }
}
