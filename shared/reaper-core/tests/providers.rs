//! Multi-provider routing: one sweep serves sandboxes of several providers, and a recorded
//! sandbox is only ever resumed or destroyed by the provider its instance record names.

use std::sync::{Arc, Mutex};

use base64::Engine;
use reaper_core::journal::{exit_sentinel_line, journal_paths};
use reaper_core::memory::MemoryStore;
use reaper_core::probe::{JournalExitProbe, ProbeOptions};
use reaper_core::reclaim::{reclaim_sandbox, ReclaimOutcome};
use reaper_core::{
    ExecOptions, ExecOutput, ExitProbe, ProviderSet, ProviderSetError, ReclaimIntent, RunExitProbe,
    RunRecord, RunStatus, SandboxError, SandboxHandle, SandboxInstanceRecord, SandboxInstanceStore,
    SandboxProvider,
};

/// A provider named `name` whose every sandbox holds a finished journal of run `r-1`; records
/// each resume and destroy it receives.
#[derive(Debug, Default)]
struct Recording {
    name: String,
    resumed: Mutex<Vec<String>>,
    destroyed: Mutex<Vec<String>>,
}

impl Recording {
    fn new(name: &str) -> Arc<Self> {
        Arc::new(Recording {
            name: name.into(),
            ..Default::default()
        })
    }
    fn resumed(&self) -> Vec<String> {
        self.resumed.lock().unwrap().clone()
    }
    fn destroyed(&self) -> Vec<String> {
        self.destroyed.lock().unwrap().clone()
    }
    fn touched(&self) -> usize {
        self.resumed().len() + self.destroyed().len()
    }
}

#[derive(Debug)]
struct FinishedJournal(String);

#[async_trait::async_trait]
impl SandboxHandle for FinishedJournal {
    fn id(&self) -> &str {
        &self.0
    }
    async fn exec(&self, _command: &str, _o: ExecOptions) -> Result<ExecOutput, SandboxError> {
        let line = exit_sentinel_line(&journal_paths("r-1", None).unwrap(), 0);
        let stdout = base64::engine::general_purpose::STANDARD.encode(format!("{line}\n"));
        Ok(ExecOutput {
            stdout: format!("{stdout}\n"),
            ..Default::default()
        })
    }
}

#[async_trait::async_trait]
impl SandboxProvider for Recording {
    fn name(&self) -> &str {
        &self.name
    }
    async fn resume(&self, id: &str) -> Result<Option<Arc<dyn SandboxHandle>>, SandboxError> {
        self.resumed.lock().unwrap().push(id.into());
        Ok(Some(Arc::new(FinishedJournal(id.into()))))
    }
    async fn destroy(&self, id: &str) -> Result<(), SandboxError> {
        self.destroyed.lock().unwrap().push(id.into());
        Ok(())
    }
}

fn set(members: &[&Arc<Recording>]) -> ProviderSet {
    ProviderSet::new(
        members
            .iter()
            .map(|m| Arc::clone(m) as Arc<dyn SandboxProvider>)
            .collect(),
    )
    .unwrap()
}

fn instance(key: &str, provider: &str, id: &str) -> SandboxInstanceRecord {
    SandboxInstanceRecord {
        key: key.into(),
        provider: provider.into(),
        provider_sandbox_id: id.into(),
        latest_snapshot_id: None,
        thread_id: format!("thread-{key}"),
        latest_run_id: None,
        updated_at: 1,
    }
}

fn finished_run(run_id: &str, key: &str) -> RunRecord {
    let mut r = RunRecord::new(run_id, format!("thread-{key}"), 1);
    r.status = RunStatus::Completed;
    r.finished_at = Some(2);
    r.sandbox_key = Some(key.into());
    r
}

async fn store_with(instances: &[SandboxInstanceRecord]) -> MemoryStore {
    let store = MemoryStore::new();
    for i in instances {
        store.upsert(i.clone()).await.unwrap();
    }
    store
}

async fn reclaim(
    provider: &dyn SandboxProvider,
    store: &MemoryStore,
    run: &RunRecord,
) -> ReclaimOutcome {
    reclaim_sandbox(run, &ReclaimIntent::new(run, 10), provider, store, store)
        .await
        .unwrap()
}

#[tokio::test]
async fn one_sweep_destroys_each_recorded_sandbox_through_its_own_provider() {
    let docker = Recording::new("docker");
    let daytona = Recording::new("daytona");
    let providers = set(&[&docker, &daytona]);
    let store = store_with(&[
        instance("k-docker", "docker", "c0ffee"),
        instance("k-daytona", "daytona", "sbx-42"),
    ])
    .await;

    let a = reclaim(&providers, &store, &finished_run("r-a", "k-docker")).await;
    let b = reclaim(&providers, &store, &finished_run("r-b", "k-daytona")).await;

    assert_eq!(
        (a, b),
        (ReclaimOutcome::Destroyed, ReclaimOutcome::Destroyed)
    );
    assert_eq!(docker.destroyed(), vec!["c0ffee"]);
    assert_eq!(daytona.destroyed(), vec!["sbx-42"]);
    assert!(store.get("k-docker").await.unwrap().is_none());
    assert!(store.get("k-daytona").await.unwrap().is_none());
}

#[tokio::test]
async fn a_docker_id_handed_to_a_daytona_configured_reaper_is_never_destroyed() {
    let daytona = Recording::new("daytona");
    let store = store_with(&[instance("k1", "docker", "c0ffee")]).await;

    // The reaper configured with Daytona alone, and with a set that lacks Docker.
    let alone = reclaim(daytona.as_ref(), &store, &finished_run("r-1", "k1")).await;
    let e2b = Recording::new("e2b");
    let in_a_set = reclaim(&set(&[&daytona, &e2b]), &store, &finished_run("r-1", "k1")).await;

    assert_eq!(alone, ReclaimOutcome::ProviderMismatch);
    assert_eq!(in_a_set, ReclaimOutcome::ProviderMismatch);
    assert_eq!(daytona.touched() + e2b.touched(), 0);
    assert!(
        store.get("k1").await.unwrap().is_some(),
        "the record stays for a reaper that has Docker"
    );
}

#[tokio::test]
async fn a_leak_on_file_is_routed_to_the_provider_that_recorded_it() {
    let docker = Recording::new("docker");
    let daytona = Recording::new("daytona");
    let store = MemoryStore::new();
    let run = finished_run("r-1", "k1");
    let mut on_file = ReclaimIntent::new(&run, 10);
    on_file.provider = Some("daytona".into());
    on_file.provider_sandbox_id = Some("sbx-old".into());

    let outcome = reclaim_sandbox(&run, &on_file, &set(&[&docker, &daytona]), &store, &store)
        .await
        .unwrap();

    assert_eq!(outcome, ReclaimOutcome::Destroyed);
    assert_eq!(daytona.destroyed(), vec!["sbx-old"]);
    assert!(docker.destroyed().is_empty());
}

#[tokio::test]
async fn the_probe_reads_each_journal_through_the_provider_its_record_names() {
    let docker = Recording::new("docker");
    let e2b = Recording::new("e2b");
    let store = Arc::new(
        store_with(&[
            instance("k-docker", "docker", "c0ffee"),
            instance("k-e2b", "e2b", "i2x9"),
            instance("k-other", "vercel-sandbox", "sbx_1"),
        ])
        .await,
    );
    let probe = JournalExitProbe::new(
        Arc::new(set(&[&docker, &e2b])),
        store,
        ProbeOptions::default(),
    );
    let mut on_docker = RunRecord::new("r-1", "t", 1);
    on_docker.sandbox_key = Some("k-docker".into());
    let mut on_e2b = on_docker.clone();
    on_e2b.sandbox_key = Some("k-e2b".into());
    let mut elsewhere = on_docker.clone();
    elsewhere.sandbox_key = Some("k-other".into());

    let finished = RunExitProbe::Finished { exit_code: 0 };
    assert_eq!(probe.has_finished(&on_docker).await.unwrap(), finished);
    assert_eq!(probe.has_finished(&on_e2b).await.unwrap(), finished);
    assert_eq!(
        probe.has_finished(&elsewhere).await.unwrap().state(),
        "unknown",
        "a provider the reaper lacks cannot tell"
    );
    assert_eq!(docker.resumed(), vec!["c0ffee"]);
    assert_eq!(e2b.resumed(), vec!["i2x9"]);
}

#[tokio::test]
async fn a_provider_refuses_a_recorded_sandbox_of_another_provider() {
    let daytona = Recording::new("daytona");

    let resumed = daytona.resume_recorded("docker", "c0ffee").await;
    let destroyed = daytona.destroy_recorded("docker", "c0ffee").await;

    assert!(matches!(resumed, Err(SandboxError::Refused(_))));
    let Err(SandboxError::Refused(why)) = destroyed else {
        panic!("expected a refusal, got {destroyed:?}");
    };
    assert!(
        why.contains("\"docker\"") && why.contains("daytona"),
        "{why}"
    );
    assert_eq!(daytona.touched(), 0);
}

#[tokio::test]
async fn an_unrouted_id_is_refused_by_a_set_of_several_and_passed_on_by_a_set_of_one() {
    let docker = Recording::new("docker");
    let daytona = Recording::new("daytona");

    let several = set(&[&docker, &daytona]).destroy("c0ffee").await;
    let one = set(&[&docker]).destroy("c0ffee").await;

    assert!(matches!(several, Err(SandboxError::Refused(_))));
    assert!(one.is_ok());
    assert_eq!(docker.destroyed(), vec!["c0ffee"]);
    assert!(daytona.destroyed().is_empty());
}

#[test]
fn a_set_needs_a_provider_and_unique_names() {
    let docker = Recording::new("docker");
    let twin = Recording::new("docker");

    assert_eq!(
        ProviderSet::new(vec![]).unwrap_err(),
        ProviderSetError::Empty
    );
    let dup = ProviderSet::new(vec![docker.clone(), twin]).unwrap_err();
    assert_eq!(dup, ProviderSetError::DuplicateName("docker".into()));
    assert!(dup.to_string().contains("unique"));

    let ok = set(&[&docker, &Recording::new("e2b")]);
    assert_eq!(ok.name(), "docker+e2b");
    assert_eq!(ok.names().collect::<Vec<_>>(), ["docker", "e2b"]);
    assert!(ok.serves("e2b") && !ok.serves("docker+e2b"));
}
