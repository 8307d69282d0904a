//! Prune and probe at scale through the real shell of a local sandbox. Not a timed test: it
//! prints wall time, CPU time (this process plus its reaped children, from `getrusage`) and the
//! number of `exec` calls, for the record.
//!
//! `cargo bench -p reaper-local --bench prune`
//!
//! Prune: N journals (each a `.ndjson` and a `.err`), a third of the runs terminal in the store,
//! a third running, a third orphaned with files two hours old (set with `touch -d`), pruned with
//! `max_deletes = N` so every eligible run goes. Probe: 1,000 finished runs, one probe each.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use nix::sys::resource::{getrusage, UsageWho};
use reaper_core::journal::{exit_sentinel_line, journal_paths};
use reaper_core::memory::MemoryStore;
use reaper_core::probe::{probe_run_exit, ProbeOptions};
use reaper_core::prune::{prune_journals, PruneOptions};
use reaper_core::{
    Clock, ExecOptions, ExecOutput, RunExitProbe, RunRecord, RunStatus, SandboxError,
    SandboxHandle, SandboxProvider,
};
use reaper_local::{CreateOptions, LocalSandbox, LocalSandboxProvider, SystemClock};

/// Counts the `exec` calls that reach the sandbox.
struct Counting<'a> {
    inner: &'a LocalSandbox,
    execs: AtomicUsize,
}

#[async_trait::async_trait]
impl SandboxHandle for Counting<'_> {
    fn id(&self) -> &str {
        self.inner.id()
    }
    async fn exec(&self, command: &str, options: ExecOptions) -> Result<ExecOutput, SandboxError> {
        self.execs.fetch_add(1, Ordering::SeqCst);
        self.inner.exec(command, options).await
    }
}

fn cpu_time() -> Duration {
    let total = |who| {
        let usage = getrusage(who).expect("getrusage");
        let tv = |t: nix::sys::time::TimeVal| {
            Duration::from_secs(t.tv_sec() as u64) + Duration::from_micros(t.tv_usec() as u64)
        };
        tv(usage.user_time()) + tv(usage.system_time())
    };
    total(UsageWho::RUSAGE_SELF) + total(UsageWho::RUSAGE_CHILDREN)
}

struct Measured {
    wall: Duration,
    cpu: Duration,
    execs: usize,
}

async fn measure<T>(
    sbx: &LocalSandbox,
    body: impl AsyncFnOnce(&Counting<'_>) -> T,
) -> (T, Measured) {
    let handle = Counting {
        inner: sbx,
        execs: AtomicUsize::new(0),
    };
    let (wall, cpu) = (Instant::now(), cpu_time());
    let out = body(&handle).await;
    let measured = Measured {
        wall: wall.elapsed(),
        cpu: cpu_time() - cpu,
        execs: handle.execs.load(Ordering::SeqCst),
    };
    (out, measured)
}

/// Writes a finished run's journal and sidecar.
fn write_run(dir: &str, run_id: &str) -> [String; 2] {
    let paths = journal_paths(run_id, Some(dir)).unwrap();
    let journal = format!(
        "{{\"delta\":\"{run_id}\"}}\n{}\n",
        exit_sentinel_line(&paths, 0)
    );
    std::fs::write(&paths.journal, journal).unwrap();
    std::fs::write(&paths.stderr, "").unwrap();
    [paths.journal, paths.stderr]
}

fn touch_old(paths: &[String]) {
    let two_hours_ago = SystemClock.now_ms() / 1000 - 7_200;
    for chunk in paths.chunks(2_000) {
        let status = std::process::Command::new("touch")
            .arg("-d")
            .arg(format!("@{two_hours_ago}"))
            .args(chunk)
            .status()
            .unwrap();
        assert!(status.success(), "touch -d failed");
    }
}

async fn bench_prune(provider: &LocalSandboxProvider, n: usize) {
    let sbx = provider.create(CreateOptions::default()).await.unwrap();
    let dir = sbx.journal_dir().to_string();
    let runs = MemoryStore::new();
    let mut old = Vec::new();
    for i in 0..n {
        let run_id = format!("bench-{i}");
        let files = write_run(&dir, &run_id);
        match i % 3 {
            0 => runs.put_run(with_status(&run_id, RunStatus::Completed)),
            1 => runs.put_run(with_status(&run_id, RunStatus::Running)),
            _ => old.extend(files),
        }
    }
    touch_old(&old);
    let options = PruneOptions {
        dir: Some(dir),
        max_deletes: n,
        ..PruneOptions::new(SystemClock.now_ms())
    };
    let (report, m) = measure(&sbx, async |h| prune_journals(h, &runs, &options).await).await;
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    // Terminal runs and old orphans go; running runs stay.
    assert_eq!(
        report.deleted.len(),
        n - (0..n).filter(|i| i % 3 == 1).count()
    );
    println!(
        "prune {n:>5} journals: wall {:>8.1} ms, cpu {:>8.1} ms, {:>3} execs; listed {}, deleted {}, kept {}",
        m.wall.as_secs_f64() * 1e3,
        m.cpu.as_secs_f64() * 1e3,
        m.execs,
        report.listed,
        report.deleted.len(),
        report.kept.len(),
    );
    provider.destroy(sbx.id()).await.unwrap();
}

async fn bench_probe(provider: &LocalSandboxProvider, n: usize) {
    let sbx = provider.create(CreateOptions::default()).await.unwrap();
    let dir = sbx.journal_dir().to_string();
    let ids: Vec<String> = (0..n).map(|i| format!("probe-{i}")).collect();
    for id in &ids {
        write_run(&dir, id);
    }
    let options = ProbeOptions {
        dir: Some(dir),
        ..ProbeOptions::default()
    };
    let (finished, m) = measure(&sbx, async |h| {
        let mut finished = 0;
        for id in &ids {
            if probe_run_exit(h, id, &options).await == (RunExitProbe::Finished { exit_code: 0 }) {
                finished += 1;
            }
        }
        finished
    })
    .await;
    assert_eq!(finished, n);
    println!(
        "probe {n:>5} runs:     wall {:>8.1} ms, cpu {:>8.1} ms, {:>4} execs; {:.2} ms per probe",
        m.wall.as_secs_f64() * 1e3,
        m.cpu.as_secs_f64() * 1e3,
        m.execs,
        m.wall.as_secs_f64() * 1e3 / n as f64,
    );
    provider.destroy(sbx.id()).await.unwrap();
}

fn with_status(run_id: &str, status: RunStatus) -> RunRecord {
    let mut record = RunRecord::new(run_id, "bench", 0);
    record.status = status;
    record
}

fn main() {
    let root = tempfile::tempdir().unwrap();
    let provider = LocalSandboxProvider::with_root(root.path());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        bench_prune(&provider, 1_000).await;
        bench_prune(&provider, 5_000).await;
        bench_probe(&provider, 1_000).await;
    });
}
