//! Damage on PostgreSQL (issue 24): a reaper table dropped under a running store, and pages the
//! server reports corrupted (`XX001`/`XX002`), are damage (`Corrupt` keyed `database`), which
//! the sweep's latch stops at; not a run error. Needs `REAPER_TEST_POSTGRES_URL`.

mod common;

use common::{fresh_store, raw_client};
use reaper_core::damage::is_damaged;
use reaper_core::{
    Chunk, DeliveryLog, MessageStore, NewRun, ReclaimIntent, ReclaimLedger, RunStore,
    SandboxInstanceStore, StoreError, Transcript,
};
use reaper_postgres::PostgresStore;

async fn seeded(tag: &str) -> Box<PostgresStore> {
    let store = fresh_store(tag).await;
    store
        .create_or_resume(NewRun {
            run_id: "r".into(),
            thread_id: "t".into(),
            started_at: 1,
            status: None,
        })
        .await
        .unwrap();
    store
}

/// One call that touches `table`.
async fn touch(store: &PostgresStore, table: &str) -> Result<(), StoreError> {
    match table {
        "runs" => RunStore::get(store, "r").await.map(drop),
        "transcripts" => {
            let transcript = Transcript {
                run_id: "r".into(),
                thread_id: "t".into(),
                messages: vec![],
                exit_code: Some(0),
                saved_at: 2,
            };
            store.save_transcript(&transcript, None).await.map(drop)
        }
        "logs" | "log_entries" => store
            .append("r", None, vec![Chunk::text("x")], 2)
            .await
            .map(drop),
        "sandbox_instances" => SandboxInstanceStore::get(store, "k").await.map(drop),
        "reclaim_intents" => {
            let record = RunStore::get(store, "r").await?.expect("the seeded run");
            store
                .record_intent(&ReclaimIntent::new(&record, 2))
                .await
                .map(drop)
        }
        other => panic!("no call for {other}"),
    }
}

#[tokio::test]
async fn a_dropped_reaper_table_is_damage_for_each_table() {
    for table in [
        "runs",
        "transcripts",
        "logs",
        "log_entries",
        "sandbox_instances",
        "reclaim_intents",
    ] {
        let store = seeded(&format!("dropped_{table}")).await;
        raw_client()
            .await
            .batch_execute(&format!(
                "DROP TABLE \"{}\".{table} CASCADE",
                store.schema()
            ))
            .await
            .unwrap();
        let err = touch(&store, table)
            .await
            .expect_err(&format!("{table} is gone"));
        assert!(is_damaged(&err), "{table}: {err:?}");
    }
}

#[tokio::test]
async fn corrupted_pages_reported_by_the_server_are_damage() {
    for code in ["XX001", "XX002"] {
        let store = seeded(&format!("corrupted_{code}")).await;
        // Fault injection through the real server: the insert meets the error a damaged page
        // gives.
        raw_client()
            .await
            .batch_execute(&format!(
                "CREATE FUNCTION \"{s}\".corrupted() RETURNS trigger LANGUAGE plpgsql AS \
                 $$ BEGIN RAISE SQLSTATE '{code}' USING MESSAGE = 'invalid page in block 7'; END $$; \
                 CREATE TRIGGER corrupted BEFORE INSERT OR UPDATE ON \"{s}\".transcripts \
                 FOR EACH ROW EXECUTE FUNCTION \"{s}\".corrupted();",
                s = store.schema()
            ))
            .await
            .unwrap();
        let err = touch(&store, "transcripts").await.unwrap_err();
        assert!(is_damaged(&err), "{code}: {err:?}");
        assert!(err.to_string().contains(code), "{err}");
    }
}
