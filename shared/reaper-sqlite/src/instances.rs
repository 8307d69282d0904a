//! The `sandbox_instances` and `transcripts` tables: [`SandboxInstanceStore`] and
//! [`MessageStore`].

use reaper_core::{
    Fenced, MessageStore, SandboxInstanceRecord, SandboxInstanceStore, StoreError, Transcript,
    TranscriptMessage,
};
use reaper_sql::{sandbox_instances, transcripts};
use rusqlite::{params, OptionalExtension};

use crate::error::{corrupt, store_err, store_err_for};
use crate::{fenced_outcome, immediate, to_i64, SqliteStore};

#[async_trait::async_trait]
impl SandboxInstanceStore for SqliteStore {
    async fn get(&self, key: &str) -> Result<Option<SandboxInstanceRecord>, StoreError> {
        let key = key.to_string();
        self.call(move |c| {
            c.prepare_cached(sandbox_instances::SELECT_BY_KEY)
                .and_then(|mut s| {
                    s.query_row([&key], |r| {
                        Ok(SandboxInstanceRecord {
                            key: r.get(0)?,
                            provider: r.get(1)?,
                            provider_sandbox_id: r.get(2)?,
                            latest_snapshot_id: r.get(3)?,
                            thread_id: r.get(4)?,
                            latest_run_id: r.get(5)?,
                            updated_at: r.get(6)?,
                        })
                    })
                    .optional()
                })
                .map_err(store_err_for(&format!("sandbox instance {key}")))
        })
        .await
    }

    async fn upsert(&self, record: SandboxInstanceRecord) -> Result<(), StoreError> {
        self.call(move |c| {
            c.prepare_cached(sandbox_instances::UPSERT)
                .and_then(|mut s| {
                    s.execute(params![
                        record.key,
                        record.provider,
                        record.provider_sandbox_id,
                        record.latest_snapshot_id,
                        record.thread_id,
                        record.latest_run_id,
                        record.updated_at
                    ])
                })
                .map_err(store_err)?;
            Ok(())
        })
        .await
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        let key = key.to_string();
        self.call(move |c| {
            c.prepare_cached(sandbox_instances::DELETE)
                .and_then(|mut s| s.execute([&key]))
                .map_err(store_err)?;
            Ok(())
        })
        .await
    }
}

#[async_trait::async_trait]
impl MessageStore for SqliteStore {
    async fn save_transcript(
        &self,
        transcript: &Transcript,
        fence: Option<u64>,
    ) -> Result<Fenced<()>, StoreError> {
        let body = serde_json::to_string(&transcript.messages)
            .map_err(|e| StoreError::Backend(format!("transcript does not serialise: {e}")))?;
        let t = transcript.clone();
        let held = fence.map(to_i64);
        self.call(move |c| {
            // The fence is in the statement; the transaction keeps the follow-up read of the
            // epoch consistent with it.
            immediate(c, |tx| {
                let changed = tx
                    .prepare_cached(transcripts::SAVE_FENCED)
                    .and_then(|mut s| {
                        s.execute(params![
                            t.run_id,
                            t.thread_id,
                            body,
                            t.exit_code,
                            t.saved_at,
                            held
                        ])
                    })
                    .map_err(store_err)?;
                fenced_outcome(tx, &t.run_id, fence, changed)
            })
        })
        .await
    }

    async fn get_transcript(&self, run_id: &str) -> Result<Option<Transcript>, StoreError> {
        let run_id = run_id.to_string();
        self.call(move |c| {
            let key = format!("transcript {run_id}");
            let row: Option<(String, String, Option<i64>, i64)> = c
                .prepare_cached(transcripts::SELECT_BY_RUN)
                .and_then(|mut s| {
                    s.query_row([&run_id], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                    })
                    .optional()
                })
                .map_err(store_err_for(&key))?;
            let Some((thread_id, body, exit_code, saved_at)) = row else {
                return Ok(None);
            };
            let messages: Vec<TranscriptMessage> = serde_json::from_str(&body)
                .map_err(|e| corrupt(&key, transcripts::body_not_messages(e)))?;
            Ok(Some(Transcript {
                run_id,
                thread_id,
                messages,
                exit_code,
                saved_at,
            }))
        })
        .await
    }
}
