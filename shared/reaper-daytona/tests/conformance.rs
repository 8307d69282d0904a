//! The provider conformance suite (reaper-testkit) against the Daytona provider, over the
//! native transport, through the fake Daytona (real `sh` in real directories, every exchange
//! checked against the stored OpenAPI documents).
//!
//! Daytona's toolbox returns stdout and stderr folded into one `result`, so the fixture declares
//! [`ProviderFixture::folds_stderr`]: the stream cases then hold it to the folded contract
//! (stderr on stdout in order, the bound on the one stream).

mod common;

use std::sync::Arc;

use common::{FakeDaytona, MISSING_ID, OUTPUT_LIMIT};
use reaper_core::SandboxProvider;
use reaper_testkit::conformance::provider::{self, ProviderFixture};
use reaper_testkit::conformance::{native_nonce, CaseContext, CaseResult, Verdict};

struct DaytonaFixture {
    fake: FakeDaytona,
}

impl DaytonaFixture {
    async fn start() -> DaytonaFixture {
        DaytonaFixture {
            fake: FakeDaytona::start().await,
        }
    }
}

#[async_trait::async_trait]
impl ProviderFixture for DaytonaFixture {
    fn provider(&self) -> &dyn SandboxProvider {
        &self.fake.provider
    }

    async fn create_sandbox(&self) -> Result<String, String> {
        Ok(self.fake.create().await)
    }

    fn output_limit(&self) -> usize {
        OUTPUT_LIMIT
    }

    fn missing_id(&self) -> String {
        MISSING_ID.into()
    }

    /// Daytona refuses the delete with a 409 (a state change in progress) while the sandbox
    /// stays started.
    async fn break_destroy(&self, id: &str) -> Result<Option<Arc<dyn SandboxProvider>>, String> {
        self.fake.refuse_delete(id, true);
        Ok(Some(Arc::new(self.fake.provider.clone())))
    }

    async fn heal_destroy(&self, id: &str) -> Result<(), String> {
        self.fake.refuse_delete(id, false);
        Ok(())
    }

    fn folds_stderr(&self) -> bool {
        true
    }
}

fn context(case: &str) -> CaseContext {
    CaseContext::new(&native_nonce(), case, Default::default())
}

fn passed(case: &str, result: CaseResult) {
    match result {
        Ok(Verdict::Passed) => {}
        Ok(Verdict::Skipped(why)) => panic!("{case} skipped: {why}"),
        Err(failure) => panic!("conformance case {case} failed: {failure}"),
    }
}

macro_rules! suite {
    ($($case:ident),* $(,)?) => {
        const RUN_HERE: &[&str] = &[$(stringify!($case),)*];

        $(
            #[tokio::test]
            async fn $case() {
                let fx = DaytonaFixture::start().await;
                let result = provider::$case(&fx, &context(stringify!($case))).await;
                passed(stringify!($case), result);
                fx.fake.assert_clean();
            }
        )*
    };
}

suite! {
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
}

/// A case added to the suite must be added here too.
#[test]
fn every_case_of_the_suite_runs_here() {
    let suite: Vec<&str> = provider::cases::<DaytonaFixture>()
        .iter()
        .map(|c| c.name)
        .collect();
    let mut missing: Vec<&str> = suite
        .iter()
        .copied()
        .filter(|c| !RUN_HERE.contains(c))
        .collect();
    missing.sort_unstable();
    assert!(missing.is_empty(), "suite cases not run: {missing:?}");
    assert_eq!(RUN_HERE.len(), suite.len());
}
