//! Shell safety with real `sh`: run ids and journal directories full of quotes, `$()`,
//! backticks, `;`, newlines, spaces, non-ASCII and very long names. Every case plants a canary
//! path in the hostile text; the file must never appear, and the prune and probe must find and
//! remove exactly the right files.

mod common;

use std::path::Path;

use common::{age_file, file_exists, now_ms, provider, run_agent, run_record, sandbox};
use reaper_core::journal::{
    decode_journal_run_id, encode_run_id, journal_paths, DecodedJournalName,
};
use reaper_core::memory::MemoryStore;
use reaper_core::probe::{probe_run_exit, ProbeOptions};
use reaper_core::prune::{prune_journals, AgeGate, KeptReason, PruneOptions};
use reaper_core::{RunExitProbe, RunStatus};
use reaper_local::LocalSandbox;

fn hostile_run_ids(canary: &str) -> Vec<String> {
    vec![
        format!("it's \"quoted\" '{canary}'"),
        format!("$(touch {canary})"),
        format!("`touch {canary}`"),
        format!("; touch {canary}; #"),
        format!("a\ntouch {canary}\nb"),
        format!("spaces  and\ttabs && touch {canary}"),
        format!("日本語 ✓ ünïcödé $(touch {canary})"),
        format!("a'\\''b' ; touch {canary} ; '"),
        format!("-rf {canary} --"),
    ]
}

/// Agent output for every case: a delta on stdout, a line on stderr.
const AGENT: &str = "echo '{\"delta\":\"1\"}'; echo boom >&2";

/// Whether the run's file name was cut to 200 characters (and so cannot be decoded back).
fn is_truncated(run_id: &str) -> bool {
    let name = format!("{}.ndjson", encode_run_id(run_id).unwrap());
    decode_journal_run_id(&name) == DecodedJournalName::Truncated
}

/// Runs a terminal run and an old orphan in `dir`, then checks the probe, the files, and a prune.
/// Returns the prune's age gate.
async fn exercise(sbx: &LocalSandbox, run_id: &str, dir: &str, canary: &Path) -> AgeGate {
    run_agent(sbx, run_id, AGENT, Some(dir)).await;
    let orphan = format!("orphan {run_id}");
    run_agent(sbx, &orphan, AGENT, Some(dir)).await;
    assert!(!canary.exists(), "injection starting {run_id:?} in {dir:?}");

    let paths = journal_paths(run_id, Some(dir)).unwrap();
    let orphan_paths = journal_paths(&orphan, Some(dir)).unwrap();
    // The right files, at the derived paths (checked both ways).
    assert!(Path::new(&paths.journal).is_file(), "{:?}", paths.journal);
    assert!(Path::new(&paths.stderr).is_file());
    assert!(file_exists(sbx, &paths.journal).await);
    age_file(&orphan_paths.journal, 7_200);
    age_file(&orphan_paths.stderr, 7_200);

    let probe = ProbeOptions {
        dir: Some(dir.to_string()),
        ..ProbeOptions::default()
    };
    assert_eq!(
        probe_run_exit(sbx, run_id, &probe).await,
        RunExitProbe::Finished { exit_code: 0 }
    );

    let runs = MemoryStore::new();
    runs.put_run(run_record(run_id, RunStatus::Completed));
    let options = PruneOptions {
        dir: Some(dir.to_string()),
        ..PruneOptions::new(now_ms())
    };
    let report = prune_journals(sbx, &runs, &options).await;
    assert!(!canary.exists(), "injection pruning {run_id:?} in {dir:?}");
    assert!(report.failures.is_empty(), "{:?}", report.failures);

    if is_truncated(run_id) {
        // Spec I.3: an id longer than the encoding keeps is never swept (fail closed).
        assert!(report
            .kept
            .iter()
            .any(|k| k.reason == KeptReason::UndecodableName && k.run_id.is_none()));
        assert!(Path::new(&paths.journal).exists());
    } else {
        assert!(report.deleted.contains(&run_id.to_string()), "{report:?}");
        assert!(!Path::new(&paths.journal).exists());
        assert!(!Path::new(&paths.stderr).exists());
    }
    match report.age_gate {
        _ if is_truncated(&orphan) => assert!(Path::new(&orphan_paths.journal).exists()),
        AgeGate::Listed => {
            assert!(report.deleted.contains(&orphan), "{report:?}");
            assert!(!Path::new(&orphan_paths.journal).exists());
        }
        AgeGate::Unavailable => {
            assert!(report
                .kept
                .iter()
                .any(|k| k.run_id.as_deref() == Some(&orphan)
                    && k.reason == KeptReason::AgeGateUnavailable));
            assert!(Path::new(&orphan_paths.journal).exists());
        }
    }
    assert!(!canary.exists());
    report.age_gate
}

#[tokio::test]
async fn hostile_run_ids_cannot_inject_and_their_journals_are_found_and_pruned() {
    let (root, provider) = provider();
    let canary = root.path().join("canary");
    let canary_str = canary.to_str().unwrap();
    for run_id in hostile_run_ids(canary_str) {
        let sbx = sandbox(&provider).await;
        let gate = exercise(&sbx, &run_id, sbx.journal_dir(), &canary).await;
        assert_eq!(gate, AgeGate::Listed, "{run_id:?}");
    }
}

#[tokio::test]
async fn a_5000_character_hostile_run_id_is_probed_and_kept_as_undecodable() {
    let (root, provider) = provider();
    let canary = root.path().join("canary");
    let tail = format!(
        "$(touch {}); `touch {}`",
        canary.display(),
        canary.display()
    );
    let run_id = format!("{}{tail}", "x".repeat(5_000 - tail.chars().count()));
    assert_eq!(run_id.chars().count(), 5_000);
    let sbx = sandbox(&provider).await;
    exercise(&sbx, &run_id, sbx.journal_dir(), &canary).await;
    assert_eq!(encode_run_id(&run_id).unwrap().len(), 200);
}

#[tokio::test]
async fn hostile_journal_directories_cannot_inject_and_hold_the_right_files() {
    let (root, provider) = provider();
    let canary = root.path().join("canary");
    let c = canary.to_str().unwrap();
    let base = root.path().join("journals").to_str().unwrap().to_string();
    // A path cannot reach 5,000 characters (PATH_MAX is 4096): twelve 250-character
    // components is as long as a journal path can be here.
    let long: String = (0..12)
        .map(|i| format!("/{i:02}{}", "d$(x)'`;".repeat(31)))
        .collect();
    let dirs = [
        (format!("{base}/it's a \"dir\" '{c}'"), AgeGate::Listed),
        (format!("{base}/$(touch {c})"), AgeGate::Listed),
        (format!("{base}/`touch {c}`"), AgeGate::Listed),
        (format!("{base}/a; touch {c}; b"), AgeGate::Listed),
        (format!("{base}/日本 ✓ dir $(touch {c})"), AgeGate::Listed),
        (format!("{base}/trailing slash/"), AgeGate::Listed),
        (format!("{base}{long}"), AgeGate::Listed),
        // `stat` prints the directory name across two lines: no witness line matches, so the
        // age gate fails closed and the orphan is kept (the terminal run is still pruned).
        (format!("{base}/new\nline; touch {c}"), AgeGate::Unavailable),
    ];
    for (dir, expected_gate) in dirs {
        let sbx = sandbox(&provider).await;
        std::fs::create_dir_all(&dir).unwrap();
        let run_id = format!("r;$(touch {c})`touch {c}`");
        let gate = exercise(&sbx, &run_id, &dir, &canary).await;
        assert_eq!(gate, expected_gate, "{dir:?}");
    }
}
