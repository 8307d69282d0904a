//! `vercel.json`, `Cargo.toml` and the code must agree: the cron path, the function's file, its
//! `maxDuration` and the budget the handler assumes, and an output directory that publishes no
//! source.

use std::path::Path;

use reaper_vercel::{CRON_PATH, DEFAULT_MAX_DURATION_SECS};

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn vercel_json() -> serde_json::Value {
    serde_json::from_str(include_str!("../vercel.json")).expect("vercel.json is JSON")
}

const FUNCTION: &str = "api/reap.rs";

#[test]
fn the_cron_calls_the_handlers_path_on_a_five_field_schedule() {
    let json = vercel_json();
    let crons = json["crons"].as_array().expect("crons is a list");
    assert_eq!(crons.len(), 1);
    assert_eq!(crons[0]["path"], CRON_PATH);
    let schedule = crons[0]["schedule"].as_str().unwrap();
    assert_eq!(schedule.split_whitespace().count(), 5, "{schedule}");
    let keys: Vec<&String> = crons[0].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["path", "schedule"]);
}

#[test]
fn the_function_file_is_the_binary_cargo_builds_and_its_route_is_the_cron_path() {
    let json = vercel_json();
    let functions = json["functions"]
        .as_object()
        .expect("functions is an object");
    assert_eq!(functions.keys().collect::<Vec<_>>(), [FUNCTION]);
    assert!(crate_dir().join(FUNCTION).is_file());
    assert_eq!(format!("/{}", FUNCTION.trim_end_matches(".rs")), CRON_PATH);
    let cargo = std::fs::read_to_string(crate_dir().join("Cargo.toml")).unwrap();
    assert!(
        cargo.contains(&format!("path = \"{FUNCTION}\"")),
        "Vercel's builder finds the [[bin]] whose path is {FUNCTION}"
    );
}

#[test]
fn max_duration_equals_the_budget_the_handler_assumes() {
    let json = vercel_json();
    assert_eq!(
        json["functions"][FUNCTION]["maxDuration"].as_u64(),
        Some(DEFAULT_MAX_DURATION_SECS),
        "vercel.json's maxDuration and reaper_vercel::DEFAULT_MAX_DURATION_SECS (the budget when \
         REAPER_BUDGET is unset) must be equal: the runtime cannot tell the function its deadline"
    );
    let readme = std::fs::read_to_string(crate_dir().join("README.md")).unwrap();
    assert!(
        readme.contains(&format!("REAPER_BUDGET={DEFAULT_MAX_DURATION_SECS}s")),
        "the README tells deployers to keep REAPER_BUDGET equal to maxDuration"
    );
}

#[test]
fn max_duration_fits_several_worst_case_runs_with_the_shipped_defaults() {
    let json = vercel_json();
    let max = json["functions"][FUNCTION]["maxDuration"].as_u64().unwrap();
    // The settings a deployer must give, and nothing else: every other one at its default.
    let required = |k: &str| match k {
        "REAPER_TABLE" => Some("reaper-runs".to_string()),
        "REAPER_SANDBOXD_URL" => Some("https://sandboxes.example.com".into()),
        "REAPER_SANDBOXD_TOKEN" => Some("token-0123456789abcdef".into()),
        "REAPER_DETACHED_TTL" => Some("30m".into()),
        _ => None,
    };
    let config = reaper_serverless::ServerlessConfig::from_env(required).unwrap();
    reaper_serverless::check_budget(&config, std::time::Duration::from_secs(max), "maxDuration")
        .unwrap();
    // One run per tick would not be enough: a slow sandbox host would take a whole tick per run.
    let plan = reaper_serverless::plan(&config, "tidy", 0, max as i64 * 1_000);
    assert!(plan.worst_case_runs >= 4, "{plan:?}");
}

#[test]
fn the_function_runs_in_one_region_the_readme_pairs_with_the_tables() {
    let json = vercel_json();
    let regions: Vec<&str> = json["regions"]
        .as_array()
        .expect("regions is a list")
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    // One region: every DynamoDB round trip of a sweep crosses the distance to the table.
    assert_eq!(regions.len(), 1, "{regions:?}");
    let readme = std::fs::read_to_string(crate_dir().join("README.md")).unwrap();
    assert!(
        readme.contains(&format!("`{}` | `us-east-1`", regions[0])),
        "the README's region table pairs {} with the table's AWS region",
        regions[0]
    );
}

#[test]
fn the_output_directory_holds_no_source_so_none_is_published() {
    let json = vercel_json();
    let dir = json["outputDirectory"]
        .as_str()
        .expect("outputDirectory is set: without it `vercel build` publishes Cargo.toml and src/");
    let dir = crate_dir().join(dir);
    // Vercel only uses the output directory when it holds a file; otherwise every non-api file
    // becomes static output.
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("the output directory exists") {
        let path = entry.unwrap().path();
        assert!(path.is_file(), "{} is not a plain file", path.display());
        files.push(path.file_name().unwrap().to_string_lossy().into_owned());
    }
    assert_eq!(files, ["robots.txt"]);
    let robots = std::fs::read_to_string(dir.join("robots.txt")).unwrap();
    assert!(robots.contains("Disallow: /"));
}

#[test]
fn vercel_json_uses_only_keys_vercels_schema_knows() {
    let json = vercel_json();
    let mut keys: Vec<&String> = json.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "$schema",
            "crons",
            "functions",
            "outputDirectory",
            "regions"
        ]
    );
    let function: Vec<&String> = json["functions"][FUNCTION]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(function, ["maxDuration"]);
    let max = json["functions"][FUNCTION]["maxDuration"].as_u64().unwrap();
    assert!(
        (1..=800).contains(&max),
        "Fluid compute allows 1 to 800 seconds"
    );
}
