//! `reaper prune` and `reaper status`.

mod common;

use std::time::{Duration, SystemTime};

use common::{now, run, Site, HELLO, MINUTE, TICKING};
use reaper_core::journal::journal_paths;
use reaper_core::{
    Chunk, DeliveryLog, MessageStore, Patch, RunPatch, RunStatus, RunStore, Transcript,
    TranscriptMessage,
};

const DAY: i64 = 24 * 60 * MINUTE;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_deletes_journals_of_terminal_runs_and_old_orphans_and_ages_out_old_events() {
    let site = Site::new();
    let sandbox = site
        .detached_run("run-finished", Some(HELLO), true, MINUTE)
        .await;
    site.store
        .update(
            "run-finished",
            RunPatch {
                status: Some(RunStatus::Completed),
                finished_at: Patch::Set(now() - 40 * DAY),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    site.store
        .append(
            "run-finished",
            None,
            vec![Chunk::text("Hello"), Chunk::text(" there")],
            now() - 40 * DAY,
        )
        .await
        .unwrap();
    let transcript = Transcript {
        run_id: "run-finished".into(),
        thread_id: "thread-run-finished".into(),
        messages: vec![TranscriptMessage {
            role: "assistant".into(),
            content: "Hello there".into(),
        }],
        exit_code: Some(0),
        saved_at: now() - 40 * DAY,
    };
    site.store.save_transcript(&transcript, None).await.unwrap();
    // A live run in the same sandbox, and an orphan whose run record is gone.
    sandbox
        .start_agent("run-live", TICKING, None)
        .await
        .unwrap();
    site.store
        .create_or_resume(reaper_core::NewRun {
            run_id: "run-live".into(),
            thread_id: "thread-live".into(),
            started_at: now(),
            status: None,
        })
        .await
        .unwrap();
    let journal = |run_id| journal_paths(run_id, Some(sandbox.journal_dir())).unwrap();
    let orphan = journal("run-gone");
    for path in [&orphan.journal, &orphan.stderr] {
        std::fs::write(path, "{}\n").unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        f.set_modified(SystemTime::now() - Duration::from_secs(3 * 3600))
            .unwrap();
    }

    let (code, stdout, stderr) = run(site.reaper("prune").arg("--json"));

    assert_eq!(code, 0, "stdout {stdout} stderr {stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let sandbox_report = &report["journals"][0];
    let mut deleted: Vec<&str> = sandbox_report["deleted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    deleted.sort();
    assert_eq!(deleted, ["run-finished", "run-gone"]);
    assert_eq!(sandbox_report["kept"][0]["runId"], "run-live");
    assert_eq!(sandbox_report["kept"][0]["reason"], "non-terminal");
    assert!(!std::path::Path::new(&journal("run-finished").journal).exists());
    assert!(!std::path::Path::new(&orphan.journal).exists());
    assert!(std::path::Path::new(&journal("run-live").journal).exists());

    assert_eq!(report["events"]["eventsDeleted"], 2);
    assert_eq!(report["events"]["runs"], 1);
    assert!(site
        .store
        .read("run-finished", 0, 10)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        site.store.get_transcript("run-finished").await.unwrap(),
        Some(transcript),
        "transcripts outlive events"
    );

    let (code, stdout, _) = run(&mut site.reaper("prune"));
    assert_eq!(code, 0);
    assert!(
        stdout.contains("0 journal(s) deleted in 1 sandbox(es), 0 failure(s)"),
        "{stdout}"
    );
    site.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_lists_what_is_detached_for_how_long_and_where() {
    let site = Site::new();
    let recent = site
        .detached_run("run-recent", None, false, 2 * MINUTE)
        .await;
    site.detached_run("run-old", None, false, 90 * MINUTE).await;
    site.store
        .create_or_resume(reaper_core::NewRun {
            run_id: "run-attached".into(),
            thread_id: "t".into(),
            started_at: now(),
            status: None,
        })
        .await
        .unwrap();

    let (code, stdout, stderr) =
        run(site
            .reaper_status()
            .args(["--detached-ttl", "30m", "--json"]));
    assert_eq!(code, 0, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let detached = v["detached"].as_array().unwrap();
    assert_eq!(detached.len(), 2);
    assert_eq!(detached[0]["runId"], "run-old", "longest detached first");
    assert_eq!(detached[0]["pastTtl"], true);
    assert_eq!(detached[1]["runId"], "run-recent");
    assert_eq!(detached[1]["pastTtl"], false);
    assert_eq!(
        detached[1]["sandbox"],
        reaper_core::SandboxHandle::id(&recent)
    );
    assert!(detached[1]["detachedForMs"].as_i64().unwrap() >= 2 * MINUTE);
    assert_eq!(v["runsByStatus"]["running"], 3);

    let (code, stdout, _) = run(&mut site.reaper_status());
    assert_eq!(code, 0);
    assert!(
        stdout.starts_with("2 detached runs, the oldest for 1h 30m; 2 shown, at "),
        "{stdout}"
    );
    let old = stdout.lines().find(|l| l.starts_with("run-old ")).unwrap();
    assert!(old.contains("1h 30m"), "{old}");
    assert!(
        stdout.contains("runs by status: running 3 · interrupted 0"),
        "{stdout}"
    );
    assert_eq!(
        RunStore::get(&site.store, "run-old")
            .await
            .unwrap()
            .unwrap()
            .status,
        RunStatus::Running,
        "status only reads"
    );
}
