//! Every report entry says why it ended as it did: a stable code and a sentence, in the entry,
//! its JSON and the published schema.

mod common;

use std::borrow::Cow;
use std::collections::BTreeSet;

use common::{entry, Harness, NOW, TTL};
use reaper_core::reap::{ReapOutcome, SweepReport, SweepStatus, SWEEP_REPORT_SCHEMA_VERSION};
use reaper_core::reason::{ReasonCode, Unreachable};
use reaper_core::RunExitProbe;

const FRESH: i64 = NOW - 60_000;
const EXPIRED: i64 = NOW - TTL as i64 - 1;

fn schema() -> serde_json::Value {
    let text = include_str!("../schema/sweep-report.schema.json");
    serde_json::from_str(text).expect("the schema is JSON")
}

#[test]
fn every_reason_code_the_core_can_emit_is_listed_in_the_schema_and_its_readme() {
    let schema = schema();
    let listed: BTreeSet<String> = schema["$defs"]["reason"]["properties"]["code"]["enum"]
        .as_array()
        .expect("the schema lists the codes")
        .iter()
        .map(|c| c.as_str().expect("a code is a string").to_string())
        .collect();
    let emitted: BTreeSet<String> = ReasonCode::ALL
        .iter()
        .map(|c| c.as_str().to_string())
        .collect();
    assert_eq!(
        listed, emitted,
        "the schema's codes and ReasonCode::ALL differ"
    );
    let readme = include_str!("../schema/README.md");
    for code in &emitted {
        assert!(
            readme.contains(&format!("| `{code}` |")),
            "schema/README.md does not explain {code}"
        );
    }
    let outcomes: BTreeSet<&str> = ReapOutcome::ALL.iter().map(|o| o.as_str()).collect();
    for code in &emitted {
        let (prefix, cause) = code.split_once('/').expect("outcome/cause");
        assert!(
            outcomes.contains(prefix) || prefix == "kept",
            "{code} names no outcome"
        );
        assert!(!cause.is_empty());
    }
    assert_eq!(
        schema["properties"]["schemaVersion"]["const"],
        SWEEP_REPORT_SCHEMA_VERSION
    );
}

#[tokio::test(start_paused = true)]
async fn each_unknown_run_names_why_its_journal_could_not_be_read() {
    let h = Harness::new();
    let causes = [
        (
            "no-key",
            Unreachable::NoSandboxKey,
            "unknown/no-sandbox-key",
        ),
        (
            "no-record",
            Unreachable::NoInstanceRecord {
                sandbox_key: "k-1".into(),
            },
            "unknown/no-instance-record",
        ),
        (
            "other-provider",
            Unreachable::ProviderNotConfigured {
                provider: "e2b".into(),
                serves: "local".into(),
            },
            "unknown/provider-not-configured",
        ),
        (
            "gone",
            Unreachable::SandboxGone {
                provider: "local".into(),
                sandbox_id: "sbx-9".into(),
            },
            "unknown/sandbox-gone",
        ),
    ];
    for (run, cause, _) in &causes {
        h.seed(run, Some(FRESH), Some("k-1"));
        h.probe
            .answer(run, RunExitProbe::Unreachable(cause.clone()));
    }
    h.seed("failing-probe", Some(FRESH), Some("k-1"));
    h.probe.answer(
        "failing-probe",
        RunExitProbe::Unknown {
            error: Some("exec failed: connection reset".into()),
        },
    );
    let report = h.sweep().await;
    for (run, _, code) in &causes {
        let e = entry(&report, run);
        assert_eq!(e.outcome, ReapOutcome::Unknown);
        assert_eq!(e.reason.code.as_str(), *code, "{e:?}");
        assert!(!e.reason.message.is_empty());
    }
    assert!(entry(&report, "no-record").reason.message.contains("k-1"));
    assert!(entry(&report, "other-provider")
        .reason
        .message
        .contains("e2b"));
    assert!(entry(&report, "gone").reason.message.contains("sbx-9"));
    let probe_error = &entry(&report, "failing-probe").reason;
    assert_eq!(probe_error.code, ReasonCode::UnknownProbeError);
    assert!(probe_error.message.contains("connection reset"));
}

#[tokio::test(start_paused = true)]
async fn finalized_expired_producing_and_failed_runs_each_carry_their_reason() {
    let h = Harness::new();
    h.seed("done", Some(FRESH), None);
    h.probe.finished("done", 3);
    h.seed("overdue", Some(EXPIRED), None);
    h.seed("working", Some(FRESH), None);
    h.seed("throws", Some(FRESH), None);
    h.probe.fail("throws", "the sandbox host said 500");
    h.seed("leaky", Some(FRESH), None);
    h.probe.finished("leaky", 0);
    h.reclaim.fail_for("leaky");
    let report = h.sweep().await;
    let code = |run: &str| entry(&report, run).reason.code;
    assert_eq!(code("done"), ReasonCode::FinalizedExited);
    assert!(entry(&report, "done").reason.message.contains("code 3"));
    assert_eq!(code("overdue"), ReasonCode::ExpiredTtl);
    assert_eq!(code("working"), ReasonCode::ProducingNoExitYet);
    assert_eq!(code("throws"), ReasonCode::FailedProbeError);
    assert!(entry(&report, "throws").reason.message.contains("500"));
    assert_eq!(code("leaky"), ReasonCode::ReclaimFailedError);
    for e in &report.runs {
        assert!(!e.reason.message.is_empty(), "{e:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn runs_left_alone_share_one_fixed_sentence_instead_of_each_owning_a_copy() {
    // 10,000 working runs in one report would otherwise hold 10,000 copies of it.
    let h = Harness::new();
    for run in ["working-1", "working-2"] {
        h.seed(run, Some(FRESH), None);
    }
    h.seed("done", Some(FRESH), None);
    h.probe.finished("done", 3);
    let report = h.sweep().await;
    let sentence = |run: &str| entry(&report, run).reason.message.clone();
    assert!(matches!(sentence("working-1"), Cow::Borrowed(_)));
    assert_eq!(sentence("working-1"), sentence("working-2"));
    assert_eq!(
        sentence("working-1").as_ptr(),
        sentence("working-2").as_ptr(),
        "the same static text"
    );
    // A sentence that names the run's own facts is its own.
    assert!(matches!(sentence("done"), Cow::Owned(ref s) if s.contains("code 3")));
}

#[tokio::test(start_paused = true)]
async fn the_json_report_carries_its_schema_version_and_every_entry_its_reason() {
    let h = Harness::new();
    h.seed("done", Some(FRESH), None);
    h.probe.finished("done", 0);
    let report = SweepReport {
        sweep: SweepStatus::Swept,
        started_at: NOW,
        duration_ms: 5,
        report: h.sweep().await,
    };
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["schemaVersion"], SWEEP_REPORT_SCHEMA_VERSION);
    assert_eq!(json["sweep"]["state"], "swept");
    assert_eq!(json["runs"][0]["reason"]["code"], "finalized/exited");
    assert!(json["runs"][0]["reason"]["message"]
        .as_str()
        .unwrap()
        .contains("recorded completed"));
}
