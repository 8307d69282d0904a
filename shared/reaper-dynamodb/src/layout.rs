//! The table layout: key formats, attribute names, index names, and the conversions between
//! items and domain types. This module *is* the contract that `LAYOUT.md` and the SAM template
//! describe; change one and you change all three.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use reaper_core::{
    EpochMs, ReclaimIntent, RunError, RunRecord, RunStatus, SandboxInstanceRecord, StoreError,
    Transcript, TranscriptMessage,
};

pub(crate) type Item = HashMap<String, AttributeValue>;

/// Partition key (S) of every item.
pub const PK: &str = "pk";
/// Sort key (S) of every item.
pub const SK: &str = "sk";

/// The sparse index of detached runs that are not `interrupted` or terminal (see
/// [`LEAVES_RECLAIMABLE`]), `gsi1pk` (S) = [`DETACHED`], `gsi1sk` (N) =
/// `detachedSince`, and of reclaim-ledger entries, `gsi1pk` = [`RECLAIM`], `gsi1sk` =
/// `nextAttemptAt`. Projection ALL, so a listing needs no per-item read.
pub const RECLAIMABLE_INDEX: &str = "reclaimable";
/// The reclaimable index's partition key attribute.
pub const GSI1_PK: &str = "gsi1pk";
/// The reclaimable index's sort key attribute.
pub const GSI1_SK: &str = "gsi1sk";
/// The only `gsi1pk` value. One index partition serves well past any realistic number of
/// detached runs; sharding (`DETACHED#n`) would be a compatible extension.
pub const DETACHED: &str = "DETACHED";
/// The `gsi1pk` of every reclaim-ledger entry: the due listing and the counts are Queries of
/// this one index partition. The ledger is small (entries are resolved as soon as a sweep
/// confirms a run's aftermath), so one partition is ample.
pub const RECLAIM: &str = "RECLAIM";

/// Runs by thread: `gsi2pk` (S) = `THREAD#<threadId>`, `gsi2sk` (N) = `startedAt`. Projection
/// ALL. Only run items carry these attributes.
pub const THREAD_INDEX: &str = "by-thread";
/// The by-thread index's partition key attribute.
pub const GSI2_PK: &str = "gsi2pk";
/// The by-thread index's sort key attribute.
pub const GSI2_SK: &str = "gsi2sk";

/// Live runs by sandbox key: `gsi3pk` (S) = `SANDBOX#<sandboxKey>` (the key's id form, hashed
/// past 1,024 bytes), partition only, projection ALL. Sparse: present **exactly** on run items
/// that name a sandbox key and are not terminal, so the reclaim's in-use check reads the live
/// runs naming a key and never a finished one.
pub const SANDBOX_INDEX: &str = "by-sandbox";
/// The by-sandbox index's partition key attribute.
pub const GSI3_PK: &str = "gsi3pk";

/// The table's TTL attribute (N, epoch **seconds**), enabled on the table.
pub const TTL: &str = "ttl";
/// What kind of item this is (`run`, `log`, `entry`, `lease`, `sandbox`, `transcript`).
/// Informational: reads never require it, so hand-written items may omit it.
pub const ENTITY: &str = "entity";

/// The `sk` of a run's record item.
pub const RUN_SK: &str = "RUN";
/// The `sk` of a run's delivery-log meta item.
pub const LOG_SK: &str = "LOG";
/// The `sk` of a run's transcript item.
pub const TRANSCRIPT_SK: &str = "TRANSCRIPT";
/// The `sk` of a lease item.
pub const LEASE_SK: &str = "LEASE";
/// The note kept with a lease key, beside the lease item (a release deletes the lease item).
pub const LEASE_NOTE_SK: &str = "NOTE";
/// The `sk` of a sandbox instance record.
pub const SANDBOX_SK: &str = "SANDBOX";
/// The `sk` of a reclaim-ledger entry.
pub const RECLAIM_SK: &str = "RECLAIM";

/// Run item attributes (the reference's JSON field names).
pub mod run {
    /// The run's id.
    pub const RUN_ID: &str = "runId";
    /// The run's conversation.
    pub const THREAD_ID: &str = "threadId";
    /// The run's status.
    pub const STATUS: &str = "status";
    /// When the run started (N, epoch ms).
    pub const STARTED_AT: &str = "startedAt";
    /// When the run finished (N, epoch ms).
    pub const FINISHED_AT: &str = "finishedAt";
    /// Why the run failed (a map).
    pub const ERROR: &str = "error";
    /// The run's token usage (as the application wrote it).
    pub const USAGE: &str = "usage";
    /// The run's sandbox instance key.
    pub const SANDBOX_KEY: &str = "sandboxKey";
    /// When the run was detached (N, epoch ms).
    pub const DETACHED_SINCE: &str = "detachedSince";
    /// Whether a cancel was requested.
    pub const CANCEL_REQUESTED: &str = "cancelRequested";
    /// The epoch of the run's latest claim.
    pub const DRIVER_EPOCH: &str = "driverEpoch";
}

/// Log-meta and log-entry attributes.
pub mod log {
    /// On the log meta item: the next entry's sequence number.
    pub const NEXT_SEQ: &str = "nextSeq";
    /// On the log meta item: whether the log is closed.
    pub const CLOSED: &str = "closed";
    /// On the log meta item: when it was last appended to.
    pub const LAST_APPEND_AT: &str = "lastAppendAt";
    /// On an entry item: its sequence number.
    pub const SEQ: &str = "seq";
    /// On an entry item: the chunk.
    pub const CHUNK: &str = "chunk";
}

/// Lease attributes.
pub mod lease {
    /// The lease's key.
    pub const KEY: &str = "leaseKey";
    /// Who holds the lease.
    pub const OWNER: &str = "owner";
    /// The grant's token.
    pub const TOKEN: &str = "token";
    /// When the lease lapses.
    pub const EXPIRES_AT: &str = "expiresAt";
    /// On the note item (`sk = NOTE`): the note's text.
    pub const NOTE: &str = "note";
}

/// Reclaim-ledger entry attributes (the port's JSON field names).
pub mod intent {
    /// The run the entry is for.
    pub const RUN_ID: &str = "runId";
    /// The run's sandbox key.
    pub const SANDBOX_KEY: &str = "sandboxKey";
    /// The sandbox's provider.
    pub const PROVIDER: &str = "provider";
    /// The sandbox's id at the provider.
    pub const PROVIDER_SANDBOX_ID: &str = "providerSandboxId";
    /// When the entry was first recorded.
    pub const FIRST_SEEN: &str = "firstSeen";
    /// Failed attempts so far.
    pub const ATTEMPTS: &str = "attempts";
    /// When a sweep next retries it.
    pub const NEXT_ATTEMPT_AT: &str = "nextAttemptAt";
    /// Why the last attempt failed.
    pub const LAST_ERROR: &str = "lastError";
}

/// Ids longer than this (bytes) are keyed by their hash: DynamoDB caps a partition key at
/// 2,048 bytes. The item still carries the full id in its own attribute.
pub const MAX_RAW_KEY_ID_BYTES: usize = 1024;

/// An id as it appears inside a key: itself, or `~sha256:<hex>` when it is too long.
pub fn key_id(id: &str) -> std::borrow::Cow<'_, str> {
    use sha2::Digest;
    if id.len() <= MAX_RAW_KEY_ID_BYTES {
        return std::borrow::Cow::Borrowed(id);
    }
    let digest = sha2::Sha256::digest(id.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    std::borrow::Cow::Owned(format!("~sha256:{hex}"))
}

/// The partition of a run's items.
pub fn run_pk(run_id: &str) -> String {
    format!("RUN#{}", key_id(run_id))
}

/// The partition of a lease.
pub fn lease_pk(key: &str) -> String {
    format!("LEASE#{}", key_id(key))
}

/// The partition of a sandbox instance record.
pub fn sandbox_pk(key: &str) -> String {
    format!("SANDBOX#{}", key_id(key))
}

/// The partition of a run's reclaim-ledger entry: its own, not the run's, so deleting a run's
/// items never drops the record that its sandbox may still be running.
pub fn reclaim_pk(run_id: &str) -> String {
    format!("RECLAIM#{}", key_id(run_id))
}

/// The by-thread index partition of a thread's runs.
pub fn thread_gsi_pk(thread_id: &str) -> String {
    format!("THREAD#{}", key_id(thread_id))
}

/// `LOG#` + the sequence number zero-padded to 20 digits, so string order is numeric order.
pub fn entry_sk(seq: u64) -> String {
    format!("LOG#{seq:020}")
}

/// The primary key of an item.
pub fn key(pk: String, sk: &str) -> Item {
    HashMap::from([
        (PK.to_string(), AttributeValue::S(pk)),
        (SK.to_string(), AttributeValue::S(sk.to_string())),
    ])
}

/// A string attribute.
pub fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

/// A number attribute.
pub fn n(v: impl std::fmt::Display) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// The `gsi3pk` of the live runs naming sandbox `key`.
pub fn sandbox_gsi_pk(key: &str) -> String {
    format!("SANDBOX#{}", key_id(key))
}

/// Whether a run with this state belongs in the sandbox index ([`SANDBOX_INDEX`]).
pub fn sandbox_indexed(status: RunStatus, sandbox_key: Option<&str>) -> bool {
    !status.is_terminal() && sandbox_key.is_some()
}

/// Whether a run with this state belongs in the sparse index.
pub fn indexed(status: RunStatus, detached_since: Option<EpochMs>) -> bool {
    status == RunStatus::Running && detached_since.is_some()
}

/// The `status` values that keep a detached run item out of [`RECLAIMABLE_INDEX`]: every run
/// status but `running`. Membership follows detachment, not a valid status: an item whose
/// `status` is no run status (`RUNNING`, a number, none) stays in the index while detached, so
/// the sweep's listing reads it and reports it as corrupt instead of never seeing it (finding
/// it outside the index would take a Scan).
pub const LEAVES_RECLAIMABLE: [&str; 4] = ["interrupted", "completed", "failed", "aborted"];

/// The `status` values that keep a run item out of [`SANDBOX_INDEX`]: the terminal ones. An
/// item whose status is no run status stays in it, so the reclaim's in-use check meets it
/// (and keeps the sandbox) rather than missing a run that may be live.
pub const LEAVES_SANDBOX_INDEX: [&str; 3] = ["completed", "failed", "aborted"];

/// The index attributes a run item should carry, from its raw attributes (so an item that does
/// not parse is placed by the same rule): `gsi1sk` (the `detachedSince` number as stored) when
/// it belongs in [`RECLAIMABLE_INDEX`], `gsi3pk` when it belongs in [`SANDBOX_INDEX`]. A
/// `detachedSince` that is no number cannot be an index key and keeps the item out.
pub(crate) fn wanted_index(item: &Item) -> (Option<String>, Option<String>) {
    let status = match item.get(run::STATUS) {
        Some(AttributeValue::S(s)) => Some(s.as_str()),
        _ => None,
    };
    let leaves = |set: &[&str]| status.is_some_and(|s| set.contains(&s));
    let gsi1sk = match item.get(run::DETACHED_SINCE) {
        Some(AttributeValue::N(d)) if !leaves(&LEAVES_RECLAIMABLE) => Some(d.clone()),
        _ => None,
    };
    let gsi3pk = match item.get(run::SANDBOX_KEY) {
        Some(AttributeValue::S(k)) if !leaves(&LEAVES_SANDBOX_INDEX) => Some(sandbox_gsi_pk(k)),
        _ => None,
    };
    (gsi1sk, gsi3pk)
}

/// Reads typed attributes out of an item, naming the item in every error.
pub(crate) struct Reader<'a> {
    pub item: &'a Item,
    pub key: String,
}

impl<'a> Reader<'a> {
    pub fn new(item: &'a Item, key: String) -> Self {
        Reader { item, key }
    }

    fn corrupt(&self, reason: String) -> StoreError {
        StoreError::Corrupt {
            key: self.key.clone(),
            reason,
        }
    }

    /// `None` for a missing attribute or an explicit NULL (what a JS writer stores for
    /// `undefined` with `convertEmptyValues`/`removeUndefinedValues` off).
    fn present(&self, name: &str) -> Option<&'a AttributeValue> {
        self.item
            .get(name)
            .filter(|v| !matches!(v, AttributeValue::Null(_)))
    }

    fn required<T>(
        &self,
        name: &str,
        value: Result<Option<T>, StoreError>,
    ) -> Result<T, StoreError> {
        value?.ok_or_else(|| self.corrupt(format!("missing attribute {name}")))
    }

    pub fn opt_str(&self, name: &str) -> Result<Option<String>, StoreError> {
        match self.present(name) {
            None => Ok(None),
            Some(AttributeValue::S(v)) => Ok(Some(v.clone())),
            Some(other) => {
                Err(self.corrupt(format!("attribute {name} is not a string: {other:?}")))
            }
        }
    }

    pub fn str(&self, name: &str) -> Result<String, StoreError> {
        self.required(name, self.opt_str(name))
    }

    pub fn opt_num<T: std::str::FromStr>(&self, name: &str) -> Result<Option<T>, StoreError> {
        match self.present(name) {
            None => Ok(None),
            Some(AttributeValue::N(v)) => v.parse().map(Some).map_err(|_| {
                self.corrupt(format!(
                    "attribute {name} is {v}: not a whole number in the range of {}",
                    std::any::type_name::<T>()
                ))
            }),
            Some(other) => {
                Err(self.corrupt(format!("attribute {name} is not a number: {other:?}")))
            }
        }
    }

    pub fn num<T: std::str::FromStr>(&self, name: &str) -> Result<T, StoreError> {
        self.required(name, self.opt_num(name))
    }

    pub fn opt_bool(&self, name: &str) -> Result<Option<bool>, StoreError> {
        match self.present(name) {
            None => Ok(None),
            Some(AttributeValue::Bool(v)) => Ok(Some(*v)),
            Some(other) => {
                Err(self.corrupt(format!("attribute {name} is not a boolean: {other:?}")))
            }
        }
    }

    pub fn opt_json(&self, name: &str) -> Result<Option<serde_json::Value>, StoreError> {
        self.present(name)
            .map(|v| attr_to_json(v).map_err(|e| self.corrupt(format!("attribute {name}: {e}"))))
            .transpose()
    }

    /// Checks that the item sits under the key its id maps to (when the item carries its key:
    /// always, except in hand-built test items). A mismatch means every keyed operation on the
    /// id would reach another item, so the item is corrupt rather than read as that id.
    fn owns_key(&self, expected_pk: &str, id_attr: &str) -> Result<(), StoreError> {
        match self.item.get(PK) {
            Some(AttributeValue::S(pk)) if pk != expected_pk => Err(self.corrupt(format!(
                "attribute {id_attr} does not match the item's key {pk:?} (expected {expected_pk:?})"
            ))),
            _ => Ok(()),
        }
    }

    /// Whether the item's TTL has passed: DynamoDB deletes expired items lazily (within days),
    /// so reads must treat them as gone themselves.
    pub fn expired(&self, now_secs: i64) -> Result<bool, StoreError> {
        Ok(self.opt_num::<i64>(TTL)?.is_some_and(|t| t <= now_secs))
    }
}

/// A run status as stored.
pub fn status_value(status: RunStatus) -> AttributeValue {
    s(status.as_str())
}

fn error_value(error: &RunError) -> AttributeValue {
    let mut m = HashMap::from([("message".to_string(), s(&error.message))]);
    if let Some(code) = &error.code {
        m.insert("code".into(), s(code));
    }
    AttributeValue::M(m)
}

/// The attribute a [`RunPatch`](reaper_core::RunPatch) field sets, by field.
pub fn run_error_value(error: &RunError) -> AttributeValue {
    error_value(error)
}

/// The full item of a new run record, index attributes included.
pub fn run_item(r: &RunRecord) -> Item {
    let mut item = key(run_pk(&r.run_id), RUN_SK);
    item.insert(ENTITY.into(), s("run"));
    item.insert(run::RUN_ID.into(), s(&r.run_id));
    item.insert(run::THREAD_ID.into(), s(&r.thread_id));
    item.insert(run::STATUS.into(), status_value(r.status));
    item.insert(run::STARTED_AT.into(), n(r.started_at));
    item.insert(GSI2_PK.into(), s(thread_gsi_pk(&r.thread_id)));
    item.insert(GSI2_SK.into(), n(r.started_at));
    if let Some(v) = r.finished_at {
        item.insert(run::FINISHED_AT.into(), n(v));
    }
    if let Some(v) = &r.error {
        item.insert(run::ERROR.into(), error_value(v));
    }
    if let Some(v) = &r.usage {
        item.insert(run::USAGE.into(), json_to_attr(v));
    }
    if let Some(v) = &r.sandbox_key {
        item.insert(run::SANDBOX_KEY.into(), s(v));
    }
    if let Some(v) = r.detached_since {
        item.insert(run::DETACHED_SINCE.into(), n(v));
    }
    if let Some(v) = r.cancel_requested {
        item.insert(run::CANCEL_REQUESTED.into(), AttributeValue::Bool(v));
    }
    if let Some(v) = r.driver_epoch {
        item.insert(run::DRIVER_EPOCH.into(), n(v));
    }
    if let (true, Some(d)) = (indexed(r.status, r.detached_since), r.detached_since) {
        item.insert(GSI1_PK.into(), s(DETACHED));
        item.insert(GSI1_SK.into(), n(d));
    }
    if let (true, Some(k)) = (
        sandbox_indexed(r.status, r.sandbox_key.as_deref()),
        &r.sandbox_key,
    ) {
        item.insert(GSI3_PK.into(), s(sandbox_gsi_pk(k)));
    }
    item
}

/// The run id an item belongs to, for naming it in errors even when `runId` is missing.
pub fn run_id_of(item: &Item) -> String {
    match (item.get(run::RUN_ID), item.get(PK)) {
        (Some(AttributeValue::S(id)), _) => id.clone(),
        (_, Some(AttributeValue::S(pk))) => pk.strip_prefix("RUN#").unwrap_or(pk).to_string(),
        _ => "<no key>".to_string(),
    }
}

/// Parses a run item. Unknown status strings, missing required attributes and wrongly typed
/// attributes are [`StoreError::Corrupt`] naming the run: never read as something else.
pub fn run_from_item(item: &Item) -> Result<RunRecord, StoreError> {
    let r = Reader::new(item, run_id_of(item));
    let status = r.str(run::STATUS)?;
    let status =
        RunStatus::parse(&status).ok_or_else(|| r.corrupt(format!("unknown status {status:?}")))?;
    let error = match r.present(run::ERROR) {
        None => None,
        Some(AttributeValue::M(m)) => {
            let e = Reader::new(m, r.key.clone());
            Some(RunError {
                message: e.str("message")?,
                code: e.opt_str("code")?,
            })
        }
        Some(other) => return Err(r.corrupt(format!("attribute error is not a map: {other:?}"))),
    };
    let run_id = r.str(run::RUN_ID)?;
    r.owns_key(&run_pk(&run_id), run::RUN_ID)?;
    Ok(RunRecord {
        run_id,
        thread_id: r.str(run::THREAD_ID)?,
        status,
        started_at: r.num(run::STARTED_AT)?,
        finished_at: r.opt_num(run::FINISHED_AT)?,
        error,
        usage: r.opt_json(run::USAGE)?,
        sandbox_key: r.opt_str(run::SANDBOX_KEY)?,
        detached_since: r.opt_num(run::DETACHED_SINCE)?,
        cancel_requested: r.opt_bool(run::CANCEL_REQUESTED)?,
        driver_epoch: r.opt_num(run::DRIVER_EPOCH)?,
    })
}

/// A sandbox instance record as an item.
pub fn sandbox_item(rec: &SandboxInstanceRecord) -> Item {
    let mut item = key(sandbox_pk(&rec.key), SANDBOX_SK);
    item.insert(ENTITY.into(), s("sandbox"));
    item.insert("key".into(), s(&rec.key));
    item.insert("provider".into(), s(&rec.provider));
    item.insert("providerSandboxId".into(), s(&rec.provider_sandbox_id));
    item.insert("threadId".into(), s(&rec.thread_id));
    item.insert("updatedAt".into(), n(rec.updated_at));
    if let Some(v) = &rec.latest_snapshot_id {
        item.insert("latestSnapshotId".into(), s(v));
    }
    if let Some(v) = &rec.latest_run_id {
        item.insert("latestRunId".into(), s(v));
    }
    item
}

/// A sandbox instance record from its item; a malformed item is `Corrupt`.
pub fn sandbox_from_item(item: &Item, key: &str) -> Result<SandboxInstanceRecord, StoreError> {
    let r = Reader::new(item, format!("sandbox {key}"));
    Ok(SandboxInstanceRecord {
        key: r.str("key")?,
        provider: r.str("provider")?,
        provider_sandbox_id: r.str("providerSandboxId")?,
        latest_snapshot_id: r.opt_str("latestSnapshotId")?,
        thread_id: r.str("threadId")?,
        latest_run_id: r.opt_str("latestRunId")?,
        updated_at: r.num("updatedAt")?,
    })
}

/// A transcript as an item.
pub fn transcript_item(t: &Transcript) -> Item {
    let mut item = key(run_pk(&t.run_id), TRANSCRIPT_SK);
    item.insert(ENTITY.into(), s("transcript"));
    item.insert("runId".into(), s(&t.run_id));
    item.insert("threadId".into(), s(&t.thread_id));
    item.insert("savedAt".into(), n(t.saved_at));
    if let Some(code) = t.exit_code {
        item.insert("exitCode".into(), n(code));
    }
    let messages = t
        .messages
        .iter()
        .map(|m| {
            AttributeValue::M(HashMap::from([
                ("role".to_string(), s(&m.role)),
                ("content".to_string(), s(&m.content)),
            ]))
        })
        .collect();
    item.insert("messages".into(), AttributeValue::L(messages));
    item
}

/// A transcript from its item; a malformed item is `Corrupt`.
pub fn transcript_from_item(item: &Item, run_id: &str) -> Result<Transcript, StoreError> {
    let key = format!("transcript {run_id}");
    let r = Reader::new(item, key.clone());
    let messages = match r.present("messages") {
        None => Vec::new(),
        Some(AttributeValue::L(list)) => list
            .iter()
            .map(|m| match m {
                AttributeValue::M(m) => {
                    let m = Reader::new(m, key.clone());
                    Ok(TranscriptMessage {
                        role: m.str("role")?,
                        content: m.str("content")?,
                    })
                }
                other => Err(r.corrupt(format!("a message is not a map: {other:?}"))),
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(r.corrupt(format!("attribute messages is not a list: {other:?}")))
        }
    };
    Ok(Transcript {
        run_id: r.str("runId")?,
        thread_id: r.str("threadId")?,
        messages,
        exit_code: r.opt_num("exitCode")?,
        saved_at: r.num("savedAt")?,
    })
}

/// The item of a reclaim-ledger entry, in the sparse index under [`RECLAIM`] by
/// `nextAttemptAt`. A whole item, so a `PutItem` of it replaces every attribute (clearing
/// optional ones the intent no longer has).
pub fn intent_item(i: &ReclaimIntent) -> Item {
    let mut item = key(reclaim_pk(&i.run_id), RECLAIM_SK);
    item.insert(ENTITY.into(), s("reclaim"));
    item.insert(intent::RUN_ID.into(), s(&i.run_id));
    item.insert(intent::FIRST_SEEN.into(), n(i.first_seen));
    item.insert(intent::ATTEMPTS.into(), n(i.attempts));
    item.insert(intent::NEXT_ATTEMPT_AT.into(), n(i.next_attempt_at));
    for (name, value) in [
        (intent::SANDBOX_KEY, &i.sandbox_key),
        (intent::PROVIDER, &i.provider),
        (intent::PROVIDER_SANDBOX_ID, &i.provider_sandbox_id),
        (intent::LAST_ERROR, &i.last_error),
    ] {
        if let Some(v) = value {
            item.insert(name.into(), s(v));
        }
    }
    item.insert(GSI1_PK.into(), s(RECLAIM));
    item.insert(GSI1_SK.into(), n(i.next_attempt_at));
    item
}

/// How a reclaim-ledger entry is named in errors: by its run id, or by its key when the run
/// id itself is unreadable.
pub fn intent_key_of(item: &Item) -> String {
    let id = match (item.get(intent::RUN_ID), item.get(PK)) {
        (Some(AttributeValue::S(id)), _) => id.clone(),
        (_, Some(AttributeValue::S(pk))) => pk.strip_prefix("RECLAIM#").unwrap_or(pk).to_string(),
        _ => "<no key>".to_string(),
    };
    format!("reclaim intent {id}")
}

/// Parses a reclaim-ledger entry strictly: a missing or wrongly typed attribute, a number that
/// is fractional or out of range (a negative attempt count), an id that does not match its key,
/// or index attributes that disagree with `nextAttemptAt` (the entry would never, or wrongly,
/// be listed as due) are [`StoreError::Corrupt`] naming the entry.
pub fn intent_from_item(item: &Item) -> Result<ReclaimIntent, StoreError> {
    let r = Reader::new(item, intent_key_of(item));
    let run_id = r.str(intent::RUN_ID)?;
    r.owns_key(&reclaim_pk(&run_id), intent::RUN_ID)?;
    let next_attempt_at: EpochMs = r.num(intent::NEXT_ATTEMPT_AT)?;
    let indexed_under = r.opt_str(GSI1_PK)?;
    let indexed_at = r.opt_num::<EpochMs>(GSI1_SK)?;
    if indexed_under.as_deref() != Some(RECLAIM) || indexed_at != Some(next_attempt_at) {
        return Err(r.corrupt(format!(
            "index attributes {GSI1_PK}={indexed_under:?}, {GSI1_SK}={indexed_at:?} disagree with \
             nextAttemptAt {next_attempt_at} (expected {RECLAIM:?}, the same instant): no sweep \
             would retry it when due"
        )));
    }
    Ok(ReclaimIntent {
        sandbox_key: r.opt_str(intent::SANDBOX_KEY)?,
        provider: r.opt_str(intent::PROVIDER)?,
        provider_sandbox_id: r.opt_str(intent::PROVIDER_SANDBOX_ID)?,
        first_seen: r.num(intent::FIRST_SEEN)?,
        attempts: r.num(intent::ATTEMPTS)?,
        next_attempt_at,
        last_error: r.opt_str(intent::LAST_ERROR)?,
        run_id,
    })
}

/// JSON to a native DynamoDB value (so `usage` written by a JS app as a map reads back).
pub fn json_to_attr(v: &serde_json::Value) -> AttributeValue {
    use serde_json::Value;
    match v {
        Value::Null => AttributeValue::Null(true),
        Value::Bool(b) => AttributeValue::Bool(*b),
        Value::Number(num) => AttributeValue::N(num.to_string()),
        Value::String(st) => AttributeValue::S(st.clone()),
        Value::Array(a) => AttributeValue::L(a.iter().map(json_to_attr).collect()),
        Value::Object(o) => AttributeValue::M(
            o.iter()
                .map(|(k, v)| (k.clone(), json_to_attr(v)))
                .collect(),
        ),
    }
}

/// An attribute value as JSON (the inverse of how chunks and usage are stored).
pub fn attr_to_json(v: &AttributeValue) -> Result<serde_json::Value, String> {
    use serde_json::Value;
    let number = |raw: &str| -> Result<Value, String> {
        raw.parse::<i64>()
            .map(Value::from)
            .or_else(|_| raw.parse::<u64>().map(Value::from))
            .ok()
            .or_else(|| {
                raw.parse::<f64>()
                    .ok()
                    .and_then(serde_json::Number::from_f64)
                    .map(Value::Number)
            })
            .ok_or_else(|| format!("number {raw} does not fit JSON"))
    };
    Ok(match v {
        AttributeValue::Null(_) => Value::Null,
        AttributeValue::Bool(b) => Value::Bool(*b),
        AttributeValue::N(raw) => number(raw)?,
        AttributeValue::S(st) => Value::String(st.clone()),
        AttributeValue::L(list) => {
            Value::Array(list.iter().map(attr_to_json).collect::<Result<_, _>>()?)
        }
        AttributeValue::M(m) => Value::Object(
            m.iter()
                .map(|(k, v)| Ok((k.clone(), attr_to_json(v)?)))
                .collect::<Result<_, String>>()?,
        ),
        AttributeValue::Ss(set) => Value::Array(set.iter().cloned().map(Value::String).collect()),
        AttributeValue::Ns(set) => {
            Value::Array(set.iter().map(|x| number(x)).collect::<Result<_, _>>()?)
        }
        other => return Err(format!("unsupported attribute type {other:?}")),
    })
}
