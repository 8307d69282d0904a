//! The `reaper_leases` table: claims and the sweep's single-flight lease.

/// The table name.
pub const TABLE: &str = "reaper_leases";

/// The notes kept beside the leases (version 3): the sweep's listing cursor. A separate table,
/// because a release deletes the lease row and the note must outlive it.
pub const NOTES_TABLE: &str = "reaper_lease_notes";

/// Grants a free or expired key in one conditional upsert and returns the new token; returns no
/// row while someone else holds it. `?1` key, `?2` owner, `?3` expires at, `?4` now. The token
/// is 128 random bits from SQLite, so a stale holder's token never matches a newer grant.
pub const ACQUIRE: &str = "INSERT INTO reaper_leases (key, owner, token, expires_at) \
                           VALUES (?1, ?2, lower(hex(randomblob(16))), ?3) \
                           ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, \
                           token = excluded.token, expires_at = excluded.expires_at \
                           WHERE reaper_leases.expires_at <= ?4 \
                           RETURNING token";

/// Who holds a key and until when: `?1` the key.
pub const HOLDER: &str = "SELECT owner, expires_at FROM reaper_leases WHERE key = ?1";

/// Extends a lease only for its holder's grant: `?1` key, `?2` owner, `?3` token, `?4` the new
/// expiry. Returns the key when it landed.
pub const RENEW: &str = "UPDATE reaper_leases SET expires_at = ?4 \
                         WHERE key = ?1 AND owner = ?2 AND token = ?3 RETURNING key";

/// Releases a lease only for its holder's grant: `?1` key, `?2` owner, `?3` token.
pub const RELEASE: &str = "DELETE FROM reaper_leases WHERE key = ?1 AND owner = ?2 AND token = ?3";

/// The note kept with a key: `?1` the key. No row: no note.
pub const NOTE: &str = "SELECT note FROM reaper_lease_notes WHERE key = ?1";

/// Writes a key's note only while the grant holds the key, in one statement (the fence):
/// `?1` key, `?2` owner, `?3` token, `?4` the note. Returns the key when it landed. (The
/// `WHERE` on the `SELECT` is also what lets SQLite parse the upsert after it.)
pub const SET_NOTE: &str = "INSERT INTO reaper_lease_notes (key, note) \
                            SELECT ?1, ?4 WHERE EXISTS (SELECT 1 FROM reaper_leases \
                            WHERE key = ?1 AND owner = ?2 AND token = ?3) \
                            ON CONFLICT (key) DO UPDATE SET note = excluded.note \
                            RETURNING key";
