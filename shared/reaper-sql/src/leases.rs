//! The `leases` table: claims and the sweep's single-flight lease.

/// The table name.
pub const TABLE: &str = "leases";

/// Grants a free or expired key in one conditional upsert and returns the new token; returns no
/// row while someone else holds it. `?1` key, `?2` owner, `?3` expires at, `?4` now. The token
/// is 128 random bits from SQLite, so a stale holder's token never matches a newer grant.
pub const ACQUIRE: &str = "INSERT INTO leases (key, owner, token, expires_at) \
                           VALUES (?1, ?2, lower(hex(randomblob(16))), ?3) \
                           ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, \
                           token = excluded.token, expires_at = excluded.expires_at \
                           WHERE leases.expires_at <= ?4 \
                           RETURNING token";

/// Who holds a key and until when: `?1` the key.
pub const HOLDER: &str = "SELECT owner, expires_at FROM leases WHERE key = ?1";

/// Extends a lease only for its holder's grant: `?1` key, `?2` owner, `?3` token, `?4` the new
/// expiry. Returns the key when it landed.
pub const RENEW: &str = "UPDATE leases SET expires_at = ?4 \
                         WHERE key = ?1 AND owner = ?2 AND token = ?3 RETURNING key";

/// Releases a lease only for its holder's grant: `?1` key, `?2` owner, `?3` token.
pub const RELEASE: &str = "DELETE FROM leases WHERE key = ?1 AND owner = ?2 AND token = ?3";
