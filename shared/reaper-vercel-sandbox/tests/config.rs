//! Settings: read through a lookup (never the process environment), validated with errors
//! that name the variable, and the token shown nowhere.

use std::collections::HashMap;
use std::sync::Arc;

use reaper_core::secret::Secret;
use reaper_http_sandbox::{HttpRequest, HttpResponse, HttpTransport, TransportError};
use reaper_vercel_sandbox::{
    vars, Config, ConfigError, DestroyMode, VercelSandboxProvider, DEFAULT_BASE_URL,
};

const TOKEN: &str = "vercel-secret-token-5f2a9c";

fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name| map.get(name).cloned()
}

#[test]
fn from_lookup_reads_the_token_team_and_url() {
    let config = Config::from_lookup(lookup(&[
        (vars::TOKEN, TOKEN),
        (vars::TEAM_ID, "team_abc123"),
        (vars::PROJECT_ID, "prj_abc123"),
        (vars::API_URL, "http://127.0.0.1:9/"),
    ]))
    .unwrap();
    assert_eq!(config.token.expose(), TOKEN);
    assert_eq!(config.team_id.as_deref(), Some("team_abc123"));
    assert_eq!(config.project_id.as_deref(), Some("prj_abc123"));
    assert_eq!(config.base_url, "http://127.0.0.1:9/");
}

#[test]
fn from_lookup_defaults_to_the_public_endpoint_and_no_team() {
    let config =
        Config::from_lookup(lookup(&[(vars::TOKEN, TOKEN), (vars::PROJECT_ID, "web")])).unwrap();
    assert_eq!(config.base_url, DEFAULT_BASE_URL);
    assert_eq!(config.team_id, None);
    assert_eq!(
        config.destroy,
        DestroyMode::Delete,
        "delete unless asked to stop"
    );
}

#[test]
fn from_lookup_falls_back_to_the_oidc_token_and_prefers_vercel_token() {
    let oidc = Config::from_lookup(lookup(&[
        (vars::OIDC_TOKEN, "oidc.jwt.token"),
        (vars::PROJECT_ID, "web"),
    ]))
    .unwrap();
    assert_eq!(oidc.token.expose(), "oidc.jwt.token");
    let both = Config::from_lookup(lookup(&[
        (vars::OIDC_TOKEN, "oidc.jwt.token"),
        (vars::TOKEN, TOKEN),
        (vars::PROJECT_ID, "web"),
    ]))
    .unwrap();
    assert_eq!(both.token.expose(), TOKEN);
}

/// A JWT with these claims (unsigned: the provider never verifies it, Vercel does).
fn jwt(claims: &str) -> String {
    use base64::Engine;
    let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    format!(
        "{}.{}.signature",
        engine.encode(r#"{"alg":"RS256","typ":"JWT"}"#),
        engine.encode(claims)
    )
}

#[test]
fn without_a_team_id_the_oidc_tokens_owner_is_the_team() {
    let token = jwt(r#"{"owner_id":"team_fromClaims1","project_id":"prj_1"}"#);
    let config = Config::from_lookup(lookup(&[(vars::OIDC_TOKEN, &token)])).unwrap();
    assert_eq!(config.team_id.as_deref(), Some("team_fromClaims1"));
    let explicit = Config::from_lookup(lookup(&[
        (vars::OIDC_TOKEN, &token),
        (vars::TEAM_ID, "team_explicit"),
    ]))
    .unwrap();
    assert_eq!(explicit.team_id.as_deref(), Some("team_explicit"));
}

#[test]
fn a_token_that_is_no_jwt_or_names_no_owner_gives_no_team() {
    for token in [
        TOKEN.to_string(),
        jwt(r#"{"sub":"x"}"#),
        "a.b.c".to_string(),
        format!("{}.extra", jwt(r#"{"owner_id":"team_x"}"#)),
    ] {
        let config =
            Config::from_lookup(lookup(&[(vars::TOKEN, &token), (vars::PROJECT_ID, "web")]))
                .unwrap();
        assert_eq!(config.team_id, None, "{token}");
    }
}

#[test]
fn a_missing_token_is_an_error_naming_both_variables() {
    let err = Config::from_lookup(lookup(&[(vars::TOKEN, "  ")])).unwrap_err();
    assert_eq!(err, ConfigError::MissingToken);
    let text = err.to_string();
    assert!(
        text.contains("VERCEL_TOKEN") && text.contains("VERCEL_OIDC_TOKEN"),
        "{text}"
    );
}

#[test]
fn invalid_settings_are_errors_naming_the_variable() {
    let cases = [
        (vec![(vars::TOKEN, "has space")], "VERCEL_TOKEN"),
        (vec![(vars::OIDC_TOKEN, "bad\ttoken")], "VERCEL_OIDC_TOKEN"),
        (
            vec![(vars::TOKEN, TOKEN), (vars::TEAM_ID, "team/../x")],
            "VERCEL_TEAM_ID",
        ),
        (
            vec![
                (vars::TOKEN, TOKEN),
                (vars::API_URL, "ftp://api.vercel.com"),
            ],
            "VERCEL_SANDBOX_API_URL",
        ),
        (
            vec![(vars::TOKEN, TOKEN), (vars::API_URL, "https://x.test/?a=b")],
            "VERCEL_SANDBOX_API_URL",
        ),
        (
            vec![(vars::TOKEN, TOKEN), (vars::DESTROY, "shred")],
            "VERCEL_SANDBOX_DESTROY",
        ),
    ];
    for (mut pairs, variable) in cases {
        pairs.push((vars::PROJECT_ID, "web"));
        let err = Config::from_lookup(lookup(&pairs)).unwrap_err().to_string();
        assert!(err.contains(variable), "{pairs:?}: {err}");
    }
}

#[test]
fn zero_timeouts_and_bounds_are_refused() {
    let mut config = Config::new(Secret::new(TOKEN));
    config.request_timeout_ms = 0;
    assert_eq!(config.validate(), Err(ConfigError::RequestTimeout));
    let mut config = Config::new(Secret::new(TOKEN));
    config.output_limit = 0;
    assert_eq!(config.validate(), Err(ConfigError::OutputLimit));
}

/// A transport that must never be called: building a provider sends nothing.
struct Unused;

#[async_trait::async_trait]
impl HttpTransport for Unused {
    async fn send(&self, _: HttpRequest) -> Result<HttpResponse, TransportError> {
        unreachable!("no request expected")
    }
}

#[test]
fn debug_output_and_errors_never_show_the_token() {
    let mut config = Config::new(Secret::new(TOKEN));
    config.team_id = Some("team_abc123".into());
    let provider = VercelSandboxProvider::with_transport(config.clone(), Arc::new(Unused)).unwrap();
    let handle = provider.handle("sbx_abc").unwrap();
    for shown in [
        format!("{config:?}"),
        format!("{provider:?}"),
        format!("{handle:?}"),
        format!("{:?}", Config::from_lookup(lookup(&[(vars::TOKEN, TOKEN)]))),
    ] {
        assert!(!shown.contains(TOKEN), "the token leaked: {shown}");
        assert!(
            !shown.contains("5f2a9c"),
            "part of the token leaked: {shown}"
        );
    }
    let invalid = Config::from_lookup(lookup(&[(vars::TOKEN, TOKEN), (vars::TEAM_ID, "bad team")]))
        .unwrap_err();
    assert!(!invalid.to_string().contains(TOKEN));
    assert!(!format!("{invalid:?}").contains(TOKEN));
}

#[test]
fn credentials_in_the_base_url_are_masked_in_debug_output() {
    let mut config = Config::new(Secret::new(TOKEN));
    config.base_url = "https://user:proxy-pass@proxy.test".into();
    let shown = format!("{config:?}");
    assert!(!shown.contains("proxy-pass"), "{shown}");
}

#[test]
fn the_provider_refuses_an_invalid_configuration_before_any_request() {
    let mut config = Config::new(Secret::new(TOKEN));
    config.base_url = "not a url".into();
    let err = VercelSandboxProvider::with_transport(config, Arc::new(Unused)).unwrap_err();
    assert!(matches!(err, ConfigError::BaseUrl(_)), "{err:?}");
}

#[test]
fn hostile_ids_are_refused_before_they_reach_a_url() {
    let provider =
        VercelSandboxProvider::with_transport(Config::new(Secret::new(TOKEN)), Arc::new(Unused))
            .unwrap();
    for id in [
        "",
        "../x",
        "sbx/1",
        "sbx?teamId=other",
        "sbx%2f",
        &"x".repeat(129),
    ] {
        assert!(provider.handle(id).is_err(), "{id:?} was accepted");
    }
}

#[test]
fn an_access_token_without_a_project_is_refused_naming_vercel_project_id() {
    let err = Config::from_lookup(lookup(&[(vars::TOKEN, TOKEN)])).unwrap_err();
    assert_eq!(err, ConfigError::MissingProject);
    assert!(err.to_string().contains("VERCEL_PROJECT_ID"), "{err}");
    let err = Config::from_lookup(lookup(&[
        (vars::TOKEN, TOKEN),
        (vars::PROJECT_ID, "prj/../x"),
    ]))
    .unwrap_err();
    assert!(err.to_string().contains("VERCEL_PROJECT_ID"), "{err}");
}

#[test]
fn an_oidc_token_names_its_project_and_the_setting_wins() {
    let token = jwt(r#"{"owner_id":"team_1","project_id":"prj_fromClaims"}"#);
    let config = Config::from_lookup(lookup(&[(vars::OIDC_TOKEN, &token)])).unwrap();
    assert_eq!(config.project_id.as_deref(), Some("prj_fromClaims"));
    let explicit = Config::from_lookup(lookup(&[
        (vars::OIDC_TOKEN, &token),
        (vars::PROJECT_ID, "prj_explicit"),
    ]))
    .unwrap();
    assert_eq!(explicit.project_id.as_deref(), Some("prj_explicit"));
}

#[test]
fn the_destroy_setting_chooses_stop_only_when_asked() {
    for (value, mode) in [
        ("delete", DestroyMode::Delete),
        ("STOP", DestroyMode::Stop),
        (" stop ", DestroyMode::Stop),
    ] {
        let config = Config::from_lookup(lookup(&[
            (vars::TOKEN, TOKEN),
            (vars::PROJECT_ID, "web"),
            (vars::DESTROY, value),
        ]))
        .unwrap();
        assert_eq!(config.destroy, mode, "{value}");
    }
}
