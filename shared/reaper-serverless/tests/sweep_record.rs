//! A Lambda or Vercel sweep (both run [`reaper_serverless::run_sweep`]) leaves its record in
//! the store, where a dashboard or `reaper status` on another host reads it. Against DynamoDB
//! Local (`REAPER_DYNAMODB_ENDPOINT`, see `reaper-dynamodb`'s README).

use reaper_core::{NewRun, Patch, RunPatch, RunStore};
use reaper_e2e::dynamo::fresh_store;
use reaper_e2e::util::now_ms;
use reaper_serverless::{compose, plan, run_sweep, ServerlessConfig};

#[tokio::test]
async fn a_serverless_sweep_s_record_with_its_outcome_counts_is_readable_from_the_store() {
    let store = fresh_store("reaper-serverless-sweeps").await;
    let table = store.table_name().to_string();
    let env = [
        ("REAPER_TABLE", table.as_str()),
        // Never reached: the run has no sandbox, so the sweep expires it without a provider.
        ("REAPER_SANDBOXD_URL", "http://127.0.0.1:9"),
        (
            "REAPER_SANDBOXD_TOKEN",
            "a-token-long-enough-for-the-check-0123456789",
        ),
        ("REAPER_DETACHED_TTL", "30m"),
    ];
    let config = ServerlessConfig::from_env(|name| {
        env.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
    })
    .expect("the settings");
    let now = now_ms();
    let hour_ago = now - 3_600_000;
    store
        .create_or_resume(NewRun {
            run_id: "run-expired".into(),
            thread_id: "thread-1".into(),
            started_at: hour_ago,
            status: None,
        })
        .await
        .unwrap();
    let detach = RunPatch {
        detached_since: Patch::Set(hour_ago),
        ..Default::default()
    };
    store.update("run-expired", detach).await.unwrap();

    let deps = compose(&config, store.clone()).expect("the deps");
    let report = run_sweep(&deps, &plan(&config, "lambda:req-1", now, now + 300_000)).await;
    assert_eq!(report.state(), "swept", "{:?}", report.sweep);
    assert!(report.sweep.report.history.sweep_recorded, "{report:?}");

    // What another host reads: the store's recent sweeps, newest first.
    let sweeps = store.recent_sweeps(10).await.unwrap();
    assert_eq!(sweeps.len(), 1, "{sweeps:?}");
    let record = &sweeps[0];
    assert_eq!(record.host, "lambda:req-1");
    assert_eq!(record.considered, 1);
    assert_eq!(record.outcomes.expired, 1);
    assert!(!record.failed && record.error.is_none(), "{record:?}");
    assert!(record.finished_at >= record.started_at);
    assert_eq!(
        store.run_history("run-expired", 10).await.unwrap()[0].sweep_id,
        record.sweep_id,
        "the run's history names the sweep the record describes"
    );
}
