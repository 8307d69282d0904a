//! Tidy checks: `infra/aws/template.yaml` agrees with the code and with the DynamoDB layout
//! contract (`shared/reaper-dynamodb/LAYOUT.md`): table keys, indexes, TTL, IAM actions,
//! environment variable names, the metric the alarm watches, the schedule's retry settings.
//! cfn-lint checks the CloudFormation side (see `emulator.rs`); it does not schema-check the
//! resources SAM generates, so the function's own settings are checked here.

use std::collections::BTreeSet;

use reaper_core::reap::ReapOutcome;
use reaper_dynamodb::layout;
use serde_yaml::Value;

const TEMPLATE: &str = include_str!("../../../infra/aws/template.yaml");
const LAYOUT: &str = include_str!("../../../shared/reaper-dynamodb/LAYOUT.md");

/// The YAML with CloudFormation's short-form tags (`!Ref`, `!Sub`, `!GetAtt`…) kept as
/// `{"!Ref": value}` maps, so plain lookups work and intrinsics stay visible.
fn parse(text: &str) -> Value {
    fn untag(v: Value) -> Value {
        match v {
            Value::Tagged(t) => {
                let mut m = serde_yaml::Mapping::new();
                m.insert(Value::String(t.tag.to_string()), untag(t.value));
                Value::Mapping(m)
            }
            Value::Mapping(m) => {
                Value::Mapping(m.into_iter().map(|(k, v)| (k, untag(v))).collect())
            }
            Value::Sequence(s) => Value::Sequence(s.into_iter().map(untag).collect()),
            other => other,
        }
    }
    untag(serde_yaml::from_str(text).expect("valid YAML"))
}

fn template() -> Value {
    parse(TEMPLATE)
}

fn resource<'a>(t: &'a Value, name: &str) -> &'a Value {
    t.get("Resources")
        .and_then(|r| r.get(name))
        .unwrap_or_else(|| panic!("the template has no resource {name}"))
}

fn props<'a>(t: &'a Value, name: &str) -> &'a Value {
    &resource(t, name)["Properties"]
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v:?}"))
}

fn seq(v: &Value) -> &Vec<Value> {
    v.as_sequence()
        .unwrap_or_else(|| panic!("not a list: {v:?}"))
}

/// `(attribute, key type)` pairs of a key schema.
fn keys(schema: &Value) -> Vec<(String, String)> {
    seq(schema)
        .iter()
        .map(|k| (s(&k["AttributeName"]).into(), s(&k["KeyType"]).into()))
        .collect()
}

fn pair(a: &str, b: &str) -> (String, String) {
    (a.into(), b.into())
}

/// The fenced ```yaml block under LAYOUT.md's "SAM resource" heading.
fn layout_resource() -> Value {
    let section = LAYOUT
        .split("## SAM resource")
        .nth(1)
        .expect("LAYOUT.md has a SAM resource section");
    let block = section
        .split("```yaml")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("the SAM resource section has a yaml block");
    parse(block)
}

/// The IAM actions LAYOUT.md lists, as `dynamodb:<Action>`.
fn layout_iam_actions() -> BTreeSet<String> {
    let line = LAYOUT
        .split("\nIAM:")
        .nth(1)
        .expect("LAYOUT.md has an IAM paragraph");
    let allowed = line.split("; no").next().unwrap();
    allowed
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|token| !token.contains('/'))
        .map(|token| {
            if token.starts_with("dynamodb:") {
                token.to_string()
            } else {
                format!("dynamodb:{token}")
            }
        })
        .collect()
}

#[test]
fn the_table_is_the_layout_documents_resource_property_for_property() {
    let t = template();
    let ours = props(&t, "RunsTable");
    let documented = &layout_resource()["RunsTable"];
    assert_eq!(
        s(&documented["Type"]),
        s(&resource(&t, "RunsTable")["Type"])
    );
    let documented = documented["Properties"]
        .as_mapping()
        .expect("documented properties");
    for (name, value) in documented {
        assert_eq!(
            ours.get(name),
            Some(value),
            "RunsTable property {name:?} differs from LAYOUT.md"
        );
    }
    // Anything extra may only protect the data, never change the layout.
    for (name, _) in ours.as_mapping().unwrap() {
        assert!(
            documented.contains_key(name) || s(name) == "PointInTimeRecoverySpecification",
            "RunsTable has an undocumented property {name:?}"
        );
    }
}

#[test]
fn the_tables_keys_indexes_and_ttl_use_the_stores_attribute_names() {
    let t = template();
    let p = props(&t, "RunsTable");
    assert_eq!(s(&p["BillingMode"]), "PAY_PER_REQUEST");
    assert_eq!(
        keys(&p["KeySchema"]),
        [pair(layout::PK, "HASH"), pair(layout::SK, "RANGE")]
    );
    let defined: BTreeSet<(String, String)> = seq(&p["AttributeDefinitions"])
        .iter()
        .map(|a| pair(s(&a["AttributeName"]), s(&a["AttributeType"])))
        .collect();
    let expected: BTreeSet<_> = [
        pair(layout::PK, "S"),
        pair(layout::SK, "S"),
        pair(layout::GSI1_PK, "S"),
        pair(layout::GSI1_SK, "N"),
        pair(layout::GSI2_PK, "S"),
        pair(layout::GSI2_SK, "N"),
    ]
    .into();
    assert_eq!(defined, expected);
    let indexes = seq(&p["GlobalSecondaryIndexes"]);
    let index = |name: &str| {
        indexes
            .iter()
            .find(|i| s(&i["IndexName"]) == name)
            .unwrap_or_else(|| panic!("no index {name}"))
    };
    let reclaimable = index(layout::RECLAIMABLE_INDEX);
    assert_eq!(
        keys(&reclaimable["KeySchema"]),
        [
            pair(layout::GSI1_PK, "HASH"),
            pair(layout::GSI1_SK, "RANGE")
        ]
    );
    assert_eq!(s(&reclaimable["Projection"]["ProjectionType"]), "ALL");
    let by_thread = index(layout::THREAD_INDEX);
    assert_eq!(
        keys(&by_thread["KeySchema"]),
        [
            pair(layout::GSI2_PK, "HASH"),
            pair(layout::GSI2_SK, "RANGE")
        ]
    );
    assert_eq!(indexes.len(), 2);
    assert_eq!(
        s(&p["TimeToLiveSpecification"]["AttributeName"]),
        layout::TTL
    );
    assert_eq!(
        p["TimeToLiveSpecification"]["Enabled"].as_bool(),
        Some(true)
    );
}

#[test]
fn the_function_may_use_exactly_the_actions_the_layout_lists_on_the_table_and_its_indexes() {
    let t = template();
    let policies = seq(&props(&t, "ReaperFunction")["Policies"]);
    assert_eq!(policies.len(), 1, "one inline policy, no managed ones");
    let statements = seq(&policies[0]["Statement"]);
    assert_eq!(statements.len(), 1);
    let st = &statements[0];
    assert_eq!(s(&st["Effect"]), "Allow");
    let actions: BTreeSet<String> = seq(&st["Action"]).iter().map(|a| s(a).into()).collect();
    let documented = layout_iam_actions();
    assert_eq!(
        documented.len(),
        6,
        "parsed LAYOUT.md's IAM line: {documented:?}"
    );
    assert_eq!(actions, documented);
    assert!(!actions
        .iter()
        .any(|a| a.contains("Scan") || a.contains('*')));
    let resources = seq(&st["Resource"]);
    assert_eq!(resources.len(), 2);
    assert_eq!(s(&resources[0]["!GetAtt"]), "RunsTable.Arn");
    assert_eq!(s(&resources[1]["!Sub"]), "${RunsTable.Arn}/index/*");
}

#[test]
fn every_environment_variable_is_one_the_code_reads_and_every_required_one_is_set() {
    let t = template();
    let vars = props(&t, "ReaperFunction")["Environment"]["Variables"]
        .as_mapping()
        .unwrap();
    let names: BTreeSet<&str> = vars.keys().map(s).collect();
    let known: BTreeSet<&str> = reaper_serverless::SETTINGS
        .iter()
        .map(|st| st.name)
        .chain([reaper_lambda::METRICS_NAMESPACE])
        .collect();
    for name in &names {
        assert!(
            known.contains(name),
            "the template sets {name}, which no code reads"
        );
    }
    for st in reaper_serverless::SETTINGS.iter().filter(|st| st.required) {
        assert!(
            names.contains(st.name),
            "the template does not set {}",
            st.name
        );
    }
}

#[test]
fn the_token_arrives_only_as_a_secrets_manager_dynamic_reference() {
    let t = template();
    let token = &props(&t, "ReaperFunction")["Environment"]["Variables"]
        [reaper_serverless::config::SANDBOXD_TOKEN];
    let sub = s(&token["!Sub"]);
    assert_eq!(
        sub,
        "{{resolve:secretsmanager:${SandboxdTokenSecretArn}:SecretString}}"
    );
    let param = &t["Parameters"]["SandboxdTokenSecretArn"];
    assert!(
        param.get("Default").is_none(),
        "a secret parameter must not have a default"
    );
    assert!(s(&param["AllowedPattern"]).contains("secretsmanager"));
}

#[test]
fn the_function_is_a_cargo_lambda_build_of_this_binary_on_provided_al2023() {
    let t = template();
    let f = resource(&t, "ReaperFunction");
    assert_eq!(s(&f["Metadata"]["BuildMethod"]), "rust-cargolambda");
    assert_eq!(
        s(&f["Metadata"]["BuildProperties"]["Binary"]),
        env!("CARGO_PKG_NAME")
    );
    let p = &f["Properties"];
    assert_eq!(s(&p["Runtime"]), "provided.al2023");
    assert_eq!(s(&p["Handler"]), "bootstrap");
    assert_eq!(s(&seq(&p["Architectures"])[0]["!Ref"]), "Architecture");
    let arch: Vec<&str> = seq(&t["Parameters"]["Architecture"]["AllowedValues"])
        .iter()
        .map(s)
        .collect();
    assert_eq!(arch, ["arm64", "x86_64"]);
    assert_eq!(s(&p["LoggingConfig"]["LogFormat"]), "JSON");
    assert_eq!(s(&p["LoggingConfig"]["LogGroup"]["!Ref"]), "ReaperLogGroup");
    assert!(props(&t, "ReaperLogGroup")["RetentionInDays"].is_mapping());
}

#[test]
fn the_schedule_is_an_exact_scheduler_tick_with_retries_off_and_a_short_event_age() {
    let t = template();
    let p = props(&t, "ReaperFunction");
    assert_eq!(
        p["EventInvokeConfig"]["MaximumRetryAttempts"].as_u64(),
        Some(0)
    );
    assert_eq!(
        p["EventInvokeConfig"]["MaximumEventAgeInSeconds"].as_u64(),
        Some(60)
    );
    let sweep = &p["Events"]["Sweep"];
    assert_eq!(s(&sweep["Type"]), "ScheduleV2");
    let sp = &sweep["Properties"];
    assert_eq!(s(&sp["ScheduleExpression"]["!Ref"]), "ScheduleRate");
    assert_eq!(s(&sp["FlexibleTimeWindow"]["Mode"]), "OFF");
    assert_eq!(sp["RetryPolicy"]["MaximumRetryAttempts"].as_u64(), Some(0));
    assert_eq!(
        sp["RetryPolicy"]["MaximumEventAgeInSeconds"].as_u64(),
        Some(60)
    );
    let input: serde_json::Value = serde_json::from_str(s(&sp["Input"])).unwrap();
    let recognised = reaper_lambda::Trigger::recognise(&input);
    assert!(
        matches!(recognised, reaper_lambda::Trigger::Scheduler { .. }),
        "the schedule's Input is not recognised as the Scheduler's: {recognised:?}"
    );
    assert_eq!(
        input["source"],
        reaper_lambda::trigger::SCHEDULER_INPUT_SOURCE
    );
}

#[test]
fn the_alarm_watches_the_reclaim_failed_metric_the_function_emits() {
    let t = template();
    let a = props(&t, "ReclaimFailedAlarm");
    assert_eq!(s(&a["MetricName"]), ReapOutcome::ReclaimFailed.as_str());
    assert!(reaper_lambda::emf::metrics()
        .iter()
        .any(|(name, _)| *name == s(&a["MetricName"])));
    assert_eq!(s(&a["Namespace"]["!Ref"]), "MetricsNamespace");
    assert_eq!(
        s(&t["Parameters"]["MetricsNamespace"]["Default"]),
        reaper_lambda::emf::DEFAULT_NAMESPACE
    );
    let dims = seq(&a["Dimensions"]);
    assert_eq!(dims.len(), 1);
    assert_eq!(s(&dims[0]["Name"]), reaper_lambda::emf::DIMENSION);
    assert_eq!(s(&dims[0]["Value"]["!Ref"]), "ReaperFunction");
    assert_eq!(s(&a["ComparisonOperator"]), "GreaterThanThreshold");
    assert_eq!(a["Threshold"].as_u64(), Some(0));
    let failed = props(&t, "SweepFailedAlarm");
    assert_eq!(s(&failed["MetricName"]), reaper_lambda::emf::SWEEP_FAILED);
}
