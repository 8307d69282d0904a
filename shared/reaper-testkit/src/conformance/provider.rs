//! The sandbox-provider suite: what the probe, the prune and reclaim rely on from any
//! `SandboxProvider` and its handles. Resume by id ("gone" is `None`, never an error), `exec` of
//! a shell command (stdout, stderr and exit code apart, no stdin, the output bound enforced as an
//! error, the timeout killing the command), destroy ("gone" is `Ok`, a failed teardown is an
//! `Err` that leaves the sandbox live).
//!
//! Each provider's test supplies a [`ProviderFixture`]: the provider, a way to make a live
//! sandbox, and a way to make one sandbox's destroy fail. The cases run real commands, so they
//! need a Linux sandbox with a POSIX `sh`, `/proc` and the usual tools (`head`, `grep`, `sleep`,
//! `cat`, `printf`); BusyBox has them all.
//!
//! Native only: the cases bound their waits with tokio's timer.

#![cfg(not(target_arch = "wasm32"))]

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use reaper_core::ports::{MaybeSend, MaybeSync};
use reaper_core::{ExecOptions, ExecOutput, SandboxError, SandboxHandle, SandboxProvider};

use super::{Case, CaseContext, CaseResult, Failure, Verdict};

/// What a provider's test supplies to run the suite.
#[async_trait::async_trait]
pub trait ProviderFixture: MaybeSend + MaybeSync {
    /// The provider under test.
    fn provider(&self) -> &dyn SandboxProvider;

    /// Makes a fresh, live sandbox and returns its id.
    async fn create_sandbox(&self) -> Result<String, String>;

    /// The per-stream output bound the provider enforces. Keep it small (a few KiB) so the cases
    /// cross it cheaply.
    fn output_limit(&self) -> usize;

    /// An id in the provider's syntax that names no sandbox.
    fn missing_id(&self) -> String;

    /// Makes destroying sandbox `id` fail, leaving it live, and returns the provider whose
    /// destroy now fails (the fixture's own, or one sharing its sandboxes). `Ok(None)` when this
    /// provider has no way to inject that fault: the case then skips.
    async fn break_destroy(&self, id: &str) -> Result<Option<Arc<dyn SandboxProvider>>, String>;

    /// Undoes [`break_destroy`](Self::break_destroy).
    async fn heal_destroy(&self, id: &str) -> Result<(), String>;

    /// Whether the provider folds stderr into stdout (Daytona's exec API has one output
    /// stream; the spec allows it, which is why every command the core builds silences
    /// stderr). The stream cases then hold the provider to the folded contract: stderr arrives
    /// on stdout in order, `stderr` is empty, and the bound applies to the one stream.
    fn folds_stderr(&self) -> bool {
        false
    }
}

/// Every case of the suite, for runners that cannot use the test macro.
pub fn cases<F: ProviderFixture + ?Sized>() -> Vec<Case<F>> {
    crate::__reaper_provider_cases! { list {} }
}

#[doc(hidden)]
#[macro_export]
macro_rules! __reaper_provider_cases {
    ($mode:ident $args:tt) => {
        $crate::__reaper_provider_expand! { $mode $args [
            resume_of_a_missing_id_is_none,
            resume_of_a_live_sandbox_is_a_handle_with_its_id,
            exec_returns_stdout_stderr_and_the_exit_code,
            exec_passes_the_command_to_sh_verbatim,
            exec_decodes_invalid_utf8_lossily,
            exec_gives_the_command_no_stdin,
            exec_output_at_the_bound_is_returned_whole,
            exec_stdout_beyond_the_bound_is_an_output_limit_error,
            exec_stderr_beyond_the_bound_is_an_output_limit_error,
            exec_of_an_endless_output_stops_at_the_bound_and_kills_the_command,
            exec_past_its_timeout_is_a_timeout_error_and_kills_the_command,
            destroy_then_resume_is_none,
            exec_through_a_handle_of_a_destroyed_sandbox_is_not_found,
            destroy_of_a_missing_id_is_ok_and_repeatable,
            destroy_ends_an_exec_still_running,
            a_failed_destroy_is_an_error_and_the_sandbox_stays_live,
        ] }
    };
}

/// Expands the provider suite's case list into tests or a `Vec<Case<_>>`. Not for direct use.
/// In tests, the factory evaluates to `Option<_>`: `None` skips the case (the factory must say
/// why on stderr).
#[doc(hidden)]
#[macro_export]
macro_rules! __reaper_provider_expand {
    (tests { factory: $factory:expr } [$($case:ident),* $(,)?]) => {
        $(
            #[::tokio::test]
            async fn $case() {
                let Some(fixture) = $factory.await else {
                    return;
                };
                let ctx = $crate::conformance::CaseContext::new(
                    &$crate::conformance::native_nonce(),
                    stringify!($case),
                    ::std::default::Default::default(),
                );
                $crate::conformance::conclude(
                    stringify!($case),
                    $crate::conformance::provider::$case(&*fixture, &ctx).await,
                );
            }
        )*
    };
    (list {} [$($case:ident),* $(,)?]) => {
        $crate::__reaper_conformance_expand! { list {} provider [$($case),*] }
    };
}

/// Unwraps a result, failing the case with `what` and the error.
macro_rules! attempt {
    ($result:expr, $($what:tt)+) => {
        match $result {
            Ok(value) => value,
            Err(e) => {
                return Err(Failure::at(
                    format!("{}: {e}", format!($($what)+)),
                    file!(),
                    line!(),
                ))
            }
        }
    };
}

/// The longest any single wait on the sandbox may take before the case fails.
const BOUND: Duration = Duration::from_secs(30);

fn opts(timeout_ms: u64) -> ExecOptions {
    ExecOptions { timeout_ms }
}

async fn live<F: ProviderFixture + ?Sized>(
    fx: &F,
) -> Result<(String, Arc<dyn SandboxHandle>), Failure> {
    let id = attempt!(fx.create_sandbox().await, "create a sandbox");
    let handle = attempt!(fx.provider().resume(&id).await, "resume {id}");
    match handle {
        Some(handle) => Ok((id, handle)),
        None => Err(Failure::at(
            format!("resume of the sandbox {id} just created is None"),
            file!(),
            line!(),
        )),
    }
}

async fn run(handle: &dyn SandboxHandle, command: &str) -> Result<ExecOutput, Failure> {
    Ok(attempt!(
        handle.exec(command, opts(BOUND.as_millis() as u64)).await,
        "exec {command:?}"
    ))
}

async fn cleanup<F: ProviderFixture + ?Sized>(fx: &F, id: &str) -> Result<(), Failure> {
    attempt!(fx.provider().destroy(id).await, "destroy {id}");
    Ok(())
}

/// Whether process `pid` of the sandbox is still running (a zombie is not), asked in the
/// sandbox itself.
async fn alive(handle: &dyn SandboxHandle, pid: &str) -> Result<bool, Failure> {
    let out = run(
        handle,
        &format!(
            "if [ -e /proc/{pid} ] && ! grep -q '^State:[[:space:]]*Z' /proc/{pid}/status \
             2>/dev/null; then echo alive; else echo dead; fi"
        ),
    )
    .await?;
    Ok(out.stdout == "alive\n")
}

/// Whether process `pid` of the sandbox has ended (or does so within the bound).
async fn gone(handle: &dyn SandboxHandle, pid: &str) -> Result<bool, Failure> {
    eventually(BOUND, || async {
        Ok::<_, Failure>(!alive(handle, pid).await?)
    })
    .await
}

/// Polls `condition` until it holds or `within` passes: a bound on a real event.
async fn eventually<Fut>(
    within: Duration,
    mut condition: impl FnMut() -> Fut,
) -> Result<bool, Failure>
where
    Fut: Future<Output = Result<bool, Failure>>,
{
    let deadline = Instant::now() + within;
    loop {
        if condition().await? {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The pid a command wrote to `file` (relative to the command's working directory), once it has.
async fn read_pid(handle: &dyn SandboxHandle, file: &str) -> Result<String, Failure> {
    let deadline = Instant::now() + BOUND;
    loop {
        let out = run(handle, &format!("cat {file} 2>/dev/null")).await?;
        let pid = out.stdout.trim();
        if !pid.is_empty() && out.stdout.ends_with('\n') {
            return Ok(pid.to_string());
        }
        ensure!(
            Instant::now() < deadline,
            "the command never wrote its pid to {file}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Checks that resume of a missing id is none.
pub async fn resume_of_a_missing_id_is_none<F: ProviderFixture + ?Sized>(
    fx: &F,
    _ctx: &CaseContext,
) -> CaseResult {
    let id = fx.missing_id();
    let resumed = attempt!(fx.provider().resume(&id).await, "resume {id}");
    ensure!(
        resumed.is_none(),
        "resume of {id}, which names no sandbox, is a handle"
    );
    Ok(Verdict::Passed)
}

/// Checks that resume of a live sandbox is a handle with its id.
pub async fn resume_of_a_live_sandbox_is_a_handle_with_its_id<F: ProviderFixture + ?Sized>(
    fx: &F,
    _ctx: &CaseContext,
) -> CaseResult {
    let (id, handle) = live(fx).await?;
    ensure_eq!(handle.id(), id.as_str(), "the handle's id");
    let again = attempt!(fx.provider().resume(&id).await, "resume {id} again");
    ensure!(
        again.is_some(),
        "a second resume of live sandbox {id} is None"
    );
    cleanup(fx, &id).await?;
    Ok(Verdict::Passed)
}

/// Checks that exec returns stdout stderr and the exit code.
pub async fn exec_returns_stdout_stderr_and_the_exit_code<F: ProviderFixture + ?Sized>(
    fx: &F,
    _ctx: &CaseContext,
) -> CaseResult {
    let (id, handle) = live(fx).await?;
    let out = run(&*handle, "printf 'out\\n'; printf 'err\\n' >&2; exit 7").await?;
    let expected = if fx.folds_stderr() {
        ("out\nerr\n", "", 7)
    } else {
        ("out\n", "err\n", 7)
    };
    ensure_eq!(
        (out.stdout.as_str(), out.stderr.as_str(), out.exit_code),
        expected,
        "stdout, stderr and exit code"
    );
    let ok = run(&*handle, "true").await?;
    ensure_eq!(
        (ok.stdout.as_str(), ok.stderr.as_str(), ok.exit_code),
        ("", "", 0),
        "a silent success"
    );
    cleanup(fx, &id).await?;
    Ok(Verdict::Passed)
}

/// Quotes, `$`, backslashes and newlines reach `sh -c` untouched: the provider adds no layer of
/// quoting of its own.
pub async fn exec_passes_the_command_to_sh_verbatim<F: ProviderFixture + ?Sized>(
    fx: &F,
    _ctx: &CaseContext,
) -> CaseResult {
    let (id, handle) = live(fx).await?;
    let command = "x='a b'\nprintf '%s|%s\\n' \"$x\" \"it's \\\"q\\\" \\\\ $((1+2))\"";
    let out = run(&*handle, command).await?;
    ensure_eq!(out.stdout.as_str(), "a b|it's \"q\" \\ 3\n", "stdout");
    cleanup(fx, &id).await?;
    Ok(Verdict::Passed)
}

/// Checks that exec decodes invalid utf8 lossily.
pub async fn exec_decodes_invalid_utf8_lossily<F: ProviderFixture + ?Sized>(
    fx: &F,
    _ctx: &CaseContext,
) -> CaseResult {
    let (id, handle) = live(fx).await?;
    let out = run(&*handle, "printf 'caf\\303\\251 \\377!'").await?;
    ensure_eq!(out.stdout.as_str(), "café \u{fffd}!", "stdout");
    cleanup(fx, &id).await?;
    Ok(Verdict::Passed)
}

/// A command that reads stdin sees its end at once instead of waiting for input that never
/// comes.
pub async fn exec_gives_the_command_no_stdin<F: ProviderFixture + ?Sized>(
    fx: &F,
    _ctx: &CaseContext,
) -> CaseResult {
    let (id, handle) = live(fx).await?;
    let out = attempt!(
        handle
            .exec(
                "if read -r line; then echo \"read:$line\"; else echo eof; fi",
                opts(10_000),
            )
            .await,
        "exec a read of stdin"
    );
    ensure_eq!(out.stdout.as_str(), "eof\n", "what the command read");
    cleanup(fx, &id).await?;
    Ok(Verdict::Passed)
}

/// Checks that exec output at the bound is returned whole.
pub async fn exec_output_at_the_bound_is_returned_whole<F: ProviderFixture + ?Sized>(
    fx: &F,
    _ctx: &CaseContext,
) -> CaseResult {
    let (id, handle) = live(fx).await?;
    let limit = fx.output_limit();
    if fx.folds_stderr() {
        // One stream: half the bound on each fills it exactly.
        let (a, b) = (limit / 2, limit - limit / 2);
        let out = run(
            &*handle,
            &format!("head -c {a} /dev/zero; head -c {b} /dev/zero >&2"),
        )
        .await?;
        ensure_eq!(
            (out.stdout.len(), out.stderr.len()),
            (limit, 0),
            "bytes returned at exactly the bound of the folded stream"
        );
    } else {
        let out = run(
            &*handle,
            &format!("head -c {limit} /dev/zero; head -c {limit} /dev/zero >&2"),
        )
        .await?;
        ensure_eq!(
            (out.stdout.len(), out.stderr.len()),
            (limit, limit),
            "bytes returned at exactly the bound"
        );
    }
    cleanup(fx, &id).await?;
    Ok(Verdict::Passed)
}

fn is_output_limit(result: &Result<ExecOutput, SandboxError>, stream: &str, limit: usize) -> bool {
    matches!(result, Err(SandboxError::OutputLimit { stream: s, limit: l })
        if s == stream && *l == limit as u64)
}

/// Checks that exec stdout beyond the bound is an output limit error.
pub async fn exec_stdout_beyond_the_bound_is_an_output_limit_error<F: ProviderFixture + ?Sized>(
    fx: &F,
    _ctx: &CaseContext,
) -> CaseResult {
    let (id, handle) = live(fx).await?;
    let limit = fx.output_limit();
    let result = handle
        .exec(&format!("head -c {} /dev/zero", limit + 1), opts(20_000))
        .await;
    ensure!(
        is_output_limit(&result, "stdout", limit),
        "one byte past the {limit}-byte bound on stdout: expected an output-limit error, got \
         {result:?}"
    );
    cleanup(fx, &id).await?;
    Ok(Verdict::Passed)
}

/// Checks that exec stderr beyond the bound is an output limit error.
pub async fn exec_stderr_beyond_the_bound_is_an_output_limit_error<F: ProviderFixture + ?Sized>(
    fx: &F,
    _ctx: &CaseContext,
) -> CaseResult {
    let (id, handle) = live(fx).await?;
    let limit = fx.output_limit();
    let result = handle
        .exec(
            &format!("head -c {} /dev/zero >&2", limit + 1),
            opts(20_000),
        )
        .await;
    // A folded stderr overflows the one stream there is.
    let stream = if fx.folds_stderr() {
        "stdout"
    } else {
        "stderr"
    };
    ensure!(
        is_output_limit(&result, stream, limit),
        "one byte past the {limit}-byte bound on stderr: expected an output-limit error on \
         {stream}, got {result:?}"
    );
    cleanup(fx, &id).await?;
    Ok(Verdict::Passed)
}

/// The bound is enforced while reading: a command that never stops printing fails long before
/// its timeout, and is killed rather than left printing into nothing.
pub async fn exec_of_an_endless_output_stops_at_the_bound_and_kills_the_command<
    F: ProviderFixture + ?Sized,
>(
    fx: &F,
    _ctx: &CaseContext,
) -> CaseResult {
    let (id, handle) = live(fx).await?;
    let limit = fx.output_limit();
    let timeout_ms = 60_000;
    let started = Instant::now();
    let result = handle
        .exec("echo $$ > endless.pid; exec yes", opts(timeout_ms))
        .await;
    let took = started.elapsed();
    ensure!(
        is_output_limit(&result, "stdout", limit),
        "an endless stdout: expected an output-limit error, got {result:?}"
    );
    ensure!(
        took < Duration::from_millis(timeout_ms / 2),
        "the output-limit error took {took:?}: the bound was not enforced while reading"
    );
    let pid = read_pid(&*handle, "endless.pid").await?;
    ensure!(
        gone(&*handle, &pid).await?,
        "the endless command (pid {pid}) still runs after its output-limit error"
    );
    cleanup(fx, &id).await?;
    Ok(Verdict::Passed)
}

/// Checks that exec past its timeout is a timeout error and kills the command.
pub async fn exec_past_its_timeout_is_a_timeout_error_and_kills_the_command<
    F: ProviderFixture + ?Sized,
>(
    fx: &F,
    _ctx: &CaseContext,
) -> CaseResult {
    let (id, handle) = live(fx).await?;
    let started = Instant::now();
    let result = handle
        .exec(
            "sleep 600 >/dev/null 2>&1 & echo $! > bg.pid; echo $$ > fg.pid; sleep 600",
            opts(700),
        )
        .await;
    let took = started.elapsed();
    ensure!(
        matches!(result, Err(SandboxError::Timeout(700))),
        "a command past its 700 ms timeout: expected a timeout error, got {result:?}"
    );
    ensure!(
        took < BOUND,
        "the timeout error took {took:?} for a 700 ms timeout"
    );
    for file in ["fg.pid", "bg.pid"] {
        let pid = read_pid(&*handle, file).await?;
        ensure!(
            gone(&*handle, &pid).await?,
            "the timed-out command's process {pid} ({file}) still runs"
        );
    }
    // The sandbox itself is unharmed.
    let after = run(&*handle, "echo still-here").await?;
    ensure_eq!(
        after.stdout.as_str(),
        "still-here\n",
        "an exec after the timeout"
    );
    cleanup(fx, &id).await?;
    Ok(Verdict::Passed)
}

/// Checks that destroy then resume is none.
pub async fn destroy_then_resume_is_none<F: ProviderFixture + ?Sized>(
    fx: &F,
    _ctx: &CaseContext,
) -> CaseResult {
    let (id, _handle) = live(fx).await?;
    attempt!(fx.provider().destroy(&id).await, "destroy {id}");
    let resumed = attempt!(fx.provider().resume(&id).await, "resume destroyed {id}");
    ensure!(
        resumed.is_none(),
        "resume of destroyed sandbox {id} is a handle"
    );
    Ok(Verdict::Passed)
}

/// Checks that exec through a handle of a destroyed sandbox is not found.
pub async fn exec_through_a_handle_of_a_destroyed_sandbox_is_not_found<
    F: ProviderFixture + ?Sized,
>(
    fx: &F,
    _ctx: &CaseContext,
) -> CaseResult {
    let (id, handle) = live(fx).await?;
    attempt!(fx.provider().destroy(&id).await, "destroy {id}");
    let result = handle.exec("echo hi", opts(10_000)).await;
    ensure!(
        matches!(result, Err(SandboxError::NotFound(_))),
        "exec in destroyed sandbox {id}: expected not-found, got {result:?}"
    );
    Ok(Verdict::Passed)
}

/// Checks that destroy of a missing id is ok and repeatable.
pub async fn destroy_of_a_missing_id_is_ok_and_repeatable<F: ProviderFixture + ?Sized>(
    fx: &F,
    _ctx: &CaseContext,
) -> CaseResult {
    let missing = fx.missing_id();
    attempt!(
        fx.provider().destroy(&missing).await,
        "destroy of {missing}, which names no sandbox"
    );
    let (id, _handle) = live(fx).await?;
    attempt!(fx.provider().destroy(&id).await, "destroy {id}");
    attempt!(fx.provider().destroy(&id).await, "a second destroy of {id}");
    Ok(Verdict::Passed)
}

/// A destroy while a command runs ends that command's `exec` (with an error or the killed
/// command's status): nothing waits on a sandbox that no longer exists.
pub async fn destroy_ends_an_exec_still_running<F: ProviderFixture + ?Sized>(
    fx: &F,
    _ctx: &CaseContext,
) -> CaseResult {
    let (id, handle) = live(fx).await?;
    let exec = handle.exec("echo $$ > running.pid; exec sleep 600", opts(120_000));
    let destroy = async {
        read_pid(&*handle, "running.pid").await?;
        attempt!(fx.provider().destroy(&id).await, "destroy {id}");
        Ok::<_, Failure>(Instant::now())
    };
    let (ended, destroyed) =
        match tokio::time::timeout(BOUND * 2, futures::future::join(exec, destroy)).await {
            Ok((result, destroyed)) => (result, destroyed?),
            Err(_) => {
                return Err(Failure::at(
                    format!(
                        "an exec in sandbox {id} still runs {:?} after destroy",
                        BOUND * 2
                    ),
                    file!(),
                    line!(),
                ))
            }
        };
    let lag = destroyed.elapsed();
    ensure!(
        lag < BOUND,
        "the exec ended {lag:?} after the destroy returned"
    );
    if let Ok(out) = &ended {
        ensure!(
            out.exit_code != 0,
            "the exec of a destroyed sandbox reported success: {out:?}"
        );
    }
    Ok(Verdict::Passed)
}

/// Checks that a failed destroy is an error and the sandbox stays live.
pub async fn a_failed_destroy_is_an_error_and_the_sandbox_stays_live<
    F: ProviderFixture + ?Sized,
>(
    fx: &F,
    _ctx: &CaseContext,
) -> CaseResult {
    let (id, handle) = live(fx).await?;
    let Some(failing) = attempt!(fx.break_destroy(&id).await, "break destroy of {id}") else {
        cleanup(fx, &id).await?;
        return Ok(Verdict::Skipped(
            "the fixture cannot make a destroy fail".into(),
        ));
    };
    let result = failing.destroy(&id).await;
    ensure!(
        result.is_err(),
        "a destroy that could not tear sandbox {id} down returned Ok"
    );
    let resumed = attempt!(
        fx.provider().resume(&id).await,
        "resume {id} after the failure"
    );
    ensure!(
        resumed.is_some(),
        "sandbox {id} is gone after a failed destroy"
    );
    let out = run(&*handle, "echo alive").await?;
    ensure_eq!(
        out.stdout.as_str(),
        "alive\n",
        "an exec after the failed destroy"
    );
    attempt!(fx.heal_destroy(&id).await, "heal destroy of {id}");
    cleanup(fx, &id).await?;
    let resumed = attempt!(fx.provider().resume(&id).await, "resume {id} after cleanup");
    ensure!(
        resumed.is_none(),
        "sandbox {id} survived the healed destroy"
    );
    Ok(Verdict::Passed)
}
