//! Tidy checks: `infra/aws/template.yaml` agrees with the code and with the DynamoDB layout
//! contract (`shared/reaper-dynamodb/LAYOUT.md`): table keys, indexes, TTL, IAM actions,
//! environment variable names, the metrics the alarms watch, the schedule's retry settings, the
//! failure destination, the logging, and `samconfig.toml`.
//! cfn-lint checks the CloudFormation side (see `emulator.rs`); it does not schema-check the
//! resources SAM generates, so the function's own settings are checked here, and `sam.rs`
//! checks what SAM generates from them (the roles, the schedule).

use std::collections::BTreeSet;

use reaper_core::reap::ReapOutcome;
use reaper_dynamodb::layout;
use serde_yaml::Value;

const TEMPLATE: &str = include_str!("../../../infra/aws/template.yaml");
const LAYOUT: &str = include_str!("../../../shared/reaper-dynamodb/LAYOUT.md");
const SAMCONFIG: &str = include_str!("../../../infra/aws/samconfig.toml");

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
        pair(layout::GSI3_PK, "S"),
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
    let by_sandbox = index(layout::SANDBOX_INDEX);
    assert_eq!(
        keys(&by_sandbox["KeySchema"]),
        [pair(layout::GSI3_PK, "HASH")]
    );
    assert_eq!(s(&by_sandbox["Projection"]["ProjectionType"]), "ALL");
    assert_eq!(indexes.len(), 3);
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
    // The table's, and the token secret's (checked below).
    assert_eq!(statements.len(), 2);
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
        .chain(
            reaper_serverless::reaper_providers::ProviderKind::ALL
                .iter()
                .flat_map(|k| k.variables().iter().copied()),
        )
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
fn every_secret_arrives_only_as_a_secrets_manager_dynamic_reference_or_not_at_all() {
    let t = template();
    let vars = &props(&t, "ReaperFunction")["Environment"]["Variables"];
    assert!(
        vars.get(reaper_serverless::config::SANDBOXD_TOKEN)
            .is_none(),
        "the sandboxd token is read at run time, never put in the environment"
    );
    for (var, param) in [
        ("DAYTONA_API_KEY", "DaytonaApiKeySecretArn"),
        ("E2B_API_KEY", "E2bApiKeySecretArn"),
        ("VERCEL_TOKEN", "VercelTokenSecretArn"),
    ] {
        let branches = seq(&vars[var]["!If"]);
        assert_eq!(branches.len(), 3, "{var}");
        let condition = s(&branches[0]);
        assert_eq!(
            s(&branches[1]["!Sub"]),
            format!("{{{{resolve:secretsmanager:${{{param}}}:SecretString}}}}"),
            "{var}"
        );
        assert_eq!(s(&branches[2]["!Ref"]), "AWS::NoValue", "{var}");
        // The condition is "the ARN parameter is set"; an unset ARN leaves the variable unset.
        let cond = serde_yaml_text(&t["Conditions"][condition]);
        assert!(cond.contains(param), "{var}: {cond}");
        let p = &t["Parameters"][param];
        assert_eq!(s(&p["Default"]), "", "{param}");
        assert!(
            s(&p["AllowedPattern"]).contains("secretsmanager"),
            "{param}"
        );
    }
    let join = seq(&vars["REAPER_PROVIDERS"]["!Join"]);
    assert_eq!(s(&join[0]), ",");
    assert_eq!(s(&join[1]["!Ref"]), "Providers");
    assert_eq!(s(&t["Parameters"]["Providers"]["Default"]), "sandboxd");
}

#[test]
fn the_sandboxd_token_is_read_at_run_time_from_its_arn_which_alone_the_role_may_read() {
    let t = template();
    let p = props(&t, "ReaperFunction");
    let branches = seq(
        &p["Environment"]["Variables"][reaper_serverless::config::SANDBOXD_TOKEN_SECRET_ARN]["!If"]
    );
    assert_eq!(s(&branches[0]), "HasSandboxdToken");
    assert_eq!(s(&branches[1]["!Ref"]), "SandboxdTokenSecretArn");
    assert_eq!(s(&branches[2]["!Ref"]), "AWS::NoValue");
    assert!(
        !TEMPLATE.contains("resolve:secretsmanager:${SandboxdTokenSecretArn}"),
        "the token must not be resolved at deploy time"
    );
    // The one statement granting secretsmanager: GetSecretValue on that ARN, nothing wider.
    let statements = seq(&seq(&p["Policies"])[0]["Statement"]);
    let grants: Vec<&Value> = statements
        .iter()
        .filter(|st| format!("{st:?}").contains("secretsmanager"))
        .collect();
    assert_eq!(grants.len(), 1, "{statements:?}");
    let branches = seq(&grants[0]["!If"]);
    assert_eq!(s(&branches[0]), "HasSandboxdToken");
    assert_eq!(s(&branches[1]["Action"]), "secretsmanager:GetSecretValue");
    assert_eq!(
        s(&branches[1]["Resource"]["!Ref"]),
        "SandboxdTokenSecretArn"
    );
    assert_eq!(s(&branches[2]["!Ref"]), "AWS::NoValue");
}

/// Whether a CloudFormation AllowedPattern (anchored by CloudFormation) admits "".
fn regex_accepts_empty(pattern: &str) -> bool {
    pattern.starts_with("^$") || pattern.contains("|^$") || pattern.ends_with(")?$")
}

fn serde_yaml_text(v: &Value) -> String {
    format!("{v:?}")
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
    let expression = seq(&sp["ScheduleExpression"]["!FindInMap"]);
    assert_eq!(s(&expression[0]), "Schedule");
    assert_eq!(s(&expression[1]["!Ref"]), "ScheduleMinutes");
    assert_eq!(s(&expression[2]), "Expression");
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

#[test]
fn a_sandbox_left_in_the_reclaim_ledger_keeps_an_alarm_raised() {
    let t = template();
    let a = alarm(&t, "LeakedSandboxesAlarm");
    assert_eq!(s(&a["MetricName"]), reaper_lambda::emf::SANDBOXES_LEAKED);
    assert!(reaper_lambda::emf::metrics()
        .iter()
        .any(|(name, _)| *name == reaper_lambda::emf::SANDBOXES_LEAKED));
    assert_eq!(s(&a["Statistic"]), "Maximum");
    assert_eq!(s(&a["ComparisonOperator"]), "GreaterThanThreshold");
    assert_eq!(a["Threshold"].as_u64(), Some(0));
}

/// The alarm resource `name`'s properties, checked to notify the stack's topic on both edges.
fn alarm<'a>(t: &'a Value, name: &str) -> &'a Value {
    let r = resource(t, name);
    assert_eq!(s(&r["Type"]), "AWS::CloudWatch::Alarm", "{name}");
    let p = &r["Properties"];
    for actions in ["AlarmActions", "OKActions"] {
        let targets = seq(&p[actions]);
        assert_eq!(targets.len(), 1, "{name}.{actions}");
        assert_eq!(s(&targets[0]["!Ref"]), "AlarmTopic", "{name}.{actions}");
    }
    p
}

fn dimension<'a>(alarm: &'a Value, name: &str) -> &'a Value {
    let dims = seq(&alarm["Dimensions"]);
    assert_eq!(dims.len(), 1);
    assert_eq!(s(&dims[0]["Name"]), name);
    &dims[0]["Value"]
}

#[test]
fn a_second_stack_in_the_same_account_gets_its_own_schedule_because_the_name_is_omitted() {
    let t = template();
    let sp = &props(&t, "ReaperFunction")["Events"]["Sweep"]["Properties"];
    assert_eq!(sp["OmitName"].as_bool(), Some(true));
    assert!(
        sp.get("Name").is_none(),
        "a fixed name collides across stacks"
    );
}

#[test]
fn the_function_keeps_the_platforms_report_records_at_info_in_the_json_log_format() {
    let t = template();
    let logging = &props(&t, "ReaperFunction")["LoggingConfig"];
    assert_eq!(s(&logging["SystemLogLevel"]), "INFO");
    // SystemLogLevel is only accepted with the JSON format.
    assert_eq!(s(&logging["LogFormat"]), "JSON");
    assert_eq!(s(&logging["ApplicationLogLevel"]), "INFO");
}

#[test]
fn errors_and_throttles_of_the_function_alarm_from_the_platforms_own_metrics() {
    let t = template();
    for (name, metric) in [
        ("FunctionErrorsAlarm", "Errors"),
        ("FunctionThrottlesAlarm", "Throttles"),
    ] {
        let a = alarm(&t, name);
        assert_eq!(s(&a["Namespace"]), "AWS/Lambda", "{name}");
        assert_eq!(s(&a["MetricName"]), metric);
        assert_eq!(s(&dimension(a, "FunctionName")["!Ref"]), "ReaperFunction");
        assert_eq!(s(&a["Statistic"]), "Sum");
        assert_eq!(s(&a["ComparisonOperator"]), "GreaterThanThreshold");
        assert_eq!(a["Threshold"].as_u64(), Some(0));
        // No invocation, no datapoint: the heartbeat covers silence, these cover failures.
        assert_eq!(s(&a["TreatMissingData"]), "notBreaching");
    }
}

#[test]
fn the_heartbeat_alarms_after_k_schedule_intervals_without_a_finished_sweep() {
    let t = template();
    let a = alarm(&t, "HeartbeatAlarm");
    assert_eq!(s(&a["Namespace"]["!Ref"]), "MetricsNamespace");
    // Only a sweep that listed and finished writes `swept` = 1; one that dies writes nothing.
    assert_eq!(s(&a["MetricName"]), reaper_lambda::emf::SWEPT);
    assert!(reaper_lambda::emf::metrics()
        .iter()
        .any(|(name, _)| *name == reaper_lambda::emf::SWEPT));
    assert_eq!(
        s(&dimension(a, reaper_lambda::emf::DIMENSION)["!Ref"]),
        "ReaperFunction"
    );
    assert_eq!(s(&a["Statistic"]), "Sum");
    assert_eq!(s(&a["ComparisonOperator"]), "LessThanThreshold");
    assert_eq!(a["Threshold"].as_u64(), Some(1));
    assert_eq!(s(&a["TreatMissingData"]), "breaching");
    assert_eq!(s(&a["EvaluationPeriods"]["!Ref"]), "HeartbeatMissedTicks");
    assert_eq!(s(&a["DatapointsToAlarm"]["!Ref"]), "HeartbeatMissedTicks");
    let period = seq(&a["Period"]["!FindInMap"]);
    assert_eq!(s(&period[0]), "Schedule");
    assert_eq!(s(&period[1]["!Ref"]), "ScheduleMinutes");
    assert_eq!(s(&period[2]), "PeriodSeconds");

    // One period is one schedule interval, for every interval the template accepts; and K
    // periods stay within CloudWatch's one-day evaluation range.
    let k = &t["Parameters"]["HeartbeatMissedTicks"];
    assert!(
        k["MinValue"].as_u64().unwrap() >= 2,
        "one late metric must not alarm"
    );
    let max_k = k["MaxValue"].as_u64().unwrap();
    let minutes = &t["Parameters"]["ScheduleMinutes"];
    let allowed: Vec<&str> = seq(&minutes["AllowedValues"]).iter().map(s).collect();
    assert!(allowed.contains(&s(&minutes["Default"])));
    let mapping = t["Mappings"]["Schedule"].as_mapping().unwrap();
    assert_eq!(
        mapping.keys().map(s).collect::<Vec<_>>(),
        allowed,
        "one mapping entry per allowed interval"
    );
    for (key, entry) in mapping {
        let n: u64 = s(key).parse().unwrap();
        let unit = if n == 1 { "minute" } else { "minutes" };
        assert_eq!(s(&entry["Expression"]), format!("rate({n} {unit})"));
        let period = entry["PeriodSeconds"].as_u64().unwrap();
        assert_eq!(period, n * 60);
        assert!(
            period * max_k <= 86_400,
            "{n} minutes x {max_k} exceeds a day"
        );
    }
}

#[test]
fn failed_invocations_and_undeliverable_ticks_land_in_one_queue_that_alarms() {
    let t = template();
    let p = props(&t, "ReaperFunction");
    let on_failure = &p["EventInvokeConfig"]["DestinationConfig"]["OnFailure"];
    assert_eq!(s(&on_failure["Type"]), "SQS");
    assert_eq!(
        s(&on_failure["Destination"]["!GetAtt"]),
        "FailedInvocationsQueue.Arn"
    );
    let dlq = &p["Events"]["Sweep"]["Properties"]["DeadLetterConfig"];
    assert_eq!(s(&dlq["Arn"]["!GetAtt"]), "FailedInvocationsQueue.Arn");
    assert_eq!(
        s(&resource(&t, "FailedInvocationsQueue")["Type"]),
        "AWS::SQS::Queue"
    );
    let q = props(&t, "FailedInvocationsQueue");
    assert_eq!(q["MessageRetentionPeriod"].as_u64(), Some(14 * 24 * 3600));
    assert_eq!(q["SqsManagedSseEnabled"].as_bool(), Some(true));

    let a = alarm(&t, "FailedInvocationsAlarm");
    assert_eq!(s(&a["Namespace"]), "AWS/SQS");
    assert_eq!(s(&a["MetricName"]), "ApproximateNumberOfMessagesVisible");
    assert_eq!(
        s(&dimension(a, "QueueName")["!GetAtt"]),
        "FailedInvocationsQueue.QueueName"
    );
    assert_eq!(s(&a["ComparisonOperator"]), "GreaterThanThreshold");
    assert_eq!(a["Threshold"].as_u64(), Some(0));
}

#[test]
fn every_alarm_notifies_the_stacks_topic_and_a_required_email_address_reads_it() {
    let t = template();
    let alarms: Vec<&str> = t["Resources"]
        .as_mapping()
        .unwrap()
        .iter()
        .filter(|(_, r)| s(&r["Type"]) == "AWS::CloudWatch::Alarm")
        .map(|(name, _)| s(name))
        .collect();
    assert_eq!(
        alarms,
        [
            "ReclaimFailedAlarm",
            "LeakedSandboxesAlarm",
            "SweepFailedAlarm",
            "HeartbeatAlarm",
            "FunctionErrorsAlarm",
            "FunctionThrottlesAlarm",
            "FailedInvocationsAlarm"
        ]
    );
    for name in alarms {
        alarm(&t, name);
    }
    assert_eq!(s(&resource(&t, "AlarmTopic")["Type"]), "AWS::SNS::Topic");
    let sub = resource(&t, "AlarmEmailSubscription");
    assert!(
        sub.get("Condition").is_none(),
        "the subscription always exists"
    );
    assert_eq!(s(&sub["Properties"]["Protocol"]), "email");
    assert_eq!(s(&sub["Properties"]["TopicArn"]["!Ref"]), "AlarmTopic");
    // No default: a bare deploy must name who reads the alarms, not alarm into the void.
    let email = &t["Parameters"]["AlarmEmail"];
    assert!(email.get("Default").is_none(), "{email:?}");
    assert!(!regex_accepts_empty(s(&email["AllowedPattern"])));
    assert_eq!(
        s(&t["Outputs"]["AlarmTopic"]["Value"]["!Ref"]),
        "AlarmTopic"
    );
}

#[test]
fn the_function_is_told_its_timeout_as_its_budget() {
    let t = template();
    let p = props(&t, "ReaperFunction");
    assert_eq!(s(&p["Timeout"]["!Ref"]), "TimeoutSeconds");
    assert_eq!(
        s(&p["Environment"]["Variables"][reaper_serverless::config::BUDGET]["!Sub"]),
        "${TimeoutSeconds}s"
    );
}

/// The function's environment as the template's parameter defaults make it.
fn default_environment(t: &Value) -> impl Fn(&str) -> Option<String> {
    let default = |name: &str| {
        let d = &t["Parameters"][name]["Default"];
        d.as_str()
            .map(str::to_string)
            .or_else(|| d.as_u64().map(|n| n.to_string()))
            .unwrap_or_else(|| panic!("parameter {name} has no default"))
    };
    let map: std::collections::HashMap<String, String> = [
        ("REAPER_TABLE", "reaper-runs".to_string()),
        (
            "REAPER_SANDBOXD_URL",
            "https://sandboxes.example.com".into(),
        ),
        ("REAPER_SANDBOXD_TOKEN", "token-0123456789abcdef".into()),
        ("REAPER_DETACHED_TTL", default("DetachedTtl")),
        ("REAPER_RUN_BUDGET", default("RunBudget")),
        ("REAPER_STEP_TIMEOUT", default("StepTimeout")),
        ("REAPER_MAX_RUNS", default("MaxRuns")),
        ("REAPER_BUDGET", format!("{}s", default("TimeoutSeconds"))),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    move |k| map.get(k).cloned()
}

#[test]
fn the_default_timeout_fits_several_worst_case_runs_with_the_shipped_defaults() {
    let t = template();
    let env = default_environment(&t);
    let config = reaper_serverless::ServerlessConfig::from_env(&env).unwrap();
    let (budget, source) = reaper_lambda::init_budget(&config, &env).expect("a budget");
    assert_eq!(
        budget.as_secs(),
        t["Parameters"]["TimeoutSeconds"]["Default"]
            .as_u64()
            .unwrap()
    );
    reaper_serverless::check_budget(&config, budget, source).unwrap();
    let minimum = reaper_serverless::minimum_budget(&config);
    // The parameter's description tells the operator the same number.
    let described = s(&t["Parameters"]["TimeoutSeconds"]["Description"]);
    assert!(
        described.contains(&format!("at least {} s", minimum.as_secs())),
        "TimeoutSeconds' description does not state the minimum {minimum:?}: {described}"
    );
    // A timeout that fits one run is not enough: a slow host would take a whole tick per run.
    let plan = reaper_serverless::plan(&config, "template", 0, budget.as_millis() as i64);
    assert!(plan.worst_case_runs >= 4, "{plan:?}");
    let reserve = reaper_serverless::reserve(&config).as_secs();
    for stated in [
        format!("{reserve} s with the defaults"),
        format!("guarantees {} worst-case runs", plan.worst_case_runs),
    ] {
        assert!(
            described.contains(&stated),
            "TimeoutSeconds' description does not say {stated:?}: {described}"
        );
    }
}

fn samconfig() -> toml_edit::DocumentMut {
    SAMCONFIG.parse().expect("samconfig.toml is TOML")
}

#[test]
fn the_committed_samconfig_deploys_two_stacks_with_iam_capability_and_known_parameters() {
    let t = template();
    let doc = samconfig();
    assert_eq!(doc["version"].as_float(), Some(0.1));
    let mut stacks = Vec::new();
    for (env, _) in doc.iter().filter(|(k, _)| *k != "version") {
        let stack = doc[env]["global"]["parameters"]["stack_name"]
            .as_str()
            .unwrap_or_else(|| panic!("[{env}] has no stack_name"));
        stacks.push(stack.to_string());
        let deploy = &doc[env]["deploy"]["parameters"];
        assert_eq!(
            deploy["capabilities"].as_str(),
            Some("CAPABILITY_IAM"),
            "[{env}]"
        );
        assert_eq!(deploy["confirm_changeset"].as_bool(), Some(true), "[{env}]");
        if let Some(overrides) = deploy.get("parameter_overrides") {
            for pair in overrides.as_str().unwrap().split_whitespace() {
                let (name, value) = pair.split_once('=').unwrap();
                let param = t["Parameters"]
                    .get(name)
                    .unwrap_or_else(|| panic!("[{env}] overrides unknown parameter {name}"));
                if let Some(allowed) = param.get("AllowedValues") {
                    assert!(
                        seq(allowed)
                            .iter()
                            .any(|v| format!("{v:?}").contains(value)),
                        "[{env}] {name}={value} is not allowed"
                    );
                }
            }
        }
    }
    stacks.sort();
    stacks.dedup();
    assert!(
        stacks.len() >= 2,
        "two stacks show the names do not collide: {stacks:?}"
    );
}

#[test]
fn a_deploy_whose_enabled_providers_lack_their_settings_fails_on_a_rule() {
    let t = template();
    let rules = t["Rules"].as_mapping().expect("the template has Rules");
    let required = [
        ("sandboxd", &["SandboxdUrl", "SandboxdTokenSecretArn"][..]),
        ("daytona", &["DaytonaApiKeySecretArn"][..]),
        ("e2b", &["E2bApiKeySecretArn"][..]),
        (
            "vercel-sandbox",
            &["VercelTokenSecretArn", "VercelTeamId"][..],
        ),
    ];
    let allowed: Vec<&str> = seq(&t["Parameters"]["Providers"]["AllowedValues"])
        .iter()
        .map(s)
        .collect();
    assert_eq!(
        allowed,
        required.iter().map(|(p, _)| *p).collect::<Vec<_>>(),
        "one rule per provider the template accepts"
    );
    for (provider, params) in required {
        let rule = rules
            .values()
            .find(|r| {
                let c = seq(&r["RuleCondition"]["!Contains"]);
                s(&c[0]["!Ref"]) == "Providers" && s(&c[1]) == provider
            })
            .unwrap_or_else(|| panic!("no rule for {provider}"));
        for param in params {
            let asserted = seq(&rule["Assertions"]).iter().any(|a| {
                let eq = seq(&seq(&a["Assert"]["!Not"])[0]["!Equals"]);
                s(&eq[0]["!Ref"]) == *param && s(&eq[1]).is_empty()
            });
            assert!(asserted, "{provider}: no assertion that {param} is set");
            assert_eq!(s(&t["Parameters"][*param]["Default"]), "", "{param}");
        }
    }
}
