//! `infra/aws/vercel-oidc.yaml`, the OIDC provider and role the function assumes: its trust
//! policy pins the team's issuer, the audience and the exact subject (team, project,
//! environment); its permissions are exactly the Lambda role's on the table and its indexes;
//! and cfn-lint finds nothing (PyPI `cfn-lint`, installed into `target/venv-cfn-lint`, or
//! `REAPER_CFN_LINT_VENV`, on first use).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_yaml::Value;

const OIDC_TEMPLATE: &str = include_str!("../../../infra/aws/vercel-oidc.yaml");
const SAM_TEMPLATE: &str = include_str!("../../../infra/aws/template.yaml");
/// The version the Lambda template is linted with (handlers/reaper-lambda/tests/common).
const CFN_LINT_VERSION: &str = "1.58.0";

/// The YAML with CloudFormation's short-form tags kept as `{"!Tag": value}` maps.
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

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v:?}"))
}

fn seq(v: &Value) -> &Vec<Value> {
    v.as_sequence()
        .unwrap_or_else(|| panic!("not a list: {v:?}"))
}

fn props<'a>(t: &'a Value, name: &str) -> &'a Value {
    &t["Resources"][name]["Properties"]
}

/// The trust policy with the `!Sub` variables replaced as CloudFormation would.
fn trust_policy(team: &str, project: &str, environment: &str) -> serde_json::Value {
    let t = parse(OIDC_TEMPLATE);
    let sub = seq(&props(&t, "ReaperVercelRole")["AssumeRolePolicyDocument"]["!Sub"]);
    assert_eq!(sub.len(), 2, "!Sub [json, variables]");
    let provider = &sub[1]["ProviderArn"]["!If"];
    assert_eq!(s(&seq(provider)[0]), "CreateProvider");
    assert_eq!(s(&seq(provider)[1]["!Ref"]), "VercelOidcProvider");
    assert_eq!(s(&seq(provider)[2]["!Ref"]), "ExistingOidcProviderArn");
    let json = s(&sub[0])
        .replace("${TeamSlug}", team)
        .replace("${ProjectName}", project)
        .replace("${Environment}", environment)
        .replace("${ProviderArn}", "PROVIDER");
    assert!(!json.contains("${"), "an unknown variable is left: {json}");
    serde_json::from_str(&json).expect("the trust policy is JSON")
}

#[test]
fn the_provider_is_the_teams_own_issuer_with_the_teams_audience_as_its_only_client_id() {
    let t = parse(OIDC_TEMPLATE);
    let p = props(&t, "VercelOidcProvider");
    assert_eq!(s(&p["Url"]["!Sub"]), "https://oidc.vercel.com/${TeamSlug}");
    let clients = seq(&p["ClientIdList"]);
    assert_eq!(clients.len(), 1);
    assert_eq!(s(&clients[0]["!Sub"]), "https://vercel.com/${TeamSlug}");
}

#[test]
fn only_the_projects_tokens_in_one_environment_may_assume_the_role_with_aud_and_sub_pinned() {
    let policy = trust_policy("acme", "reaper", "production");
    let statements = policy["Statement"].as_array().unwrap();
    assert_eq!(statements.len(), 1);
    let st = &statements[0];
    assert_eq!(st["Effect"], "Allow");
    assert_eq!(st["Action"], "sts:AssumeRoleWithWebIdentity");
    assert_eq!(
        st["Principal"],
        serde_json::json!({ "Federated": "PROVIDER" })
    );
    // Exact matches only: no StringLike, no wildcard, nothing else that could widen it.
    assert_eq!(
        st["Condition"],
        serde_json::json!({
            "StringEquals": {
                "oidc.vercel.com/acme:aud": "https://vercel.com/acme",
                "oidc.vercel.com/acme:sub": "owner:acme:project:reaper:environment:production",
            }
        })
    );
    assert!(!policy.to_string().contains('*'));
}

#[test]
fn the_environment_defaults_to_production_and_only_vercels_three_are_accepted() {
    let t = parse(OIDC_TEMPLATE);
    let env = &t["Parameters"]["Environment"];
    assert_eq!(s(&env["Default"]), "production");
    let allowed: Vec<&str> = seq(&env["AllowedValues"]).iter().map(s).collect();
    assert_eq!(allowed, ["production", "preview", "development"]);
    for required in ["TeamSlug", "ProjectName", "TableArn"] {
        assert!(
            t["Parameters"][required].get("Default").is_none(),
            "{required} has no default: a deployer must name it"
        );
    }
}

fn actions(statement: &Value) -> BTreeSet<String> {
    seq(&statement["Action"])
        .iter()
        .map(|a| s(a).into())
        .collect()
}

#[test]
fn the_role_may_use_exactly_the_lambda_roles_actions_on_the_table_and_its_indexes_and_read_the_token_secret(
) {
    let t = parse(OIDC_TEMPLATE);
    let policies = seq(&props(&t, "ReaperVercelRole")["Policies"]);
    assert_eq!(policies.len(), 1, "one inline policy");
    assert!(props(&t, "ReaperVercelRole")
        .get("ManagedPolicyArns")
        .is_none());
    let statements = seq(&policies[0]["PolicyDocument"]["Statement"]);
    assert_eq!(statements.len(), 2);
    let st = &statements[0];
    // The second: the sandboxd token's secret, read only, and only when its ARN is given.
    let secret = seq(&statements[1]["!If"]);
    assert_eq!(s(&secret[0]), "HasSandboxdToken");
    assert_eq!(s(&secret[1]["Action"]), "secretsmanager:GetSecretValue");
    assert_eq!(s(&secret[1]["Resource"]["!Ref"]), "SandboxdTokenSecretArn");
    assert_eq!(s(&secret[2]["!Ref"]), "AWS::NoValue");
    assert_eq!(s(&t["Parameters"]["SandboxdTokenSecretArn"]["Default"]), "");
    assert_eq!(s(&st["Effect"]), "Allow");

    let sam = parse(SAM_TEMPLATE);
    let lambda = &seq(&props(&sam, "ReaperFunction")["Policies"])[0]["Statement"];
    assert_eq!(actions(st), actions(&seq(lambda)[0]));
    assert!(!actions(st)
        .iter()
        .any(|a| a.contains('*') || a.contains("Scan")));

    let resources = seq(&st["Resource"]);
    assert_eq!(resources.len(), 2);
    assert_eq!(s(&resources[0]["!Ref"]), "TableArn");
    assert_eq!(s(&resources[1]["!Sub"]), "${TableArn}/index/*");
}

#[test]
fn the_role_arn_output_is_what_the_function_reads_as_aws_role_arn() {
    let t = parse(OIDC_TEMPLATE);
    assert_eq!(
        s(&t["Outputs"]["RoleArn"]["Value"]["!GetAtt"]),
        "ReaperVercelRole.Arn"
    );
    assert_eq!(
        props(&t, "ReaperVercelRole")["MaxSessionDuration"].as_u64(),
        Some(3600)
    );
    let readme = include_str!("../README.md");
    for step in ["vercel-oidc.yaml", "AWS_ROLE_ARN", "RoleArn", "AWS_REGION"] {
        assert!(readme.contains(step), "the deploy section names {step}");
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// cfn-lint from PyPI in a virtualenv of its own, created on first use.
fn cfn_lint() -> PathBuf {
    let venv = std::env::var_os("REAPER_CFN_LINT_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target/venv-cfn-lint"));
    let bin = venv.join("bin");
    let pin = format!("cfn-lint=={CFN_LINT_VERSION}");
    let marker = venv.join("reaper-tools.txt");
    if std::fs::read_to_string(&marker).unwrap_or_default() != pin {
        if !bin.join("pip").exists() {
            let ok = std::process::Command::new("python3")
                .args(["-m", "venv"])
                .arg(&venv)
                .status()
                .expect("run python3 -m venv")
                .success();
            assert!(ok, "python3 -m venv {} failed", venv.display());
        }
        let ok = std::process::Command::new(bin.join("pip"))
            .args(["install", "--quiet", &pin])
            .status()
            .expect("run pip install")
            .success();
        assert!(ok, "pip install {pin} failed");
        std::fs::write(&marker, &pin).expect("write the venv marker");
    }
    bin.join("cfn-lint")
}

#[test]
fn the_oidc_template_is_clean_under_cfn_lint() {
    let output = std::process::Command::new(cfn_lint())
        .arg(workspace_root().join("infra/aws/vercel-oidc.yaml"))
        .output()
        .expect("run cfn-lint");
    assert!(
        output.status.success(),
        "cfn-lint found problems:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
