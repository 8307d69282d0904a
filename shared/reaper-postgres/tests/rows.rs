//! Rows an application wrote wrongly, and the epoch fence on the writes beyond the ports'
//! own (the log's close, the transcript, a run patch).

#[cfg(reaper_test_postgres)]
mod common;

#[cfg(not(reaper_test_postgres))]
#[test]
fn rows_need_a_postgres() {
    eprintln!("skipped: REAPER_TEST_POSTGRES_URL was not set when this test was built");
}

#[cfg(reaper_test_postgres)]
mod on_a_server {
    use super::common::{self, raw_client};
    use reaper_core::{
        DeliveryLog, EpochBump, Fenced, MessageStore, NewRun, Patch, ReclaimableQuery, RunPatch,
        RunStore, StoreError, Transcript,
    };

    #[tokio::test]
    async fn malformed_rows_are_reported_in_corrupt_and_the_others_still_listed() {
        let store = common::fresh_store("malformed").await;
        let c = raw_client().await;
        // An application that dropped the schema's checks and wrote what they would refuse.
        c.batch_execute(&store.sql(
            "ALTER TABLE @.runs DROP CONSTRAINT runs_status_check; \
             INSERT INTO @.runs (run_id, thread_id, started_at, detached_since, status) VALUES \
             ('a-good', 't', 1, 10, 'running'), \
             ('b-status', 't', 1, 11, 'running'), \
             ('c-instant', 't', 1, -5, 'running'), \
             ('d-good', 't', 1, 12, 'running'); \
             UPDATE @.runs SET status = 'toString' WHERE run_id = 'b-status'",
        ))
        .await
        .unwrap();
        // 'c-instant' matches the listing but does not decode; 'b-status' is no longer
        // 'running', so only a lookup by id meets it.
        let page = store
            .list_reclaimable_page(ReclaimableQuery {
                detached_after: None,
                detached_until: 100,
                after: None,
                limit: 10,
            })
            .await
            .unwrap();
        let ids: Vec<&str> = page.runs.iter().map(|r| r.run_id.as_str()).collect();
        assert_eq!(ids, ["a-good", "d-good"]);
        assert_eq!(page.corrupt.len(), 1, "{:?}", page.corrupt);
        match &page.corrupt[0] {
            StoreError::Corrupt { key, reason } => {
                assert_eq!(key, "c-instant");
                assert!(reason.contains("detached_since is -5"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        match store.get("b-status").await {
            Err(StoreError::Corrupt { key, reason }) => {
                assert_eq!(key, "b-status");
                assert!(reason.contains("\"toString\""), "{reason}");
            }
            other => panic!("an unknown status must be corrupt, got {other:?}"),
        }
    }

    async fn claimed_twice(store: &reaper_postgres::PostgresStore, run_id: &str) -> u64 {
        store
            .create_or_resume(NewRun {
                run_id: run_id.into(),
                thread_id: "t".into(),
                started_at: 1,
                status: None,
            })
            .await
            .unwrap();
        store.bump_epoch(run_id).await.unwrap();
        match store.bump_epoch(run_id).await.unwrap() {
            EpochBump::Claimed { epoch, .. } => epoch,
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_superseded_holder_can_neither_close_the_log_nor_save_the_transcript() {
        let store = common::fresh_store("fence").await;
        let epoch = claimed_twice(&store, "r").await;
        let stale = epoch - 1;
        assert_eq!(
            store.close("r", Some(stale), 0).await.unwrap(),
            Fenced::Superseded { observed: epoch }
        );
        assert!(!store.snapshot("r").await.unwrap().closed);
        let transcript = Transcript {
            run_id: "r".into(),
            thread_id: "t".into(),
            messages: vec![],
            exit_code: Some(0),
            saved_at: 9,
        };
        assert_eq!(
            store
                .save_transcript(&transcript, Some(stale))
                .await
                .unwrap(),
            Fenced::Superseded { observed: epoch }
        );
        assert_eq!(store.get_transcript("r").await.unwrap(), None);
        // The holder of the current epoch lands both.
        assert_eq!(
            store
                .save_transcript(&transcript, Some(epoch))
                .await
                .unwrap(),
            Fenced::Written(())
        );
        assert_eq!(
            store.close("r", Some(epoch), 0).await.unwrap(),
            Fenced::Written(())
        );
        assert!(store.snapshot("r").await.unwrap().closed);
        assert!(store.get_transcript("r").await.unwrap().is_some());
    }

    #[tokio::test]
    async fn a_superseded_holder_cannot_patch_the_run() {
        let store = common::fresh_store("fencepatch").await;
        let epoch = claimed_twice(&store, "r").await;
        let patch = RunPatch {
            detached_since: Patch::Set(77),
            ..Default::default()
        };
        assert_eq!(
            store
                .update_fenced("r", epoch - 1, patch.clone())
                .await
                .unwrap(),
            Fenced::Superseded { observed: epoch }
        );
        assert_eq!(store.get("r").await.unwrap().unwrap().detached_since, None);
        assert_eq!(
            store
                .update_fenced("r", epoch, patch.clone())
                .await
                .unwrap(),
            Fenced::Written(true)
        );
        assert_eq!(
            store.get("r").await.unwrap().unwrap().detached_since,
            Some(77)
        );
        assert_eq!(
            store.update_fenced("missing", 1, patch).await.unwrap(),
            Fenced::Written(false)
        );
    }

    /// The fence and the append are one transaction with the run row locked: once a claim's
    /// bump has returned, no append fenced on the older epoch lands, however the two interleave.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_append_fenced_on_an_older_epoch_lands_after_the_claim_that_superseded_it() {
        let store = std::sync::Arc::new(*common::fresh_store("race").await);
        for round in 0..20 {
            let run_id = format!("r{round}");
            store
                .create_or_resume(NewRun {
                    run_id: run_id.clone(),
                    thread_id: "t".into(),
                    started_at: 1,
                    status: None,
                })
                .await
                .unwrap();
            let EpochBump::Claimed { epoch, .. } = store.bump_epoch(&run_id).await.unwrap() else {
                panic!("claim")
            };
            let appender = {
                let (store, run_id) = (store.clone(), run_id.clone());
                tokio::spawn(async move {
                    for i in 0.. {
                        let chunk =
                            reaper_core::Chunk::from_json(&format!("{{\"i\":{i}}}")).unwrap();
                        match store
                            .append(&run_id, Some(epoch), vec![chunk], 1)
                            .await
                            .unwrap()
                        {
                            Fenced::Written(_) => tokio::task::yield_now().await,
                            Fenced::Superseded { .. } => return i,
                        }
                    }
                    unreachable!()
                })
            };
            tokio::task::yield_now().await;
            store.bump_epoch(&run_id).await.unwrap();
            let after_bump = store.snapshot(&run_id).await.unwrap().len;
            appender.await.unwrap();
            let at_end = store.snapshot(&run_id).await.unwrap().len;
            assert_eq!(
                at_end, after_bump,
                "round {round}: an append fenced on epoch {epoch} landed after the claim"
            );
        }
    }
}
