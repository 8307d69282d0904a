//! Choosing providers by name and building the hosted ones from their settings.

use std::collections::HashMap;
use std::sync::Arc;

use reaper_core::{ProviderSet, SandboxProvider};
use reaper_http_sandbox::{HttpRequest, HttpResponse, HttpTransport, TransportError};
use reaper_providers::{
    build_hosted, check_hosted, parse, HostedSettings, ProviderKind, ProvidersError,
};

/// A transport that must never be used: choosing and building providers sends nothing.
#[derive(Debug)]
struct NoNetwork;

#[async_trait::async_trait]
impl HttpTransport for NoNetwork {
    async fn send(&self, request: HttpRequest) -> Result<HttpResponse, TransportError> {
        panic!("building providers sent {request:?}")
    }
}

fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name| map.get(name).cloned()
}

const SECRETS: &[(&str, &str)] = &[
    ("DAYTONA_API_KEY", "dtn_0123456789abcdef"),
    ("E2B_API_KEY", "e2b_0123456789abcdef"),
    ("VERCEL_TOKEN", "vcp_0123456789abcdef"),
    ("VERCEL_TEAM_ID", "team_abc"),
    ("VERCEL_PROJECT_ID", "prj_abc"),
];

#[test]
fn an_unset_provider_list_serves_sandboxd_as_before() {
    assert_eq!(parse(None).unwrap(), [ProviderKind::Sandboxd]);
}

#[test]
fn the_list_is_read_in_order_with_spaces_and_case_forgiven() {
    assert_eq!(
        parse(Some(" Daytona, e2b ,vercel,sandboxd")).unwrap(),
        [
            ProviderKind::Daytona,
            ProviderKind::E2b,
            ProviderKind::Vercel,
            ProviderKind::Sandboxd
        ]
    );
}

#[test]
fn an_unknown_empty_or_repeated_name_is_refused_with_what_to_write() {
    let unknown = parse(Some("daytona,e2c")).unwrap_err();
    assert!(matches!(&unknown, ProvidersError::Unknown { name, .. } if name == "e2c"));
    let message = unknown.to_string();
    assert!(
        message.contains("REAPER_PROVIDERS") && message.contains("vercel"),
        "{message}"
    );

    assert!(matches!(
        parse(Some(" , ")).unwrap_err(),
        ProvidersError::Empty { .. }
    ));
    assert_eq!(
        parse(Some("e2b,E2B")).unwrap_err(),
        ProvidersError::Duplicate("e2b".into())
    );
}

#[test]
fn each_hosted_provider_is_built_from_its_settings_under_its_record_name() {
    let transport: Arc<dyn HttpTransport> = Arc::new(NoNetwork);
    let mut members = Vec::new();
    for kind in [
        ProviderKind::Daytona,
        ProviderKind::E2b,
        ProviderKind::Vercel,
    ] {
        let provider = build_hosted(kind, lookup(SECRETS), transport.clone())
            .unwrap()
            .expect("a hosted provider");
        assert_eq!(provider.name(), kind.as_str());
        members.push(provider);
    }
    let set = ProviderSet::new(members).unwrap();
    assert!(set.serves("daytona") && set.serves("e2b") && set.serves("vercel"));
    assert!(
        set.serves("vercel-sandbox"),
        "records written under the earlier name"
    );
    assert!(!set.serves("docker"));
}

#[test]
fn sandboxd_is_left_to_the_handler() {
    let built = build_hosted(ProviderKind::Sandboxd, lookup(&[]), Arc::new(NoNetwork)).unwrap();
    assert!(built.is_none());
}

#[test]
fn a_listed_provider_without_its_key_names_the_setting_to_set() {
    for (kind, var) in [
        (ProviderKind::Daytona, "DAYTONA_API_KEY"),
        (ProviderKind::E2b, "E2B_API_KEY"),
        (ProviderKind::Vercel, "VERCEL_TOKEN"),
    ] {
        let Err(error) = build_hosted(kind, lookup(&[]), Arc::new(NoNetwork)) else {
            panic!("{kind:?} built without its key");
        };
        assert_eq!(check_hosted(kind, lookup(&[])).unwrap_err(), error);
        assert!(check_hosted(kind, lookup(SECRETS)).is_ok());
        let message = error.to_string();
        assert!(message.contains(var), "{message}");
        assert!(message.contains(kind.as_str()), "{message}");
        assert!(kind.settings().contains(var));
    }
}

#[test]
fn a_malformed_key_is_refused_without_being_repeated() {
    let leaked = "dtn_with space_SECRET";
    let Err(error) = build_hosted(
        ProviderKind::Daytona,
        lookup(&[("DAYTONA_API_KEY", leaked)]),
        Arc::new(NoNetwork),
    ) else {
        panic!("a key with a space was accepted");
    };
    let shown = format!("{error} {error:?}");
    assert!(!shown.contains("SECRET"), "{shown}");
}

#[test]
fn captured_settings_hold_only_the_listed_providers_variables_and_never_show_a_value() {
    let kinds = [ProviderKind::Daytona];
    let captured = HostedSettings::capture(&kinds, lookup(SECRETS));
    assert_eq!(
        captured.get("DAYTONA_API_KEY").as_deref(),
        Some("dtn_0123456789abcdef")
    );
    assert_eq!(captured.get("E2B_API_KEY"), None, "e2b is not listed");
    let shown = format!("{captured:?}");
    assert!(
        shown.contains("DAYTONA_API_KEY") && !shown.contains("dtn_"),
        "{shown}"
    );
    let built = build_hosted(
        ProviderKind::Daytona,
        |n| captured.get(n),
        Arc::new(NoNetwork),
    );
    assert!(built.unwrap().is_some());
}
