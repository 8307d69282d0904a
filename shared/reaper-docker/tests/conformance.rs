//! The provider conformance suite (reaper-testkit), against the Docker provider on a real dockerd
//! and against the local provider, so both are held to the same behaviours.

mod common;

mod docker {
    use super::common::DockerFixture;

    reaper_testkit::provider_conformance!(DockerFixture::new());
}

mod local {
    use std::sync::Arc;

    use reaper_core::SandboxProvider;
    use reaper_local::{
        CreateOptions, LocalProviderOptions, LocalSandboxProvider, DESTROY_FAILS_FLAG,
    };
    use reaper_testkit::conformance::provider::ProviderFixture;

    use super::common::OUTPUT_LIMIT;

    /// The local provider with the small bound, honouring its destroy fault flag.
    pub struct LocalFixture {
        provider: LocalSandboxProvider,
        _root: tempfile::TempDir,
    }

    impl LocalFixture {
        pub async fn new() -> Option<Arc<Self>> {
            let root = tempfile::tempdir().expect("temp dir");
            let mut options = LocalProviderOptions::new(root.path().join("sandboxes"));
            options.output_limit = OUTPUT_LIMIT;
            options.destroy_fails_flag = true;
            Some(Arc::new(LocalFixture {
                provider: LocalSandboxProvider::new(options),
                _root: root,
            }))
        }

        fn flag(&self, id: &str) -> std::path::PathBuf {
            self.provider.root().join(id).join(DESTROY_FAILS_FLAG)
        }
    }

    #[async_trait::async_trait]
    impl ProviderFixture for LocalFixture {
        fn provider(&self) -> &dyn SandboxProvider {
            &self.provider
        }

        async fn create_sandbox(&self) -> Result<String, String> {
            self.provider
                .create(CreateOptions::default())
                .await
                .map(|s| s.id().to_string())
                .map_err(|e| e.to_string())
        }

        fn output_limit(&self) -> usize {
            OUTPUT_LIMIT
        }

        fn missing_id(&self) -> String {
            "sbx-0000000000000000".into()
        }

        async fn break_destroy(
            &self,
            id: &str,
        ) -> Result<Option<Arc<dyn SandboxProvider>>, String> {
            std::fs::write(self.flag(id), "").map_err(|e| e.to_string())?;
            Ok(Some(Arc::new(self.provider.clone())))
        }

        async fn heal_destroy(&self, id: &str) -> Result<(), String> {
            std::fs::remove_file(self.flag(id)).map_err(|e| e.to_string())
        }
    }

    reaper_testkit::provider_conformance!(LocalFixture::new());
}
