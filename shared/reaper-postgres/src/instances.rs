//! The `sandbox_instances` and `transcripts` tables: [`SandboxInstanceStore`] and
//! [`MessageStore`].

use reaper_core::{
    Fenced, MessageStore, SandboxInstanceRecord, SandboxInstanceStore, StoreError, Transcript,
    TranscriptMessage,
};

use crate::error::corrupt;
use crate::{Conn, PostgresStore};

const SELECT_INSTANCE: &str = "SELECT key, provider, provider_sandbox_id, latest_snapshot_id, \
                               thread_id, latest_run_id, updated_at \
                               FROM @.sandbox_instances WHERE key = $1";

const UPSERT_INSTANCE: &str = "INSERT INTO @.sandbox_instances (key, provider, \
                               provider_sandbox_id, latest_snapshot_id, thread_id, \
                               latest_run_id, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7) \
                               ON CONFLICT (key) DO UPDATE SET provider = excluded.provider, \
                               provider_sandbox_id = excluded.provider_sandbox_id, \
                               latest_snapshot_id = excluded.latest_snapshot_id, \
                               thread_id = excluded.thread_id, \
                               latest_run_id = excluded.latest_run_id, \
                               updated_at = excluded.updated_at";

const DELETE_INSTANCE: &str = "DELETE FROM @.sandbox_instances WHERE key = $1";

const SAVE_TRANSCRIPT: &str = "INSERT INTO @.transcripts (run_id, thread_id, body, exit_code, \
                               saved_at) VALUES ($1, $2, $3::text::json, $4, $5) \
                               ON CONFLICT (run_id) DO UPDATE SET thread_id = excluded.thread_id, \
                               body = excluded.body, exit_code = excluded.exit_code, \
                               saved_at = excluded.saved_at";

const SELECT_TRANSCRIPT: &str = "SELECT thread_id, body::text, exit_code, saved_at \
                                 FROM @.transcripts WHERE run_id = $1";

#[async_trait::async_trait]
impl SandboxInstanceStore for PostgresStore {
    async fn get(&self, key: &str) -> Result<Option<SandboxInstanceRecord>, StoreError> {
        let client = self.client().await?;
        Ok(self
            .query_opt(Conn::Pooled(&client), SELECT_INSTANCE, &[&key])
            .await?
            .map(|r| SandboxInstanceRecord {
                key: r.get(0),
                provider: r.get(1),
                provider_sandbox_id: r.get(2),
                latest_snapshot_id: r.get(3),
                thread_id: r.get(4),
                latest_run_id: r.get(5),
                updated_at: r.get(6),
            }))
    }

    async fn upsert(&self, r: SandboxInstanceRecord) -> Result<(), StoreError> {
        let client = self.client().await?;
        self.execute(
            Conn::Pooled(&client),
            UPSERT_INSTANCE,
            &[
                &r.key,
                &r.provider,
                &r.provider_sandbox_id,
                &r.latest_snapshot_id,
                &r.thread_id,
                &r.latest_run_id,
                &r.updated_at,
            ],
        )
        .await?;
        self.committed(true);
        Ok(())
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        let client = self.client().await?;
        let n = self
            .execute(Conn::Pooled(&client), DELETE_INSTANCE, &[&key])
            .await?;
        self.committed(n > 0);
        Ok(())
    }
}

#[async_trait::async_trait]
impl MessageStore for PostgresStore {
    /// With a fence, the epoch check and the save share one transaction and the run row stays
    /// locked against a claim until it commits.
    async fn save_transcript(
        &self,
        transcript: &Transcript,
        fence: Option<u64>,
    ) -> Result<Fenced<()>, StoreError> {
        let body = serde_json::to_string(&transcript.messages)
            .map_err(|e| StoreError::Backend(format!("transcript does not serialise: {e}")))?;
        let t = transcript;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
            [&t.run_id, &t.thread_id, &body, &t.exit_code, &t.saved_at];
        let mut client = self.client().await?;
        if fence.is_none() {
            self.execute(Conn::Pooled(&client), SAVE_TRANSCRIPT, &params)
                .await?;
            self.committed(true);
            return Ok(Fenced::Written(()));
        }
        let tx = self.begin(&mut client).await?;
        if let Some(observed) = self.superseding_epoch(&tx, &t.run_id, fence).await? {
            self.commit(tx, false).await?;
            return Ok(Fenced::Superseded { observed });
        }
        self.execute(Conn::Tx(&tx), SAVE_TRANSCRIPT, &params)
            .await?;
        self.commit(tx, true).await?;
        Ok(Fenced::Written(()))
    }

    async fn get_transcript(&self, run_id: &str) -> Result<Option<Transcript>, StoreError> {
        let client = self.client().await?;
        let Some(row) = self
            .query_opt(Conn::Pooled(&client), SELECT_TRANSCRIPT, &[&run_id])
            .await?
        else {
            return Ok(None);
        };
        let key = format!("transcript {run_id}");
        let body: String = row.get(1);
        let messages: Vec<TranscriptMessage> = serde_json::from_str(&body)
            .map_err(|e| corrupt(&key, reaper_sql::transcripts::body_not_messages(e)))?;
        Ok(Some(Transcript {
            run_id: run_id.to_string(),
            thread_id: row.get(0),
            messages,
            exit_code: row.get(2),
            saved_at: row.get(3),
        }))
    }
}
