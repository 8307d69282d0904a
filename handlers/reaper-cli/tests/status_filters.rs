//! `reaper status` bounded and filtered: `--limit`, `--older-than`, `--provider`, and a summary
//! line that counts every detached run whatever is shown.

mod common;

use common::{run, Site, MINUTE};
use serde_json::Value;

fn rows(stdout: &str) -> Vec<&str> {
    stdout.lines().filter(|l| l.starts_with("run-")).collect()
}

#[tokio::test]
async fn status_lists_at_most_the_limit_filters_by_age_and_provider_and_summarises_all() {
    let site = Site::new();
    site.detached_run("run-young", None, false, MINUTE).await;
    site.detached_run("run-middle", None, false, 40 * MINUTE)
        .await;
    site.detached_run("run-old", None, false, 120 * MINUTE)
        .await;

    let (code, stdout, stderr) =
        run(site
            .reaper_status()
            .args(["--limit", "1", "--detached-ttl", "30m"]));
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        stdout.starts_with(
            "3 detached runs, the oldest for 2h, 2 past the TTL; 1 shown of 3 matching (raise \
             --limit to see more)"
        ),
        "{stdout}"
    );
    assert_eq!(rows(&stdout).len(), 1, "{stdout}");

    let (_, stdout, _) = run(site.reaper_status().args(["--older-than", "30m"]));
    let shown = rows(&stdout);
    assert_eq!(shown.len(), 2, "{stdout}");
    assert!(
        shown.iter().all(|r| !r.starts_with("run-young")),
        "{stdout}"
    );
    assert!(
        stdout.contains("; 2 shown (2 match the filters)"),
        "{stdout}"
    );

    let (_, stdout, _) = run(site
        .reaper_status()
        .args(["--provider", "docker", "--json"]));
    let json: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["summary"]["detached"], 3);
    assert_eq!(json["summary"]["matching"], 0);
    assert_eq!(json["detached"].as_array().unwrap().len(), 0);
    let (_, stdout, _) = run(site.reaper_status().args(["--provider", "local", "--json"]));
    let json: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["summary"]["matching"], 3);

    let (code, _, stderr) = run(site.reaper_status().args(["--limit", "0"]));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("--limit"), "{stderr}");
    site.teardown().await;
}
