//! The `reaper_transcripts` table: the lasting record of a run. Nothing deletes a transcript.

/// The table name.
pub const TABLE: &str = "reaper_transcripts";

/// Saves or replaces a run's transcript: `?1` run id, `?2` thread id, `?3` body (a JSON array of
/// messages), `?4` exit code, `?5` saved at.
pub const SAVE: &str =
    "INSERT INTO reaper_transcripts (run_id, thread_id, body, exit_code, saved_at) \
                        VALUES (?1, ?2, ?3, ?4, ?5) \
                        ON CONFLICT (run_id) DO UPDATE SET thread_id = excluded.thread_id, \
                        body = excluded.body, exit_code = excluded.exit_code, \
                        saved_at = excluded.saved_at";

/// [`SAVE`] fenced on a held epoch `?6`: it writes nothing while the run's `driver_epoch` is
/// past it (a NULL `?6` never refuses, and neither does a missing run), in the statement itself.
pub const SAVE_FENCED: &str =
    "INSERT INTO reaper_transcripts (run_id, thread_id, body, exit_code, saved_at) \
     SELECT ?1, ?2, ?3, ?4, ?5 \
     WHERE NOT EXISTS (SELECT 1 FROM reaper_runs WHERE run_id = ?1 AND driver_epoch > ?6) \
     ON CONFLICT (run_id) DO UPDATE SET thread_id = excluded.thread_id, \
     body = excluded.body, exit_code = excluded.exit_code, saved_at = excluded.saved_at";

/// `thread_id`, `body`, `exit_code` and `saved_at` of a run's transcript: `?1` the run id.
pub const SELECT_BY_RUN: &str =
    "SELECT thread_id, body, exit_code, saved_at FROM reaper_transcripts WHERE run_id = ?1";

/// Why a stored body is corrupt.
pub fn body_not_messages(error: impl std::fmt::Display) -> String {
    format!("body is not a JSON array of {{role, content}}: {error}")
}
