//! Sweep cost on the memory backends with zero-latency fakes (the core issue's benchmark).
//!
//! Prints CPU time per run and peak RSS for each workload. Each workload runs in its own child
//! process (this binary re-executed with the workload's name) so peak RSS is its own, once in
//! each of `REAPER_BENCH_ROUNDS` rounds (default 5) that run every workload in turn: every figure
//! is the median of those rounds, with their range, so a figure does not rest on one lucky run
//! nor on one slow stretch of a shared machine. The scale workload keeps one
//! child per backlog alive and asks them in turn, so its ratios pair sweeps run moments apart.
//!
//! Run: `cargo bench -p reaper-core --bench sweep` (or `-- <workload>` for one round of one).

use std::sync::Arc;
use std::time::Instant;

use futures::stream;
use reaper_core::domain::{Chunk, RunRecord};
use reaper_core::error::{DriveError, ProbeError};
use reaper_core::journal::{
    decode_base64_text, exit_sentinel_line, journal_paths, parse_journal_exit,
};
use reaper_core::memory::MemoryStore;
use reaper_core::ports::{
    CancellationToken, ChunkStream, Clock, DeliveryLog, Drive, DriveRequest, ExitProbe,
    RunExitProbe,
};
use reaper_core::reap::{reap_detached_runs, sweep, ReapDeps, ReapOptions};
use reaper_core::time::ManualClock;
use reaper_testkit::bench::{median, Turns};
use reaper_testkit::fakes::{CountingRuns, TokioSleeper};

const NOW: i64 = 1_800_000_000_000;
const TTL: u64 = 3_600_000;

struct FixedProbe(RunExitProbe);

#[async_trait::async_trait]
impl ExitProbe for FixedProbe {
    async fn has_finished(&self, _r: &RunRecord) -> Result<RunExitProbe, ProbeError> {
        Ok(self.0.clone())
    }
}

/// Yields `n` chunks of about 100 bytes each, all immediately available.
struct ReplayDrive(usize);

impl Drive for ReplayDrive {
    fn drive(&self, _r: DriveRequest, _s: CancellationToken) -> Result<ChunkStream, DriveError> {
        let text = "x".repeat(80);
        let chunks: Vec<_> = (0..self.0).map(|_| Ok(Chunk::text(&text))).collect();
        Ok(Box::pin(stream::iter(chunks)))
    }
}

/// A figure for the closing table: the child prints it, the parent collects it.
fn figure(name: &str, value: String) {
    println!("{FIGURE}{name}={value}");
}

const FIGURE: &str = "@figure ";

fn cpu_seconds() -> f64 {
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)
        .expect("getrusage");
    let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 / 1e6;
    t(usage.user_time()) + t(usage.system_time())
}

/// The process's peak resident set (VmHWM). Not getrusage's ru_maxrss, which Linux carries over
/// from the image that exec'd this one (cargo's, tens of MiB).
fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmHWM in /proc/self/status");
    kib / 1024.0
}

fn deps(
    store: &MemoryStore,
    probe: RunExitProbe,
    chunks: usize,
    clock: Arc<dyn Clock>,
) -> ReapDeps {
    ReapDeps {
        runs: Arc::new(store.clone()),
        logs: Arc::new(store.clone()),
        leases: Arc::new(store.clone()),
        ledger: Arc::new(store.clone()),
        probe: Arc::new(FixedProbe(probe)),
        drive: Arc::new(ReplayDrive(chunks)),
        reclaim: None,
        clock,
        sleeper: Arc::new(TokioSleeper),
        damage: Default::default(),
    }
}

fn seed(store: &MemoryStore, n: usize, detached_since: i64) {
    for i in 0..n {
        let mut r = RunRecord::new(format!("run-{i:06}"), format!("thread-{i}"), NOW - 1);
        r.detached_since = Some(detached_since);
        r.sandbox_key = Some(format!("sbx-{i}"));
        store.put_run(r);
    }
}

/// Sweeps a fresh store `rounds` times and reports the CPU time of the sweeps alone (seeding is
/// not counted). Many rounds, because the kernel accounts CPU time in scheduler ticks.
fn sweep_workload(
    runs: usize,
    probe: RunExitProbe,
    chunks: usize,
    detached_since: i64,
    rounds: usize,
    fresh: bool,
) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let baseline = peak_rss_mib();
    rt.block_on(async {
        let mut cpu = 0.0;
        let mut wall = 0.0;
        let mut outcomes = String::new();
        // Runs left alone leave the store as it was, so one store is swept every round, as a
        // long-running process sweeps the same backlog; a sweep that changes runs gets a fresh one
        // (`fresh` forces one every round, to show what the allocator keeps between rounds).
        let kept = (!fresh
            && probe == RunExitProbe::Producing
            && detached_since > NOW - TTL as i64)
            .then(|| {
                let store = MemoryStore::new();
                seed(&store, runs, detached_since);
                store
            });
        for _ in 0..rounds {
            let store = kept.clone().unwrap_or_else(|| {
                let store = MemoryStore::new();
                seed(&store, runs, detached_since);
                store
            });
            let mut options = ReapOptions::new(TTL, "bench");
            options.now = Some(NOW);
            options.fence_quiet_ms = 0;
            options.max_runs = runs;
            let d = deps(&store, probe.clone(), chunks, Arc::new(ManualClock::new(NOW)));
            let cpu0 = cpu_seconds();
            let wall0 = Instant::now();
            let report = reap_detached_runs(&d, &options).await.unwrap();
            cpu += cpu_seconds() - cpu0;
            wall += wall0.elapsed().as_secs_f64();
            assert_eq!(report.considered, runs);
            outcomes = serde_json::to_string(&report.outcomes).unwrap();
        }
        let swept = (runs * rounds) as f64;
        let (cpu_name, rss) = if fresh {
            ("cpu_per_run_fresh", "peak_rss_fresh")
        } else {
            ("cpu_per_run", "peak_rss")
        };
        figure(
            &format!("{cpu_name}:{runs}:{outcomes}"),
            format!("{:.2}", cpu / swept * 1e6),
        );
        figure(
            &format!("{rss}:{runs}:{outcomes}"),
            format!("{:.1}", peak_rss_mib()),
        );
        println!(
            "  runs={runs} x {rounds} sweeps, outcomes per sweep={outcomes}\n  cpu_per_run={:.2}us wall_per_run={:.2}us peak_rss={:.1}MiB (process baseline {:.1}MiB: the store, listing and report of one sweep take the rest)",
            cpu / swept * 1e6,
            wall / swept * 1e6,
            peak_rss_mib(),
            baseline
        );
    });
}

fn sentinel_scan() {
    use base64::Engine;
    let paths = journal_paths("bench-run", None).unwrap();
    let line = "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"delta\":\"some agent output here\"}\n";
    let mut body = String::new();
    while body.len() < 8192 {
        body.push_str(line);
    }
    let with = format!("{body}{}\n", exit_sentinel_line(&paths, 0));
    let without = body.clone();
    let tail = |s: &str| s[s.len() - 4096..].to_string();
    // What `tail -c -4096 | base64` prints: base64 wrapped at 76 columns.
    let frame = |t: &str| {
        let b = base64::engine::general_purpose::STANDARD.encode(t.as_bytes());
        b.as_bytes()
            .chunks(76)
            .map(|c| std::str::from_utf8(c).unwrap().to_string() + "\n")
            .collect::<String>()
    };
    let iterations = 20_000;
    for (label, text, expect) in [
        ("sentinel on the last line", tail(&with), true),
        ("no sentinel (every line parsed)", tail(&without), false),
    ] {
        let stdout = frame(&text);
        let cpu0 = cpu_seconds();
        for _ in 0..iterations {
            std::hint::black_box(decode_base64_text(std::hint::black_box(&stdout)).unwrap());
        }
        let decode_only = cpu_seconds() - cpu0;
        let cpu0 = cpu_seconds();
        let mut found = 0;
        for _ in 0..iterations {
            let decoded = decode_base64_text(std::hint::black_box(&stdout)).unwrap();
            if parse_journal_exit(&decoded, &paths).is_some() {
                found += 1;
            }
        }
        let cpu = cpu_seconds() - cpu0;
        assert_eq!(found, if expect { iterations } else { 0 });
        if expect {
            figure("sentinel", format!("{:.2}", cpu / iterations as f64 * 1e6));
        }
        println!(
            "  4 KiB tail, base64 frame decoded and scanned, {label}: cpu_per_scan={:.2}us (decoding alone {:.2}us)",
            cpu / iterations as f64 * 1e6,
            decode_only / iterations as f64 * 1e6
        );
    }
}

fn default_quiet_window() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = MemoryStore::new();
        seed(&store, 25, NOW - 60_000);
        for i in 0..25 {
            // Every log was last appended a minute ago: longer than the 5 s window.
            store
                .append(&format!("run-{i:06}"), None, vec![Chunk::text("delivered")], NOW - 60_000)
                .await
                .unwrap();
        }
        let mut options = ReapOptions::new(TTL, "bench");
        options.now = Some(NOW);
        let d = deps(
            &store,
            RunExitProbe::Finished { exit_code: 0 },
            20,
            Arc::new(ManualClock::new(NOW)),
        );
        let wall = Instant::now();
        let report = reap_detached_runs(&d, &options).await.unwrap();
        assert_eq!(report.outcomes.finalized, 25);
        println!(
            "  25 finished runs at the default 5 s quiet window: wall={:.3}s (the reference sleeps 125 s)",
            wall.elapsed().as_secs_f64()
        );
    });
}

/// Run-store requests per stateless `sweep()` (the cursor kept with the sweep lease) over a
/// backlog of producing runs, batch 25: the most any of 10 sweeps sent.
fn requests_per_sweep(backlog: usize) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = MemoryStore::new();
        seed(&store, backlog, NOW - 60_000);
        let runs = Arc::new(CountingRuns::new(store.clone()));
        let mut d = deps(
            &store,
            RunExitProbe::Producing,
            0,
            Arc::new(ManualClock::new(NOW)),
        );
        d.runs = runs.clone();
        let mut options = ReapOptions::new(TTL, "bench");
        options.now = Some(NOW);
        let mut most = 0;
        let mut exact = true;
        let mut backlog_seen = 0;
        for _ in 0..10 {
            let report = sweep(&d, &options, 60_000).await;
            assert_eq!(report.report.outcomes.producing, 25);
            most = most.max(runs.take());
            backlog_seen = report.report.slo.backlog;
            exact = report.report.slo.backlog_exact;
        }
        figure(&format!("requests:{backlog}"), most.to_string());
        println!(
            "  backlog={backlog}: at most {most} run-store requests per sweep (listing pages and the backlog count), backlog figure {backlog_seen}{}",
            if exact { "" } else { " (at least)" }
        );
    });
}

/// The backlogs the scale figures compare.
const SCALES: [usize; 3] = [1_000, 100_000, 1_000_000];

/// Cold sweeps per size and round, and back-to-back blocks (of [`HOT_BLOCK`] sweeps) per size.
const COLD_SWEEPS: usize = 100;
const HOT_BLOCKS: usize = 10;
const HOT_BLOCK: usize = 50;

/// One stateless sweep at each of [`SCALES`], each size in a child process of its own (a size
/// seeded after another would inherit its heap), asked in turn: one cold sweep of each size,
/// then the next, so a noisy neighbour's burst lands on all three sizes, not on one size's
/// figure. Prints each size's median and the median of the paired ratios to the smallest.
fn sweep_at_scales() {
    use std::io::{BufRead, BufReader, Write};
    let exe = std::env::current_exe().unwrap();
    let mut children: Vec<_> = SCALES
        .iter()
        .map(|backlog| {
            std::process::Command::new(&exe)
                .args(["scale-serve", &backlog.to_string()])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut links: Vec<_> = children
        .iter_mut()
        .map(|c| {
            (
                c.stdin.take().unwrap(),
                BufReader::new(c.stdout.take().unwrap()).lines(),
            )
        })
        .collect();
    let mut ask = |child: usize, command: &str| -> String {
        let (input, output) = &mut links[child];
        writeln!(input, "{command}").unwrap();
        output.next().expect("the child answers").unwrap()
    };
    let mut ready = Vec::new();
    for child in 0..SCALES.len() {
        ready.push(ask(child, "ready"));
    }
    let mut cold = Turns::new(SCALES.len());
    let mut hot = Turns::new(SCALES.len());
    for turn in 0..COLD_SWEEPS {
        for child in cold.order(turn) {
            cold.push(child, ask(child, "cold").parse().unwrap());
        }
    }
    for turn in 0..HOT_BLOCKS {
        for child in hot.order(turn) {
            hot.push(child, ask(child, "hot").parse().unwrap());
        }
    }
    drop(links);
    for mut child in children {
        assert!(child.wait().unwrap().success(), "a scale child failed");
    }
    for (child, backlog) in SCALES.iter().enumerate() {
        let (c, h) = (cold.median(child), hot.median(child));
        let (cr, hr) = (cold.paired_ratio(child), hot.paired_ratio(child));
        figure(&format!("sweep_us:{backlog}"), format!("{c:.1}"));
        figure(&format!("sweep_hot_us:{backlog}"), format!("{h:.1}"));
        figure(&format!("sweep_ratio:{backlog}"), format!("{cr:.3}"));
        figure(&format!("sweep_hot_ratio:{backlog}"), format!("{hr:.3}"));
        println!(
            "  {}: one sweep {c:.1} us from cold caches (median of {COLD_SWEEPS}), {h:.1} us back \
             to back (median of {HOT_BLOCKS} blocks of {HOT_BLOCK}); to the smallest, paired: \
             {cr:.3} cold, {hr:.3} back to back",
            ready[child],
        );
    }
}

/// A child of [`sweep_at_scales`]: seeds `backlog` detached runs swept by stateless `sweep()`s
/// (batch 25, producing runs, the cursor kept with the lease), then answers one line per
/// command on stdin: `ready` (what it holds), `cold` (one sweep after evicting the caches, in
/// µs), `hot` (the median of a block of sweeps back to back, in µs).
fn serve_scale(backlog: usize) {
    use std::io::BufRead;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let store = MemoryStore::new();
    seed(&store, backlog, NOW - 60_000);
    let d = deps(
        &store,
        RunExitProbe::Producing,
        0,
        Arc::new(ManualClock::new(NOW)),
    );
    let mut options = ReapOptions::new(TTL, "bench");
    options.now = Some(NOW);
    let once = || {
        rt.block_on(async {
            let t0 = Instant::now();
            let report = sweep(&d, &options, 60_000).await;
            let us = t0.elapsed().as_secs_f64() * 1e6;
            assert_eq!(report.report.outcomes.producing, 25);
            (
                us,
                report.report.slo.backlog,
                report.report.slo.backlog_exact,
            )
        })
    };
    for _ in 0..20 {
        once();
    }
    let mut buffer = vec![0u64; evict_bytes() / 8];
    for command in std::io::stdin().lock().lines() {
        match command.unwrap().as_str() {
            "ready" => {
                let (_, figure, exact) = once();
                println!(
                    "backlog={backlog} (backlog figure {figure}{}; {} MiB evicted before each \
                     cold sweep)",
                    if exact { " exact" } else { " at least" },
                    (buffer.len() * 8) >> 20
                );
            }
            "cold" => {
                evict_caches(&mut buffer);
                println!("{}", once().0);
            }
            "hot" => {
                let mut times: Vec<f64> = (0..HOT_BLOCK).map(|_| once().0).collect();
                println!("{}", median(&mut times));
            }
            other => panic!("unknown command {other}"),
        }
    }
}

/// Twice this machine's last-level cache (from sysfs), at least 64 MiB and at most 1 GiB: a
/// scheduled sweep runs a minute after the last, when other work has long since taken the
/// caches, and the caches differ between machines of one kind (32 MiB on one, 300 on another).
fn evict_bytes() -> usize {
    let last_level = (0..8)
        .filter_map(|index| {
            let dir = format!("/sys/devices/system/cpu/cpu0/cache/index{index}");
            let level: u32 = std::fs::read_to_string(format!("{dir}/level"))
                .ok()?
                .trim()
                .parse()
                .ok()?;
            let size = std::fs::read_to_string(format!("{dir}/size")).ok()?;
            let size = size.trim();
            let bytes = match size.strip_suffix('K') {
                Some(k) => k.parse::<usize>().ok()? << 10,
                None => match size.strip_suffix('M') {
                    Some(m) => m.parse::<usize>().ok()? << 20,
                    None => size.parse().ok()?,
                },
            };
            Some((level, bytes))
        })
        .max()
        .map_or(0, |(_, bytes)| bytes);
    (2 * last_level).clamp(64 << 20, 1 << 30)
}

/// Writes one word of every cache line of `buffer`, evicting the sweep's data.
fn evict_caches(buffer: &mut [u64]) {
    for word in buffer.iter_mut().step_by(8) {
        *word = word.wrapping_add(1);
    }
    std::hint::black_box(buffer);
}

/// A provider answering "producing" after `ms` of real time.
struct SlowProbe(u64);

#[async_trait::async_trait]
impl ExitProbe for SlowProbe {
    async fn has_finished(&self, _r: &RunRecord) -> Result<RunExitProbe, ProbeError> {
        tokio::time::sleep(std::time::Duration::from_millis(self.0)).await;
        Ok(RunExitProbe::Producing)
    }
}

/// 100 producing runs behind a 50 ms provider, swept once at the handlers' default cap
/// (the sweep sizes its runs in flight itself): the wall time, and what the sizing chose.
fn concurrency_at_defaults() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = MemoryStore::new();
        seed(&store, 100, NOW - 60_000);
        let mut d = deps(
            &store,
            RunExitProbe::Producing,
            0,
            Arc::new(reaper_testkit::fakes::TokioClock::new(NOW)),
        );
        d.probe = Arc::new(SlowProbe(50));
        let mut options = ReapOptions::new(TTL, "bench");
        options.now = Some(NOW);
        options.max_runs = 100;
        options.concurrency = reaper_core::concurrency::DEFAULT_CAP;
        let t0 = Instant::now();
        let report = reap_detached_runs(&d, &options).await.unwrap();
        let wall = t0.elapsed().as_secs_f64();
        assert_eq!(report.outcomes.producing, 100);
        figure("concurrency_s", format!("{wall:.3}"));
        println!(
            "  100 producing runs behind a 50 ms provider at the default cap of {}: {wall:.3} s; \
             peak {} in flight, {}",
            options.concurrency, report.concurrency.peak, report.concurrency.why
        );
    });
}

fn run(workload: &str) {
    match workload {
        "producing" => sweep_workload(10_000, RunExitProbe::Producing, 0, NOW - 60_000, 30, false),
        "producing-fresh" => {
            sweep_workload(10_000, RunExitProbe::Producing, 0, NOW - 60_000, 30, true)
        }
        "finished" => sweep_workload(
            2_000,
            RunExitProbe::Finished { exit_code: 0 },
            20,
            NOW - 60_000,
            10,
            false,
        ),
        "expired" => sweep_workload(
            2_000,
            RunExitProbe::Producing,
            20,
            NOW - TTL as i64 - 1,
            10,
            false,
        ),
        "sentinel" => sentinel_scan(),
        "quiet" => default_quiet_window(),
        "requests" => {
            for backlog in [1_000, 100_000, 1_000_000] {
                requests_per_sweep(backlog);
            }
        }
        "scale" => sweep_at_scales(),
        "concurrency" => concurrency_at_defaults(),
        other => panic!("unknown workload {other}"),
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    match args.as_slice() {
        [serve, backlog] if serve == "scale-serve" => return serve_scale(backlog.parse().unwrap()),
        // For scripts/bench.sh under callgrind: the difference between two sweep counts is the
        // instructions of the sweeps alone, the same on any machine of the architecture.
        [w, sweeps] if w == "producing-sweeps" => {
            return sweep_workload(
                10_000,
                RunExitProbe::Producing,
                0,
                NOW - 60_000,
                sweeps.parse().unwrap(),
                false,
            )
        }
        [w, ..] => return run(w),
        [] => {}
    }
    let exe = std::env::current_exe().unwrap();
    let rounds: usize = std::env::var("REAPER_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .filter(|&r| r > 0)
        .unwrap_or(5);
    // Every value a figure took, one per round.
    let mut rounds_of: std::collections::HashMap<String, Vec<f64>> = Default::default();
    let workloads = [
        (
            "producing",
            "10,000 detached runs, all producing (reference: ~3.6 us/run, ~70 MB RSS)",
        ),
        (
            "producing-fresh",
            "the same with a fresh store seeded before every sweep",
        ),
        (
            "finished",
            "2,000 finished runs replaying 20 chunks of ~100 B (reference: ~190 us/run)",
        ),
        (
            "expired",
            "2,000 expired runs replaying 20 chunks of ~100 B (reference: ~187 us/run)",
        ),
        (
            "sentinel",
            "sentinel scan of a 4 KiB journal tail (reference: ~33 us)",
        ),
        (
            "quiet",
            "default quiet window, logs quiet for longer than it",
        ),
        (
            "requests",
            "run-store requests per stateless sweep (memory store, batch 25, producing runs)",
        ),
        (
            "scale",
            "one stateless sweep at 1k / 100k / 1M detached runs (memory store, batch 25)",
        ),
        (
            "concurrency",
            "100 producing runs behind a 50 ms provider at the default cap (sized at run time)",
        ),
    ];
    // Round by round, every workload once per round: a stretch of slow minutes on a shared
    // machine lands on every workload's figures alike, not on one workload's rounds.
    for round in 0..rounds {
        for (w, title) in workloads {
            if round == 0 && !title.is_empty() {
                println!("{title}");
            }
            let out = std::process::Command::new(&exe).arg(w).output().unwrap();
            assert!(
                out.status.success(),
                "workload {w} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                match line.strip_prefix(FIGURE).and_then(|f| f.split_once('=')) {
                    Some((name, value)) => {
                        if let Ok(v) = value.parse::<f64>() {
                            rounds_of.entry(name.to_string()).or_default().push(v);
                        }
                    }
                    // The first round's lines describe the workload; the rest repeat them.
                    None if round == 0 => println!("{line}"),
                    None => {}
                }
            }
        }
    }
    let figures = rounds_of
        .into_iter()
        .map(|(name, mut values)| {
            let (lo, hi) = (
                values.iter().copied().fold(f64::INFINITY, f64::min),
                values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            );
            let m = median(&mut values);
            let shown = if lo == hi {
                format!("{}", Trim(m))
            } else {
                format!("{} ({}–{})", Trim(m), Trim(lo), Trim(hi))
            };
            (name, shown)
        })
        .collect();
    println!(
        "\nmedian (range) of {rounds} rounds; load average at the end: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    print_table(&figures);
}

/// A figure without trailing zeros beyond what the workload printed.
struct Trim(f64);

impl std::fmt::Display for Trim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = format!("{:.3}", self.0);
        let s = s.trim_end_matches('0').trim_end_matches('.');
        f.write_str(s)
    }
}

/// The table, with this machine's figures beside the reference and the goal.
fn print_table(figures: &std::collections::HashMap<String, String>) {
    let find = |prefix: &str, outcome: &str| {
        figures
            .iter()
            .find(|(k, _)| k.starts_with(prefix) && k.contains(outcome))
            .map_or("not measured".to_string(), |(_, v)| v.clone())
    };
    let get = |k: &str| figures.get(k).cloned().unwrap_or("not measured".into());
    let mut rows = vec![
        (
            "leave-alone CPU per run (10k)".to_string(),
            "2.9 µs".to_string(),
            "≤ 0.3 µs".to_string(),
            format!("{} µs", find("cpu_per_run:10000:", "\"producing\":10000")),
        ),
        (
            "finalize / expire 20 chunks, CPU per run".into(),
            "113 / 98 µs".into(),
            "≤ 11 / 10 µs".into(),
            format!(
                "{} / {} µs",
                find("cpu_per_run:2000:", "\"finalized\":2000"),
                find("cpu_per_run:2000:", "\"expired\":2000")
            ),
        ),
        (
            "4 KiB tail decode + sentinel scan".into(),
            "60 µs".into(),
            "≤ 6 µs".into(),
            format!("{} µs", get("sentinel")),
        ),
        (
            "peak RSS, 10k listed runs, after 30 sweeps in one process".into(),
            "154 MiB".into(),
            "≤ 10 MiB".into(),
            format!(
                "{} MiB: one store of 10k records swept 30 times ({} MiB with a fresh store \
                 seeded before every sweep)",
                find("peak_rss:10000:", "\"producing\":10000"),
                find("peak_rss_fresh:10000:", "\"producing\":10000")
            ),
        ),
        (
            "store requests per sweep at 1k / 100k / 1M detached runs".into(),
            "grows with backlog".into(),
            "constant".into(),
            format!(
                "{} / {} / {} run-store requests (memory store, stateless sweeps; SQLite: \
                 reaper-sqlite's requests_per_sweep test; DynamoDB Local: reaper-dynamodb's \
                 requests bench; D1 in workerd at 1k / 100k: handlers/reaper-cloudflare's \
                 test/scale.test.mjs)",
                get("requests:1000"),
                get("requests:100000"),
                get("requests:1000000")
            ),
        ),
    ];
    rows.extend([
        (
            "one sweep at 1k / 100k / 1M detached runs (memory store, batch 25)".to_string(),
            "grows with backlog".to_string(),
            "within 10 %".to_string(),
            format!(
                "{} / {} / {} µs from cold caches, as a scheduled sweep runs; to 1k, paired: \
                 {} / {} ({} / {} / {} µs back to back; to 1k: {} / {})",
                get("sweep_us:1000"),
                get("sweep_us:100000"),
                get("sweep_us:1000000"),
                get("sweep_ratio:100000"),
                get("sweep_ratio:1000000"),
                get("sweep_hot_us:1000"),
                get("sweep_hot_us:100000"),
                get("sweep_hot_us:1000000"),
                get("sweep_hot_ratio:100000"),
                get("sweep_hot_ratio:1000000"),
            ),
        ),
        (
            "100 producing runs behind a 50 ms provider, defaults".into(),
            "5.1 s".into(),
            "≤ 0.5 s".into(),
            format!("{} s", get("concurrency_s")),
        ),
    ]);
    println!("\n| figure | reference | goal | this build: median (range) |\n|---|---|---|---|");
    for (figure, reference, goal, measured) in rows {
        println!("| {figure} | {reference} | {goal} | {measured} |");
    }
}
