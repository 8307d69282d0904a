//! What SAM generates from `infra/aws/template.yaml`, through the SAM translator cfn-lint
//! installs (offline): the roles the function and the schedule get, and the schedule itself.
//! The template only states intent (`EventInvokeConfig`, `DeadLetterConfig`, `OmitName`); these
//! tests check the resources that intent becomes.

mod common;

use common::{tools, workspace_root};
use serde_json::{json, Value};

fn translated() -> Value {
    let output = std::process::Command::new(tools().join("python"))
        .arg(workspace_root().join("handlers/reaper-lambda/tests/sam_translate.py"))
        .arg(workspace_root().join("infra/aws/template.yaml"))
        .output()
        .expect("run the SAM translator");
    assert!(
        output.status.success(),
        "the SAM translator failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("the translator prints JSON")
}

fn resources_of_type<'a>(t: &'a Value, ty: &str) -> Vec<(&'a String, &'a Value)> {
    t["Resources"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, r)| r["Type"] == ty)
        .collect()
}

/// Every statement of a role's inline policies, as `(actions, resources)`.
fn statements(role: &Value) -> Vec<(Value, Value)> {
    role["Properties"]["Policies"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["PolicyDocument"]["Statement"].as_array().unwrap().clone())
        .map(|st| {
            // A statement under a condition (the token's secret, when its ARN is given).
            let st = match st.get("Fn::If") {
                Some(branches) => {
                    assert_eq!(branches[2], json!({"Ref": "AWS::NoValue"}));
                    branches[1].clone()
                }
                None => st,
            };
            assert_eq!(st["Effect"], "Allow");
            (st["Action"].clone(), st["Resource"].clone())
        })
        .collect()
}

fn queue_arn() -> Value {
    json!({"Fn::GetAtt": ["FailedInvocationsQueue", "Arn"]})
}

#[test]
fn the_function_role_may_use_the_table_send_failures_to_the_queue_and_read_the_token_secret_and_nothing_else(
) {
    let t = translated();
    let role = &t["Resources"]["ReaperFunctionRole"];
    assert_eq!(
        role["Properties"]["ManagedPolicyArns"],
        json!(["arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"]),
        "logs only"
    );
    let st = statements(role);
    assert_eq!(st.len(), 3, "{st:?}");
    // The table's statement is checked action by action against LAYOUT.md in template.rs.
    let (table, other): (Vec<_>, Vec<_>) = st.into_iter().partition(|(a, _)| a.is_array());
    assert!(table[0]
        .0
        .as_array()
        .unwrap()
        .iter()
        .all(|a| a.as_str().unwrap().starts_with("dynamodb:")));
    assert_eq!(
        table[0].1,
        json!([{"Fn::GetAtt": ["RunsTable", "Arn"]}, {"Fn::Sub": "${RunsTable.Arn}/index/*"}])
    );
    assert_eq!(
        other,
        [
            (json!("sqs:SendMessage"), queue_arn()),
            (
                json!("secretsmanager:GetSecretValue"),
                json!({"Ref": "SandboxdTokenSecretArn"})
            )
        ]
    );

    let invoke = &t["Resources"]["ReaperFunctionEventInvokeConfig"]["Properties"];
    assert_eq!(invoke["MaximumRetryAttempts"], 0);
    assert_eq!(
        invoke["DestinationConfig"]["OnFailure"]["Destination"],
        queue_arn()
    );
}

#[test]
fn the_schedules_role_may_only_invoke_the_function_and_dead_letter_to_the_queue() {
    let t = translated();
    let schedules = resources_of_type(&t, "AWS::Scheduler::Schedule");
    assert_eq!(schedules.len(), 1);
    let target = &schedules[0].1["Properties"]["Target"];
    assert_eq!(target["DeadLetterConfig"]["Arn"], queue_arn());
    let role_id = target["RoleArn"]["Fn::GetAtt"][0].as_str().unwrap();
    let role = &t["Resources"][role_id];
    assert_eq!(
        role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"]["Service"],
        json!(["scheduler.amazonaws.com"])
    );
    let mut st = statements(role);
    st.sort_by_key(|(a, _)| a.to_string());
    assert_eq!(
        st,
        [
            (
                json!("lambda:InvokeFunction"),
                json!({"Fn::GetAtt": ["ReaperFunction", "Arn"]})
            ),
            (json!("sqs:SendMessage"), queue_arn()),
        ]
    );
}

#[test]
fn the_generated_schedule_has_no_name_so_two_stacks_never_collide() {
    let t = translated();
    let schedules = resources_of_type(&t, "AWS::Scheduler::Schedule");
    let props = &schedules[0].1["Properties"];
    assert!(props.get("Name").is_none(), "{props}");
    assert_eq!(props["FlexibleTimeWindow"]["Mode"], "OFF");
}
