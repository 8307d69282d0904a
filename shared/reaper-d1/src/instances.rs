//! The `sandbox_instances` and `transcripts` tables: [`SandboxInstanceStore`] and
//! [`MessageStore`].

use reaper_core::{
    Fenced, MessageStore, SandboxInstanceRecord, SandboxInstanceStore, StoreError, Transcript,
    TranscriptMessage,
};

use reaper_sql::{sandbox_instances, transcripts};

use crate::client::Statement;
use crate::row::{corrupt, safe_u, RowExt};
use crate::D1Store;

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl SandboxInstanceStore for D1Store {
    async fn get(&self, key: &str) -> Result<Option<SandboxInstanceRecord>, StoreError> {
        let rows = self
            .one(Statement::new(
                sandbox_instances::SELECT_BY_KEY,
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
            sandbox_instances::UPSERT,
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
        self.one(Statement::new(sandbox_instances::DELETE, vec![key.into()]))
            .await?;
        Ok(())
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl MessageStore for D1Store {
    async fn save_transcript(
        &self,
        transcript: &Transcript,
        fence: Option<u64>,
    ) -> Result<Fenced<()>, StoreError> {
        let body = serde_json::to_string(&transcript.messages)
            .map_err(|e| StoreError::Backend(format!("transcript does not serialise: {e}")))?;
        let save = Statement::new(
            transcripts::SAVE_FENCED,
            vec![
                transcript.run_id.as_str().into(),
                transcript.thread_id.as_str().into(),
                body.into(),
                transcript.exit_code.into(),
                transcript.saved_at.into(),
                fence.map(safe_u).into(),
            ],
        );
        self.fenced(save, &transcript.run_id, fence).await
    }

    async fn get_transcript(&self, run_id: &str) -> Result<Option<Transcript>, StoreError> {
        let rows = self
            .one(Statement::new(
                transcripts::SELECT_BY_RUN,
                vec![run_id.into()],
            ))
            .await?;
        let Some(r) = rows.first() else {
            return Ok(None);
        };
        let key = format!("transcript {run_id}");
        let messages: Vec<TranscriptMessage> = serde_json::from_str(&r.text("body", &key)?)
            .map_err(|e| corrupt(&key, transcripts::body_not_messages(e)))?;
        Ok(Some(Transcript {
            run_id: run_id.to_string(),
            thread_id: r.text("thread_id", &key)?,
            messages,
            exit_code: r.opt_int("exit_code", &key)?,
            saved_at: r.int("saved_at", &key)?,
        }))
    }
}
