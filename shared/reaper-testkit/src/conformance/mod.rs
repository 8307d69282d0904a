//! One conformance suite per store port. Every backend runs all of it.
//!
//! Each case is a plain `async fn case<S>(store: &S, ctx: &CaseContext) -> CaseResult`. Cases
//! return a [`Failure`] instead of panicking, so a runner that cannot survive a panic (a Worker
//! under workerd aborts on one) can still run every case and report each.
//!
//! Two ways to run a suite:
//!
//! - Under tokio, one named `#[tokio::test]` per case, from a macro given an async expression
//!   that builds a fresh backend for each case (the consumer needs `tokio` with the `macros` and
//!   `rt` features as a dev-dependency):
//!
//!   ```text
//!   reaper_testkit::store_conformance!(async { Arc::new(MemoryStore::new()) });
//!   // or one port at a time, declaring optional capabilities the backend lacks:
//!   reaper_testkit::run_store_conformance!(async { open().await }, lacks = [list_by_thread]);
//!   ```
//!
//!   The expression must evaluate to something that dereferences to the backend (`Arc<S>`,
//!   `Box<S>`, `&S`). Item paths in it resolve as in the calling module.
//!
//! - Anywhere else (a single-threaded Worker with `!Send` futures), take the list of cases from
//!   [`run_store::cases`] (and the other suites' `cases`) and run them with [`run_cases`].
//!
//! Every case builds its ids from [`CaseContext::id`], a prefix unique to the case and the
//! process, so backends can share one database or table between cases and between runs.

use std::fmt;

use reaper_core::ports::{BoxFuture, RunStoreCapabilities};
use reaper_core::StoreError;

/// Fails the case unless the condition holds.
macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err($crate::conformance::Failure::at(
                format!($($msg)+),
                file!(),
                line!(),
            ));
        }
    };
}

/// Fails the case unless `actual == expected`, showing both.
macro_rules! ensure_eq {
    ($actual:expr, $expected:expr, $($msg:tt)+) => {
        match (&$actual, &$expected) {
            (actual, expected) => {
                if actual != expected {
                    return Err($crate::conformance::Failure::at(
                        format!(
                            "{}\n  expected: {:?}\n       got: {:?}",
                            format!($($msg)+),
                            expected,
                            actual
                        ),
                        file!(),
                        line!(),
                    ));
                }
            }
        }
    };
}

pub mod delivery_log;
pub mod detached_view;
pub mod lease_store;
pub mod message_store;
pub mod provider;
pub mod reclaim_ledger;
pub mod run_store;
pub mod sandbox_instance_store;
#[cfg(test)]
mod self_test;
// Run natively by each store's own test (it names itself with `native_nonce`); the Worker's wasm
// build of the suites has no use for it.
#[cfg(not(target_arch = "wasm32"))]
pub mod sweep_cap;

/// What a case concluded when it did not fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every check held.
    Passed,
    /// The case covers an optional capability the backend declared absent. The case still
    /// checked that the backend reports the absence consistently before skipping.
    Skipped(String),
}

/// Why a case failed: what was wrong, and where in the suite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// What was wrong, and where.
    pub message: String,
}

impl Failure {
    /// A failure with `message`, located at `file:line`.
    pub fn at(message: String, file: &str, line: u32) -> Self {
        Failure {
            message: format!("{message}\n  at {file}:{line}"),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

impl From<StoreError> for Failure {
    /// `?` on a store call: the location is the `?` in the case.
    #[track_caller]
    fn from(e: StoreError) -> Self {
        let at = std::panic::Location::caller();
        Failure::at(format!("unexpected store error: {e}"), at.file(), at.line())
    }
}

/// What a case returns.
pub type CaseResult = Result<Verdict, Failure>;

/// What a case needs besides the backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaseContext {
    /// Prepended to every id the case writes (runs, threads, lease keys, sandbox keys).
    pub prefix: String,
    /// The optional run-store capabilities the backend declares. A case for a capability checks
    /// that `RunStore::capabilities()` agrees, so an undeclared gap fails rather than skips.
    pub capabilities: RunStoreCapabilities,
}

impl CaseContext {
    /// `nonce` must differ between processes sharing a database (see [`native_nonce`]); the case
    /// name makes the prefix unique within one.
    pub fn new(nonce: &str, case: &str, capabilities: RunStoreCapabilities) -> Self {
        CaseContext {
            prefix: format!("{nonce}-{case}-"),
            capabilities,
        }
    }

    /// A fresh id for this case.
    pub fn id(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }
}

/// A nonce unique to this process run: the process id and the start time. Native targets only
/// (`SystemTime::now()` panics on `wasm32-unknown-unknown`; a Worker passes its own nonce).
#[cfg(not(target_arch = "wasm32"))]
pub fn native_nonce() -> String {
    use std::sync::OnceLock;
    static NONCE: OnceLock<String> = OnceLock::new();
    NONCE
        .get_or_init(|| {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default();
            format!("ct{}x{nanos}", std::process::id())
        })
        .clone()
}

/// One case of a suite, as a value: its name and its function.
pub struct Case<S: ?Sized> {
    /// The case's name (its function's).
    pub name: &'static str,
    /// Runs the case against a backend.
    pub run: for<'a> fn(&'a S, &'a CaseContext) -> BoxFuture<'a, CaseResult>,
}

impl<S: ?Sized> Clone for Case<S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S: ?Sized> Copy for Case<S> {}

impl<S: ?Sized> fmt::Debug for Case<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Case").field("name", &self.name).finish()
    }
}

/// The outcome of one case under [`run_cases`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaseReport {
    /// The case's name.
    pub name: &'static str,
    /// What it concluded.
    pub result: Result<Verdict, Failure>,
}

/// Runs cases one after another against one backend and reports each. Cases share the backend
/// (their ids never collide), so this also checks that a backend tolerates neighbours.
pub async fn run_cases<S: ?Sized>(
    backend: &S,
    cases: &[Case<S>],
    nonce: &str,
    capabilities: RunStoreCapabilities,
) -> Vec<CaseReport> {
    let mut reports = Vec::with_capacity(cases.len());
    for case in cases {
        let ctx = CaseContext::new(nonce, case.name, capabilities);
        let result = (case.run)(backend, &ctx).await;
        reports.push(CaseReport {
            name: case.name,
            result,
        });
    }
    reports
}

/// Turns a case's result into a test outcome: a failure panics with its message, a skip says so
/// on stderr (captured by the test harness, shown with `--nocapture`).
#[doc(hidden)]
pub fn conclude(case: &str, result: CaseResult) {
    match result {
        Ok(Verdict::Passed) => {}
        Ok(Verdict::Skipped(reason)) => eprintln!("{case}: skipped: {reason}"),
        Err(failure) => panic!("conformance case {case} failed: {failure}"),
    }
}

#[doc(hidden)]
pub use reaper_core as __core;

/// Expands a suite's case list, given by the suite's own `__reaper_*_cases!` macro, into tests
/// or into a `Vec<Case<_>>`. Not for direct use.
#[doc(hidden)]
#[macro_export]
macro_rules! __reaper_conformance_expand {
    (tests { factory: $factory:expr, lacks: [$($lack:ident),*] } $suite:ident [$($case:ident),* $(,)?]) => {
        fn declared_capabilities() -> $crate::conformance::__core::ports::RunStoreCapabilities {
            #[allow(unused_mut)]
            let mut caps = $crate::conformance::__core::ports::RunStoreCapabilities::default();
            $(caps.$lack = false;)*
            caps
        }
        $(
            #[::tokio::test]
            async fn $case() {
                let backend = $factory.await;
                let ctx = $crate::conformance::CaseContext::new(
                    &$crate::conformance::native_nonce(),
                    stringify!($case),
                    declared_capabilities(),
                );
                $crate::conformance::conclude(
                    stringify!($case),
                    $crate::conformance::$suite::$case(&*backend, &ctx).await,
                );
            }
        )*
    };
    (list {} $suite:ident [$($case:ident),* $(,)?]) => {
        vec![$(
            $crate::conformance::Case {
                name: stringify!($case),
                run: |store, ctx| ::std::boxed::Box::pin($crate::conformance::$suite::$case(store, ctx)),
            }
        ),*]
    };
}

/// The run-store suite: one `#[tokio::test]` per case in a module `run_store_conformance`.
/// `lacks = [list_by_thread, list_reclaimable]` declares optional capabilities the backend does
/// not have; their cases then check the absence is reported consistently and skip.
#[macro_export]
macro_rules! run_store_conformance {
    ($factory:expr $(, lacks = [$($lack:ident),* $(,)?])? $(,)?) => {
        mod run_store_conformance {
            #[allow(unused_imports)]
            use super::*;
            $crate::__reaper_run_store_cases! { tests { factory: $factory, lacks: [$($($lack),*)?] } }
        }
    };
}

/// The lease-store suite, in a module `lease_store_conformance`.
#[macro_export]
macro_rules! lease_store_conformance {
    ($factory:expr $(,)?) => {
        mod lease_store_conformance {
            #[allow(unused_imports)]
            use super::*;
            $crate::__reaper_lease_store_cases! { tests { factory: $factory, lacks: [] } }
        }
    };
}

/// The delivery-log suite, in a module `delivery_log_conformance`. The backend must also be the
/// `RunStore` whose `driverEpoch` fences its appends.
#[macro_export]
macro_rules! delivery_log_conformance {
    ($factory:expr $(,)?) => {
        mod delivery_log_conformance {
            #[allow(unused_imports)]
            use super::*;
            $crate::__reaper_delivery_log_cases! { tests { factory: $factory, lacks: [] } }
        }
    };
}

/// The sandbox-instance-store suite, in a module `sandbox_instance_store_conformance`.
#[macro_export]
macro_rules! sandbox_instance_store_conformance {
    ($factory:expr $(,)?) => {
        mod sandbox_instance_store_conformance {
            #[allow(unused_imports)]
            use super::*;
            $crate::__reaper_sandbox_instance_store_cases! { tests { factory: $factory, lacks: [] } }
        }
    };
}

/// The message-store suite, in a module `message_store_conformance`.
#[macro_export]
macro_rules! message_store_conformance {
    ($factory:expr $(,)?) => {
        mod message_store_conformance {
            #[allow(unused_imports)]
            use super::*;
            $crate::__reaper_message_store_cases! { tests { factory: $factory, lacks: [] } }
        }
    };
}

/// The reclaim-ledger suite, in a module `reclaim_ledger_conformance`.
#[macro_export]
macro_rules! reclaim_ledger_conformance {
    ($factory:expr $(,)?) => {
        mod reclaim_ledger_conformance {
            #[allow(unused_imports)]
            use super::*;
            $crate::__reaper_reclaim_ledger_cases! { tests { factory: $factory, lacks: [] } }
        }
    };
}

/// Every suite, for a backend that implements every store port on one value.
#[macro_export]
macro_rules! store_conformance {
    ($factory:expr $(, lacks = [$($lack:ident),* $(,)?])? $(,)?) => {
        $crate::run_store_conformance!($factory $(, lacks = [$($lack),*])?);
        $crate::lease_store_conformance!($factory);
        $crate::delivery_log_conformance!($factory);
        $crate::sandbox_instance_store_conformance!($factory);
        $crate::message_store_conformance!($factory);
        $crate::reclaim_ledger_conformance!($factory);
        $crate::detached_view_conformance!($factory);
    };
}

/// The detached-view suite (a run store read joined with the sandbox instances), in a module
/// `detached_view_conformance`, for a backend that implements both ports on one value.
#[macro_export]
macro_rules! detached_view_conformance {
    ($factory:expr $(,)?) => {
        mod detached_view_conformance {
            #[allow(unused_imports)]
            use super::*;
            $crate::__reaper_detached_view_cases! { tests { factory: $factory, lacks: [] } }
        }
    };
}

/// The sandbox-provider suite, in a module `provider_conformance`. The factory evaluates to an
/// `Option` of something that dereferences to a [`provider::ProviderFixture`]; `None` skips
/// every case (the factory says why, e.g. no daemon configured outside CI).
#[macro_export]
macro_rules! provider_conformance {
    ($factory:expr $(,)?) => {
        mod provider_conformance {
            #[allow(unused_imports)]
            use super::*;
            $crate::__reaper_provider_cases! { tests { factory: $factory } }
        }
    };
}
