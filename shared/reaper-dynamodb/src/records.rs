//! [`SandboxInstanceStore`] (`pk = SANDBOX#<key>`) and [`MessageStore`] (`pk = RUN#<runId>`,
//! `sk = TRANSCRIPT`). Neither carries a TTL: transcripts must outlive the log's events.

use aws_sdk_dynamodb::types::{Put, ReturnConsumedCapacity, TransactWriteItem};
use reaper_core::{
    Fenced, MessageStore, SandboxInstanceRecord, SandboxInstanceStore, StoreError, Transcript,
};

use crate::layout::{
    key, run_pk, sandbox_from_item, sandbox_item, sandbox_pk, transcript_from_item,
    transcript_item, SANDBOX_SK, TRANSCRIPT_SK,
};
use crate::store::DynamoStore;

#[async_trait::async_trait]
impl SandboxInstanceStore for DynamoStore {
    async fn get(&self, key_name: &str) -> Result<Option<SandboxInstanceRecord>, StoreError> {
        let res = self
            .client
            .get_item()
            .table_name(self.table_name())
            .set_key(Some(key(sandbox_pk(key_name), SANDBOX_SK)))
            .consistent_read(true)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        self.track("sandbox_get", &res);
        res.map_err(|e| self.map_err("GetItem", e))?
            .item
            .map(|item| sandbox_from_item(&item, key_name))
            .transpose()
    }

    async fn upsert(&self, record: SandboxInstanceRecord) -> Result<(), StoreError> {
        let res = self
            .client
            .put_item()
            .table_name(self.table_name())
            .set_item(Some(sandbox_item(&record)))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        self.track("sandbox_upsert", &res);
        res.map_err(|e| self.map_err("PutItem", e))?;
        Ok(())
    }

    async fn delete(&self, key_name: &str) -> Result<(), StoreError> {
        let res = self
            .client
            .delete_item()
            .table_name(self.table_name())
            .set_key(Some(key(sandbox_pk(key_name), SANDBOX_SK)))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        self.track("sandbox_delete", &res);
        res.map_err(|e| self.map_err("DeleteItem", e))?;
        Ok(())
    }
}

#[async_trait::async_trait]
impl MessageStore for DynamoStore {
    async fn save_transcript(
        &self,
        transcript: &Transcript,
        fence: Option<u64>,
    ) -> Result<Fenced<()>, StoreError> {
        if let Some(held) = fence {
            let put = Put::builder()
                .table_name(self.table_name())
                .set_item(Some(transcript_item(transcript)))
                .build()
                .map_err(|e| {
                    StoreError::Backend(format!(
                        "building the transcript save of run {}: {e}",
                        transcript.run_id
                    ))
                })?;
            let write = TransactWriteItem::builder().put(put).build();
            return self
                .fenced_write("save_transcript", &transcript.run_id, held, write)
                .await;
        }
        let res = self
            .client
            .put_item()
            .table_name(self.table_name())
            .set_item(Some(transcript_item(transcript)))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        self.track("save_transcript", &res);
        res.map_err(|e| self.map_err("PutItem", e))?;
        Ok(Fenced::Written(()))
    }

    async fn get_transcript(&self, run_id: &str) -> Result<Option<Transcript>, StoreError> {
        let res = self
            .client
            .get_item()
            .table_name(self.table_name())
            .set_key(Some(key(run_pk(run_id), TRANSCRIPT_SK)))
            .consistent_read(true)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        self.track("get_transcript", &res);
        res.map_err(|e| self.map_err("GetItem", e))?
            .item
            .map(|item| transcript_from_item(&item, run_id))
            .transpose()
    }
}
