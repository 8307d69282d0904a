//! Whether this build of `reaper` has its test hooks: reaper-sqlite's crash points and the local
//! provider's `.destroy-fails` flag. On only in the builds reaper-cli's own tests run (see
//! `Cargo.toml` for how), so a deployed binary never honours either.

/// True in test builds only. A deployed `reaper` ignores `.destroy-fails` files (an agent could
/// write one to make its own sandbox indestructible) and has no crash points.
pub const ENABLED: bool = cfg!(feature = "enabled");
