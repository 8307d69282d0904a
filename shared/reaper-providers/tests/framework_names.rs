//! Every provider answers to the name the app framework records: instance records written in
//! TanStack AI's exact shape (`{key, provider, providerSandboxId, threadId, latestRunId,
//! updatedAt}`, each provider's own name and id form) reach the provider of that kind, with
//! the id unchanged, and a record naming a provider this reaper lacks reaches none.

use std::sync::{Arc, Mutex};

use reaper_core::{
    ProviderSet, SandboxError, SandboxHandle, SandboxInstanceRecord, SandboxProvider,
};
use reaper_providers::{parse_names, with_record_names, Host, ProviderKind, ProvidersError};

/// A provider that records which ids reached it and reports every sandbox gone.
#[derive(Debug)]
struct Recording {
    name: &'static str,
    reached: Mutex<Vec<(&'static str, String)>>,
}

#[async_trait::async_trait]
impl SandboxProvider for Recording {
    fn name(&self) -> &str {
        self.name
    }
    async fn resume(&self, id: &str) -> Result<Option<Arc<dyn SandboxHandle>>, SandboxError> {
        self.reached
            .lock()
            .unwrap()
            .push(("resume", id.to_string()));
        Ok(None)
    }
    async fn destroy(&self, id: &str) -> Result<(), SandboxError> {
        self.reached
            .lock()
            .unwrap()
            .push(("destroy", id.to_string()));
        Ok(())
    }
}

/// Records as TanStack AI's providers write them (`name` of each provider class, the id its
/// handle carries): local-process a directory path, docker a container id, daytona a sandbox
/// id, vercel a sandbox name, sprites a sprite name, cloudflare the id given to
/// `getSandbox(env.Sandbox, id)` (which the bridge Worker takes as sandboxd's sandbox id).
const FRAMEWORK_RECORDS: &str = r#"[
  {"key":"k-local","provider":"local-process","providerSandboxId":"/tmp/tanstack-ai-sandboxes/7b0c1f0e-5d1a-4b8e-9a51-0c1e2f3a4b5c","threadId":"t1","latestRunId":"r1","updatedAt":1764800000000},
  {"key":"k-docker","provider":"docker","providerSandboxId":"4f1c2b3a5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708","threadId":"t2","latestRunId":"r2","updatedAt":1764800000000},
  {"key":"k-daytona","provider":"daytona","providerSandboxId":"0b5e2d1c-8a7f-4e3d-9c2b-1a0f9e8d7c6b","threadId":"t3","latestRunId":"r3","updatedAt":1764800000000},
  {"key":"k-vercel","provider":"vercel","providerSandboxId":"chat-thread-t4","threadId":"t4","latestRunId":"r4","updatedAt":1764800000000},
  {"key":"k-e2b","provider":"e2b","providerSandboxId":"i1a2b3c4d5e6f7g8h9j0","threadId":"t5","latestRunId":"r5","updatedAt":1764800000000},
  {"key":"k-legacy","provider":"vercel-sandbox","providerSandboxId":"sbx_0a1b2c3d4e5f","threadId":"t6","latestRunId":"r6","updatedAt":1764800000000},
  {"key":"k-sprites","provider":"sprites","providerSandboxId":"tanstack-thread-t7","threadId":"t7","latestRunId":"r7","updatedAt":1764800000000},
  {"key":"k-cloudflare","provider":"cloudflare","providerSandboxId":"thread-t8","threadId":"t8","latestRunId":"r8","updatedAt":1764800000000}
]"#;

#[tokio::test]
async fn records_in_the_frameworks_shape_reach_the_provider_of_their_name_with_their_id() {
    let records: Vec<SandboxInstanceRecord> = serde_json::from_str(FRAMEWORK_RECORDS).unwrap();
    let kinds = [
        ProviderKind::Local,
        ProviderKind::Docker,
        ProviderKind::Daytona,
        ProviderKind::Vercel,
        ProviderKind::E2b,
        ProviderKind::Sprites,
        ProviderKind::Cloudflare,
    ];
    let stubs: Vec<Arc<Recording>> = kinds
        .iter()
        .map(|k| {
            Arc::new(Recording {
                name: k.as_str(),
                reached: Mutex::default(),
            })
        })
        .collect();
    let members = kinds
        .iter()
        .zip(&stubs)
        .map(|(k, s)| with_record_names(*k, s.clone() as Arc<dyn SandboxProvider>))
        .collect();
    let set = ProviderSet::new(members).unwrap();

    for record in &records {
        set.resume_recorded(&record.provider, &record.provider_sandbox_id)
            .await
            .unwrap();
        set.destroy_recorded(&record.provider, &record.provider_sandbox_id)
            .await
            .unwrap();
    }
    let reached = |name: &str| -> Vec<(&'static str, String)> {
        stubs
            .iter()
            .find(|s| s.name == name)
            .unwrap()
            .reached
            .lock()
            .unwrap()
            .clone()
    };
    let both = |id: &str| vec![("resume", id.to_string()), ("destroy", id.to_string())];
    assert_eq!(
        reached("local"),
        both("/tmp/tanstack-ai-sandboxes/7b0c1f0e-5d1a-4b8e-9a51-0c1e2f3a4b5c")
    );
    assert_eq!(
        reached("docker"),
        both("4f1c2b3a5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708")
    );
    assert_eq!(
        reached("daytona"),
        both("0b5e2d1c-8a7f-4e3d-9c2b-1a0f9e8d7c6b")
    );
    let mut vercel = both("chat-thread-t4");
    vercel.extend(both("sbx_0a1b2c3d4e5f"));
    assert_eq!(
        reached("vercel"),
        vercel,
        "vercel and vercel-sandbox records"
    );
    assert_eq!(reached("e2b"), both("i1a2b3c4d5e6f7g8h9j0"));
    assert_eq!(reached("sprites"), both("tanstack-thread-t7"));
    assert_eq!(reached("cloudflare"), both("thread-t8"));
}

#[tokio::test]
async fn a_record_of_a_provider_this_reaper_lacks_reaches_none_and_is_refused() {
    let stub = Arc::new(Recording {
        name: "local",
        reached: Mutex::default(),
    });
    let set = ProviderSet::new(vec![with_record_names(
        ProviderKind::Local,
        stub.clone() as Arc<dyn SandboxProvider>,
    )])
    .unwrap();
    for name in ["sprites", "cloudflare", "vercel", "modal"] {
        assert!(!set.serves(name));
        assert!(matches!(
            set.resume_recorded(name, "anything").await,
            Err(SandboxError::Refused(_))
        ));
        assert!(matches!(
            set.destroy_recorded(name, "anything").await,
            Err(SandboxError::Refused(_))
        ));
    }
    assert!(stub.reached.lock().unwrap().is_empty());
}

#[test]
fn every_name_the_framework_records_is_a_provider_of_the_registry() {
    for (recorded, kind) in [
        ("local-process", ProviderKind::Local),
        ("docker", ProviderKind::Docker),
        ("daytona", ProviderKind::Daytona),
        ("vercel", ProviderKind::Vercel),
        ("e2b", ProviderKind::E2b),
        ("vercel-sandbox", ProviderKind::Vercel),
        ("local", ProviderKind::Local),
        ("sandboxd", ProviderKind::Sandboxd),
        ("sprites", ProviderKind::Sprites),
        ("cloudflare", ProviderKind::Cloudflare),
    ] {
        assert_eq!(ProviderKind::from_name(recorded), Some(kind), "{recorded}");
        assert!(kind.record_names().any(|n| n == recorded), "{recorded}");
    }
    assert_eq!(
        ProviderKind::from_name("modal"),
        None,
        "not a provider here"
    );
}

#[test]
fn the_cli_lists_every_provider_and_a_serverless_reaper_refuses_the_machine_ones() {
    assert_eq!(
        parse_names(
            [
                "local-process",
                "docker",
                "sandboxd",
                "daytona",
                "e2b",
                "vercel",
                "sprites",
                "cloudflare"
            ],
            Host::Native
        )
        .unwrap(),
        ProviderKind::ALL
    );
    let refused = parse_names(["sandboxd", "docker"], Host::Serverless).unwrap_err();
    assert!(
        matches!(&refused, ProvidersError::NotHere { name, .. } if name == "docker"),
        "{refused:?}"
    );
    assert!(refused.to_string().contains("sandboxd"), "{refused}");
    assert_eq!(
        parse_names(["local", "local-process"], Host::Native).unwrap_err(),
        ProvidersError::Duplicate("local".into()),
        "an alias is the same provider"
    );
}

#[test]
fn sprites_and_cloudflare_are_built_from_their_own_settings_with_clear_errors() {
    use reaper_providers::{build_hosted, check_hosted};
    let none = |_: &str| None::<String>;
    let err = check_hosted(ProviderKind::Sprites, none).unwrap_err();
    assert!(err.to_string().contains("SPRITES_TOKEN"), "{err}");
    let err = check_hosted(ProviderKind::Cloudflare, none).unwrap_err();
    assert!(
        err.to_string().contains("CLOUDFLARE_SANDBOX_BRIDGE_URL"),
        "{err}"
    );
    let settings = |n: &str| match n {
        "SPRITES_TOKEN" => Some("tok".to_string()),
        "CLOUDFLARE_SANDBOX_BRIDGE_URL" => Some("https://bridge.example.workers.dev".to_string()),
        "CLOUDFLARE_SANDBOX_BRIDGE_TOKEN" => Some("bridge-token-0123456789abcdef".to_string()),
        _ => None,
    };
    let transport: Arc<dyn reaper_http_sandbox::HttpTransport> =
        Arc::new(reaper_http_sandbox::ReqwestTransport::new().unwrap());
    let sprites = build_hosted(ProviderKind::Sprites, settings, transport.clone())
        .unwrap()
        .unwrap();
    assert_eq!(sprites.name(), "sprites");
    let cloudflare = build_hosted(ProviderKind::Cloudflare, settings, transport)
        .unwrap()
        .unwrap();
    assert_eq!(
        cloudflare.name(),
        "cloudflare",
        "records say cloudflare, not sandboxd"
    );
}
