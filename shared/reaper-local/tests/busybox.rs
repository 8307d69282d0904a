//! The prune and the probe under a BusyBox userland: a directory of symlinks to `busybox` named
//! after the applets, first in the sandbox's `PATH`. Where BusyBox has what a command needs, the
//! results must equal GNU coreutils'; where an applet is missing, the age gate must report
//! unavailable and nothing may be deleted. BusyBox must be installed (`apt-get install busybox`):
//! a missing one fails these tests, it never skips them.

mod common;

use std::path::{Path, PathBuf};

use common::{age_file, busybox, now_ms, provider, run_agent, run_record, sh, wait_for_lines};
use reaper_core::journal::{
    journal_mtime_list_command, journal_paths, parse_mtime_listing, shell_quote, MtimeListing,
};
use reaper_core::memory::MemoryStore;
use reaper_core::probe::{probe_run_exit, ProbeOptions};
use reaper_core::prune::{prune_journals, AgeGate, KeptReason, PruneOptions, PruneReport};
use reaper_core::{
    ExecOptions, ExecOutput, RunExitProbe, RunStatus, SandboxError, SandboxHandle, SandboxProvider,
};
use reaper_local::{CreateOptions, LocalSandbox, LocalSandboxProvider};

/// The applets the probe and the prune run.
const APPLETS: [&str; 6] = ["stat", "ls", "tail", "base64", "rm", "head"];
/// What the journaled wrapper and the test agents need besides.
const SUPPORT: [&str; 5] = ["mkdir", "cat", "sleep", "touch", "echo"];

/// A directory of `busybox` symlinks named after `applets`.
fn applet_dir(root: &Path, name: &str, applets: &[&str]) -> PathBuf {
    let bb = busybox();
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    for applet in applets {
        std::os::unix::fs::symlink(&bb, dir.join(applet)).unwrap();
    }
    dir
}

async fn sandbox_with_path(provider: &LocalSandboxProvider, path: String) -> LocalSandbox {
    provider
        .create(CreateOptions {
            path: Some(path),
            ..Default::default()
        })
        .await
        .unwrap()
}

/// What the scenario observed, to compare between userlands.
#[derive(Debug, PartialEq)]
struct Observed {
    probes: Vec<(String, RunExitProbe)>,
    listing: Vec<(String, i64)>,
    prune: PruneReport,
}

/// Runs the same journals in `sbx` and observes the probe, the age listing and the prune.
async fn scenario(sbx: &LocalSandbox, old_mtime_secs: i64) -> Observed {
    let dir = sbx.journal_dir().to_string();
    let runs = MemoryStore::new();
    let agent = |i: u32| format!("echo '{{\"delta\":\"{i}\"}}'; echo err{i} >&2");
    run_agent(sbx, "bb-done", &agent(1), None).await;
    runs.put_run(run_record("bb-done", RunStatus::Completed));
    run_agent(sbx, "bb-failed", &format!("{}; exit 3", agent(2)), None).await;
    runs.put_run(run_record("bb-failed", RunStatus::Failed));
    run_agent(sbx, "bb-interrupted", &agent(3), None).await;
    runs.put_run(run_record("bb-interrupted", RunStatus::Interrupted));
    run_agent(sbx, "bb-old-orphan", &agent(4), None).await;
    run_agent(sbx, "bb-fresh-orphan", &agent(5), None).await;
    let live = sbx
        .start_agent("bb-live", "echo '{\"delta\":\"6\"}'; sleep 30", None)
        .await
        .unwrap();
    runs.put_run(run_record("bb-live", RunStatus::Running));
    let live_paths = journal_paths("bb-live", Some(&dir)).unwrap();
    assert!(wait_for_lines(Path::new(&live_paths.journal), 1).await);
    let stray = format!("{dir}/stray_zz.ndjson");
    std::fs::write(&stray, "x\n").unwrap();
    let old = journal_paths("bb-old-orphan", Some(&dir)).unwrap();
    // The same absolute mtimes in both userlands, so the listings compare equal (the stray
    // file's own write time would differ whenever the two scenarios straddle a second).
    for path in [&old.journal, &old.stderr] {
        common::touch_at(path, old_mtime_secs);
    }
    common::touch_at(&stray, old_mtime_secs + 3_600);

    let probe = ProbeOptions {
        dir: Some(dir.clone()),
        ..ProbeOptions::default()
    };
    let mut probes = Vec::new();
    for run in ["bb-done", "bb-failed", "bb-live", "bb-missing"] {
        probes.push((run.to_string(), probe_run_exit(sbx, run, &probe).await));
    }
    let out = sh(sbx, &journal_mtime_list_command(Some(&dir))).await;
    let listing = match parse_mtime_listing(&out, Some(&dir)) {
        MtimeListing::Listed(entries) => entries
            .into_iter()
            .filter(|e| e.name.starts_with("bb-old") || e.name.starts_with("stray"))
            .map(|e| (e.name, e.mtime_ms))
            .collect(),
        MtimeListing::Unavailable => panic!("no witness line in {out:?}"),
    };
    let prune = prune_journals(
        sbx,
        &runs,
        &PruneOptions {
            dir: Some(dir),
            ..PruneOptions::new(now_ms())
        },
    )
    .await;
    assert!(!common::process_dead(live.pid));
    Observed {
        probes,
        listing,
        prune,
    }
}

#[tokio::test]
async fn the_applet_directory_really_puts_busybox_first_in_the_sandbox_path() {
    let (root, provider) = provider();
    let bb = applet_dir(root.path(), "bb", &[&APPLETS[..], &SUPPORT[..]].concat());
    let sbx = sandbox_with_path(&provider, format!("{}:/usr/bin:/bin", bb.display())).await;
    for applet in APPLETS {
        let out = sh(&sbx, &format!("{applet} --help 2>&1; true")).await;
        assert!(out.contains("BusyBox"), "{applet} is not BusyBox's: {out}");
    }
}

#[tokio::test]
async fn prune_and_probe_under_busybox_equal_gnu_coreutils() {
    let (root, provider) = provider();
    let bb = applet_dir(root.path(), "bb", &[&APPLETS[..], &SUPPORT[..]].concat());
    let gnu = sandbox_with_path(&provider, "/usr/bin:/bin".into()).await;
    let busy = sandbox_with_path(&provider, format!("{}:/usr/bin:/bin", bb.display())).await;
    let old_mtime = now_ms() / 1000 - 7_200;

    let with_gnu = scenario(&gnu, old_mtime).await;
    let with_busybox = scenario(&busy, old_mtime).await;
    assert_eq!(with_busybox, with_gnu);

    // And the shared answer is the right one.
    assert_eq!(
        with_gnu.probes,
        vec![
            ("bb-done".into(), RunExitProbe::Finished { exit_code: 0 }),
            ("bb-failed".into(), RunExitProbe::Finished { exit_code: 3 }),
            ("bb-live".into(), RunExitProbe::Producing),
            ("bb-missing".into(), RunExitProbe::Producing),
        ]
    );
    let prune = &with_gnu.prune;
    assert_eq!(prune.age_gate, AgeGate::Listed);
    let mut deleted = prune.deleted.clone();
    deleted.sort();
    assert_eq!(deleted, ["bb-done", "bb-failed", "bb-old-orphan"]);
    let reasons: Vec<(Option<&str>, KeptReason)> = prune
        .kept
        .iter()
        .map(|k| (k.run_id.as_deref(), k.reason))
        .collect();
    assert!(reasons.contains(&(None, KeptReason::UndecodableName)));
    assert!(reasons.contains(&(Some("bb-interrupted"), KeptReason::NonTerminal)));
    assert!(reasons.contains(&(Some("bb-live"), KeptReason::NonTerminal)));
    assert!(reasons.contains(&(Some("bb-fresh-orphan"), KeptReason::OrphanTooRecent)));
    assert!(prune.failures.is_empty());
    assert_eq!(with_gnu.listing.len(), 3);
    assert!(with_gnu
        .listing
        .iter()
        .any(|(n, m)| n.starts_with("bb-old") && *m == old_mtime * 1000));
    for sbx in [&gnu, &busy] {
        provider.destroy(sbx.id()).await.unwrap();
    }
}

#[tokio::test]
async fn without_a_stat_applet_the_age_gate_is_unavailable_and_nothing_is_deleted() {
    let (root, provider) = provider();
    // A BusyBox userland built without `stat`, and nothing else on PATH to fall back to.
    let applets: Vec<&str> = [&APPLETS[..], &SUPPORT[..]]
        .concat()
        .into_iter()
        .filter(|a| *a != "stat")
        .collect();
    let bb = applet_dir(root.path(), "bb-nostat", &applets);
    let writer = common::sandbox(&provider).await;
    let dir = writer.journal_dir().to_string();
    let reader = sandbox_with_path(&provider, bb.display().to_string()).await;
    assert!(sh(&reader, "command -v stat || echo missing")
        .await
        .contains("missing"));

    let runs = MemoryStore::new();
    for run in ["nostat-orphan-1", "nostat-orphan-2", "nostat-running"] {
        run_agent(&writer, run, "echo '{\"delta\":\"1\"}'", None).await;
        let paths = journal_paths(run, Some(&dir)).unwrap();
        age_file(&paths.journal, 86_400);
        age_file(&paths.stderr, 86_400);
    }
    runs.put_run(run_record("nostat-running", RunStatus::Running));

    let report = prune_journals(
        &reader,
        &runs,
        &PruneOptions {
            dir: Some(dir.clone()),
            ..PruneOptions::new(now_ms())
        },
    )
    .await;
    assert_eq!(report.age_gate, AgeGate::Unavailable);
    assert!(report.deleted.is_empty(), "{report:?}");
    assert_eq!(report.listed, 6);
    let mut reasons: Vec<(String, KeptReason)> = report
        .kept
        .iter()
        .map(|k| (k.run_id.clone().unwrap(), k.reason))
        .collect();
    reasons.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        reasons,
        [
            ("nostat-orphan-1".into(), KeptReason::AgeGateUnavailable),
            ("nostat-orphan-2".into(), KeptReason::AgeGateUnavailable),
            ("nostat-running".into(), KeptReason::NonTerminal),
        ]
    );
    for run in ["nostat-orphan-1", "nostat-orphan-2", "nostat-running"] {
        let paths = journal_paths(run, Some(&dir)).unwrap();
        assert!(Path::new(&paths.journal).exists() && Path::new(&paths.stderr).exists());
    }
    // The probe needs no `stat`: BusyBox's tail and base64 still read the sentinel.
    let probe = ProbeOptions {
        dir: Some(dir),
        ..ProbeOptions::default()
    };
    assert_eq!(
        probe_run_exit(&reader, "nostat-orphan-1", &probe).await,
        RunExitProbe::Finished { exit_code: 0 }
    );
}

/// The sandbox, with every command run by BusyBox's own `sh` (ash) instead of `/bin/sh`.
struct BusyBoxShell {
    inner: LocalSandbox,
    busybox: PathBuf,
}

#[async_trait::async_trait]
impl SandboxHandle for BusyBoxShell {
    fn id(&self) -> &str {
        self.inner.id()
    }
    async fn exec(&self, command: &str, options: ExecOptions) -> Result<ExecOutput, SandboxError> {
        // `exec` replaces the outer shell: the command's only shell is BusyBox's.
        let wrapped = format!(
            "exec {} sh -c {}",
            shell_quote(&self.busybox.display().to_string()),
            shell_quote(command)
        );
        self.inner.exec(&wrapped, options).await
    }
}

#[tokio::test]
async fn a_batched_delete_under_busybox_sh_gives_each_run_its_own_verdict() {
    let (root, provider) = provider();
    let applets = [&APPLETS[..], &SUPPORT[..], &["readlink"][..]].concat();
    let bb = applet_dir(root.path(), "bb-sh", &applets);
    let handle = BusyBoxShell {
        inner: sandbox_with_path(&provider, bb.display().to_string()).await,
        busybox: busybox(),
    };
    assert!(sh(&handle, "readlink /proc/$$/exe")
        .await
        .contains("busybox"));
    let dir = handle.inner.journal_dir().to_string();
    let paths = |run: &str| journal_paths(run, Some(&dir)).unwrap();
    let runs = MemoryStore::new();
    for run in ["bb-done", "bb-stuck", "bb-link", "bb-live", "bb-old-orphan"] {
        let p = paths(run);
        if run == "bb-stuck" {
            // `rm -f` cannot remove a directory: this run's files are left.
            std::fs::create_dir(&p.journal).unwrap();
        } else if run == "bb-link" {
            // A dangling symlink is removed like a file.
            std::os::unix::fs::symlink(root.path().join("nowhere"), &p.journal).unwrap();
        } else {
            std::fs::write(&p.journal, "{\"delta\":\"1\"}\n").unwrap();
        }
        std::fs::write(&p.stderr, "").unwrap();
        match run {
            "bb-live" => runs.put_run(run_record(run, RunStatus::Running)),
            "bb-old-orphan" => {
                age_file(&p.journal, 7_200);
                age_file(&p.stderr, 7_200);
            }
            _ => runs.put_run(run_record(run, RunStatus::Completed)),
        }
    }

    let report = prune_journals(
        &handle,
        &runs,
        &PruneOptions {
            dir: Some(dir.clone()),
            ..PruneOptions::new(now_ms())
        },
    )
    .await;

    let mut deleted = report.deleted.clone();
    deleted.sort();
    assert_eq!(deleted, ["bb-done", "bb-link", "bb-old-orphan"]);
    let mut kept: Vec<(String, KeptReason)> = report
        .kept
        .iter()
        .map(|k| (k.run_id.clone().unwrap(), k.reason))
        .collect();
    kept.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        kept,
        [
            ("bb-live".into(), KeptReason::NonTerminal),
            ("bb-stuck".into(), KeptReason::DeleteFailed),
        ]
    );
    assert_eq!(report.failures.len(), 1, "{:?}", report.failures);
    assert_eq!(report.failures[0].message, "rm exited 1");
    for run in ["bb-done", "bb-link", "bb-old-orphan"] {
        let p = paths(run);
        assert!(std::fs::symlink_metadata(&p.journal).is_err(), "{run}");
        assert!(!Path::new(&p.stderr).exists(), "{run}");
    }
    assert!(Path::new(&paths("bb-stuck").journal).is_dir());
    assert!(Path::new(&paths("bb-live").journal).is_file());
}
