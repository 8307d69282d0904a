//! Every bearer token the CLI reads follows the one rule of `reaper_core::settings::check_token`
//! and is refused with its one sentence, as every other binary refuses it (issue 26).

mod common;

use common::{run, Site};

/// Values every binary refuses: too short, a trailing newline, a space inside.
const BAD: [&str; 3] = [
    "short-token",
    "0123456789abcdef-token\n",
    "0123456789abcdef token",
];

fn sentence(setting: &str, bad: &str) -> String {
    reaper_core::settings::check_token(setting, bad)
        .unwrap_err()
        .to_string()
}

#[test]
fn a_bad_status_token_is_refused_with_the_shared_sentence_before_anything_is_served() {
    let site = Site::new();
    for bad in BAD {
        let mut cmd = site.reaper("watch");
        cmd.args(["--detached-ttl", "30m", "--listen", "127.0.0.1:0"])
            .env("REAPER_STATUS_TOKEN", bad);
        let (code, stdout, stderr) = run(&mut cmd);
        assert_eq!(code, 1, "{bad:?}: {stdout}\n{stderr}");
        assert!(
            stderr.contains(&sentence("REAPER_STATUS_TOKEN", bad)),
            "{bad:?}: {stderr}"
        );
        assert!(!stdout.contains("listening"), "{stdout}");
    }
}

#[test]
fn a_bad_sandboxd_token_is_refused_with_the_shared_sentence_instead_of_trimmed() {
    let site = Site::new();
    for bad in BAD {
        let mut cmd = site.reaper("sweep");
        cmd.args(["--provider", "local,sandboxd", "--detached-ttl", "10m"])
            .env("REAPER_SANDBOXD_URL", "http://127.0.0.1:9")
            .env("REAPER_SANDBOXD_TOKEN", bad);
        let (code, stdout, stderr) = run(&mut cmd);
        assert_eq!(code, 1, "{bad:?}: {stdout}\n{stderr}");
        assert!(
            stderr.contains(&sentence("REAPER_SANDBOXD_TOKEN", bad)),
            "{bad:?}: {stderr}"
        );
    }
}

#[test]
fn a_bad_cloudflare_bridge_token_is_refused_with_the_shared_sentence_instead_of_trimmed() {
    let site = Site::new();
    for bad in BAD {
        let mut cmd = site.reaper("sweep");
        cmd.args(["--provider", "local,cloudflare", "--detached-ttl", "10m"])
            .env("CLOUDFLARE_SANDBOX_BRIDGE_URL", "http://127.0.0.1:9")
            .env("CLOUDFLARE_SANDBOX_BRIDGE_TOKEN", bad);
        let (code, stdout, stderr) = run(&mut cmd);
        assert_eq!(code, 1, "{bad:?}: {stdout}\n{stderr}");
        assert!(
            stderr.contains(&sentence("CLOUDFLARE_SANDBOX_BRIDGE_TOKEN", bad)),
            "{bad:?}: {stderr}"
        );
    }
}
