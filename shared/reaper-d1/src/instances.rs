//! The `sandbox_instances` and `transcripts` tables: [`SandboxInstanceStore`] and
//! [`MessageStore`].

use reaper_core::{
    MessageStore, SandboxInstanceRecord, SandboxInstanceStore, StoreError, Transcript,
    TranscriptMessage,
};

use crate::client::Statement;
use crate::row::{corrupt, RowExt};
use crate::D1Store;

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl SandboxInstanceStore for D1Store {
    async fn get(&self, key: &str) -> Result<Option<SandboxInstanceRecord>, StoreError> {
        let rows = self
            .one(Statement::new(
                "SELECT key, provider, provider_sandbox_id, latest_snapshot_id, thread_id, \
                 latest_run_id, updated_at FROM sandbox_instances WHERE key = ?1",
                vec![key.into()],
            ))
            .await?;
        let Some(r) = rows.first() else {
            return Ok(None);
        };
        let what = format!("sandbox instance {key}");
        Ok(Some(SandboxInstanceRecord {
            key: r.text("key", &what)?,
            provider: r.text("provider", &what)?,
            provider_sandbox_id: r.text("provider_sandbox_id", &what)?,
            latest_snapshot_id: r.opt_text("latest_snapshot_id", &what)?,
            thread_id: r.text("thread_id", &what)?,
            latest_run_id: r.opt_text("latest_run_id", &what)?,
            updated_at: r.int("updated_at", &what)?,
        }))
    }

    async fn upsert(&self, record: SandboxInstanceRecord) -> Result<(), StoreError> {
        // A full replace: every column is written, absent optionals as NULL.
        self.one(Statement::new(
            "INSERT INTO sandbox_instances (key, provider, provider_sandbox_id, \
             latest_snapshot_id, thread_id, latest_run_id, updated_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
             ON CONFLICT (key) DO UPDATE SET provider = excluded.provider, \
             provider_sandbox_id = excluded.provider_sandbox_id, \
             latest_snapshot_id = excluded.latest_snapshot_id, \
             thread_id = excluded.thread_id, latest_run_id = excluded.latest_run_id, \
             updated_at = excluded.updated_at",
            vec![
                record.key.into(),
                record.provider.into(),
                record.provider_sandbox_id.into(),
                record.latest_snapshot_id.into(),
                record.thread_id.into(),
                record.latest_run_id.into(),
                record.updated_at.into(),
            ],
        ))
        .await?;
        Ok(())
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.one(Statement::new(
            "DELETE FROM sandbox_instances WHERE key = ?1",
            vec![key.into()],
        ))
        .await?;
        Ok(())
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl MessageStore for D1Store {
    async fn save_transcript(&self, transcript: &Transcript) -> Result<(), StoreError> {
        let body = serde_json::to_string(&transcript.messages)
            .map_err(|e| StoreError::Backend(format!("transcript does not serialise: {e}")))?;
        self.one(Statement::new(
            "INSERT INTO transcripts (run_id, thread_id, body, exit_code, saved_at) \
             VALUES (?1, ?2, ?3, ?4, ?5) \
             ON CONFLICT (run_id) DO UPDATE SET thread_id = excluded.thread_id, \
             body = excluded.body, exit_code = excluded.exit_code, \
             saved_at = excluded.saved_at",
            vec![
                transcript.run_id.as_str().into(),
                transcript.thread_id.as_str().into(),
                body.into(),
                transcript.exit_code.into(),
                transcript.saved_at.into(),
            ],
        ))
        .await?;
        Ok(())
    }

    async fn get_transcript(&self, run_id: &str) -> Result<Option<Transcript>, StoreError> {
        let rows = self
            .one(Statement::new(
                "SELECT thread_id, body, exit_code, saved_at FROM transcripts WHERE run_id = ?1",
                vec![run_id.into()],
            ))
            .await?;
        let Some(r) = rows.first() else {
            return Ok(None);
        };
        let key = format!("transcript {run_id}");
        let messages: Vec<TranscriptMessage> = serde_json::from_str(&r.text("body", &key)?)
            .map_err(|e| {
                corrupt(
                    &key,
                    format!("body is not a JSON array of {{role, content}}: {e}"),
                )
            })?;
        Ok(Some(Transcript {
            run_id: run_id.to_string(),
            thread_id: r.text("thread_id", &key)?,
            messages,
            exit_code: r.opt_int("exit_code", &key)?,
            saved_at: r.int("saved_at", &key)?,
        }))
    }
}
