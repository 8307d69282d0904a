//! What each answer of Sprites means to the reaper: only Sprites' own "sprite not found" is gone;
//! every other refusal keeps the record with an error saying what to fix; the settings are
//! validated and the token is never shown. Also the requests each port operation costs.

mod common;

use std::sync::atomic::Ordering;

use common::FakeSprites;
use reaper_core::secret::Secret;
use reaper_core::{ExecOptions, SandboxError, SandboxProvider};
use reaper_fake_api::Fault;
use reaper_sprites::{vars, Config, ConfigError};
use serde_json::json;

#[tokio::test]
async fn a_404_without_the_sprite_not_found_body_is_an_error_that_keeps_the_record() {
    let fake = FakeSprites::start().await;
    let provider = fake.provider();
    let name = fake.create_sprite();
    // A proxy's or a wrong base URL's 404: no Sprites error body.
    fake.api
        .inject(Fault::respond(404).on("getSprite").undocumented());
    let err = provider
        .resume(&name)
        .await
        .err()
        .expect("an error, not gone");
    assert!(
        matches!(&err, SandboxError::Refused(m) if m.contains("SPRITES_API_URL")),
        "{err}"
    );
    fake.api
        .inject(Fault::json(404, &json!({"error": "no route"})).on("deleteSprite"));
    let err = provider
        .destroy(&name)
        .await
        .expect_err("a 404 that names no sprite is not gone");
    assert!(matches!(err, SandboxError::Refused(_)), "{err}");
    assert!(fake.exists(&name), "nothing was deleted");
    fake.assert_no_violations();
}

#[tokio::test]
async fn a_429_or_a_500_is_unreachable_so_the_probe_says_unknown() {
    let fake = FakeSprites::start().await;
    let provider = fake.provider();
    let name = fake.create_sprite();
    fake.api
        .inject(Fault::json(429, &json!({"error": "slow down"})).on("getSprite"));
    assert!(matches!(
        provider.resume(&name).await,
        Err(SandboxError::Unreachable(_))
    ));
    fake.api
        .inject(Fault::json(500, &json!({"error": "oops"})).on("deleteSprite"));
    assert!(matches!(
        provider.destroy(&name).await,
        Err(SandboxError::Unreachable(_))
    ));
    assert!(fake.exists(&name));
    fake.assert_no_violations();
}

#[tokio::test]
async fn a_401_is_refused_naming_the_token_setting() {
    let fake = FakeSprites::start().await;
    let provider = fake.provider();
    let name = fake.create_sprite();
    fake.api
        .inject(Fault::json(401, &json!({"error": "unauthorized"})).on("getSprite"));
    let err = provider.resume(&name).await.err().expect("refused");
    assert!(
        matches!(&err, SandboxError::Refused(m) if m.contains("SPRITES_TOKEN")),
        "{err}"
    );
    assert!(!err.to_string().contains(common::TOKEN));
    fake.assert_no_violations();
}

#[tokio::test]
async fn a_cold_sprite_is_live_and_a_name_unfit_for_a_url_is_refused_before_any_request() {
    let fake = FakeSprites::start().await;
    let provider = fake.provider();
    let name = fake.create_sprite();
    assert!(
        provider.resume(&name).await.unwrap().is_some(),
        "cold is live"
    );
    for bad in ["", "a/b", "..", "a?b", "a b", &"x".repeat(129)] {
        assert!(
            matches!(provider.resume(bad).await, Err(SandboxError::Refused(_))),
            "{bad:?}"
        );
        assert!(
            matches!(provider.destroy(bad).await, Err(SandboxError::Refused(_))),
            "{bad:?}"
        );
    }
    assert_eq!(fake.api.count("getSprite"), 1);
    assert_eq!(fake.api.count("deleteSprite"), 0);
}

/// The figures the README gives: one request to look a sprite up, one WebSocket per exec, one
/// request to delete.
#[tokio::test]
async fn a_lookup_is_one_request_an_exec_one_websocket_and_a_delete_one_request() {
    let fake = FakeSprites::start().await;
    let provider = fake.provider();
    let name = fake.create_sprite();
    let handle = provider.resume(&name).await.unwrap().unwrap();
    let out = handle
        .exec("echo hi", ExecOptions::default())
        .await
        .unwrap();
    assert_eq!((out.stdout.as_str(), out.exit_code), ("hi\n", 0));
    provider.destroy(&name).await.unwrap();
    assert_eq!(fake.api.count("getSprite"), 1);
    assert_eq!(fake.state.execs.load(Ordering::Relaxed), 1);
    assert_eq!(fake.api.count("deleteSprite"), 1);
    assert_eq!(fake.api.requests().len(), 2, "no other REST request");
    fake.assert_no_violations();
}

#[test]
fn settings_need_a_token_accept_sprite_token_and_refuse_a_bad_url() {
    let from = |pairs: &[(&str, &str)]| {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(move |n| pairs.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone()))
    };
    let err = from(&[]).unwrap_err();
    assert_eq!(err, ConfigError::MissingToken);
    assert!(err.to_string().contains(vars::TOKEN));
    assert_eq!(
        from(&[(vars::TOKEN_ALT, "tok")]).unwrap().token.expose(),
        "tok"
    );
    assert_eq!(
        from(&[(vars::TOKEN, "a b")]).unwrap_err(),
        ConfigError::Token {
            variable: vars::TOKEN
        }
    );
    assert!(matches!(
        from(&[(vars::TOKEN, "tok"), (vars::API_URL, "api.sprites.dev")]),
        Err(ConfigError::BaseUrl(_))
    ));
    let config = from(&[
        (vars::TOKEN, "secret-token-1"),
        (vars::API_URL, "https://proxy.example/"),
    ])
    .unwrap();
    assert_eq!(config.base_url, "https://proxy.example/");
    assert!(!format!("{config:?}").contains("secret-token-1"));
    assert!(Config::new(Secret::new("t")).validate().is_ok());
}
