//! The run record and its status (spec A.1, A.2, C.3, H10.1–7).

use reaper_core::domain::{Patch, RunError, RunPatch, RunRecord, RunStatus};
use serde_json::json;

#[test]
fn completed_failed_and_aborted_are_terminal_and_running_and_interrupted_are_not() {
    let terminal: Vec<_> = RunStatus::ALL
        .into_iter()
        .filter(|s| s.is_terminal())
        .collect();
    assert_eq!(
        terminal,
        vec![RunStatus::Completed, RunStatus::Failed, RunStatus::Aborted]
    );
    assert!(!RunStatus::Running.is_terminal());
    assert!(!RunStatus::Interrupted.is_terminal());
}

#[test]
fn rows_with_prototype_key_statuses_are_rejected_not_read_as_terminal() {
    for status in [
        "toString",
        "constructor",
        "valueOf",
        "hasOwnProperty",
        "isPrototypeOf",
        "__proto__",
    ] {
        let row = json!({"runId": "r", "threadId": "t", "status": status, "startedAt": 1});
        let err = serde_json::from_value::<RunRecord>(row).unwrap_err();
        assert!(err.to_string().contains("unknown variant"), "{err}");
    }
}

#[test]
fn only_the_five_exact_status_strings_parse() {
    for s in ["running", "interrupted", "completed", "failed", "aborted"] {
        assert_eq!(RunStatus::parse(s).unwrap().as_str(), s);
    }
    for bad in ["RUNNING", "", "Completed", "done", "__proto__"] {
        assert_eq!(RunStatus::parse(bad), None, "{bad}");
    }
    for bad in [
        json!(null),
        json!(0),
        json!(1),
        json!(true),
        json!({}),
        json!([]),
    ] {
        assert!(serde_json::from_value::<RunStatus>(bad).is_err());
    }
}

#[test]
fn run_error_round_trips_with_and_without_a_code() {
    let with = RunError::new("blocked").with_code("content_filter");
    let json = serde_json::to_value(&with).unwrap();
    assert_eq!(
        json,
        json!({"message": "blocked", "code": "content_filter"})
    );
    assert_eq!(serde_json::from_value::<RunError>(json).unwrap(), with);
    let without = serde_json::from_value::<RunError>(json!({"message": "x"})).unwrap();
    assert_eq!(without.code, None);
}

#[test]
fn record_uses_the_reference_json_field_names_and_omits_absent_fields() {
    let mut r = RunRecord::new("r1", "t1", 5);
    r.sandbox_key = Some("k".into());
    r.detached_since = Some(6);
    r.cancel_requested = Some(false);
    r.driver_epoch = Some(2);
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(
        json,
        json!({
            "runId": "r1", "threadId": "t1", "status": "running", "startedAt": 5,
            "sandboxKey": "k", "detachedSince": 6, "cancelRequested": false, "driverEpoch": 2
        })
    );
    assert_eq!(serde_json::from_value::<RunRecord>(json).unwrap(), r);
    assert!(serde_json::to_value(RunRecord::new("a", "b", 1))
        .unwrap()
        .get("exitCode")
        .is_none());
}

#[test]
fn patch_sets_clears_and_keeps_fields() {
    let mut r = RunRecord::new("r", "t", 1);
    r.apply(&RunPatch::detach(10, Some("k".into())));
    assert_eq!(
        (r.detached_since, r.sandbox_key.as_deref()),
        (Some(10), Some("k"))
    );
    r.apply(&RunPatch {
        detached_since: Patch::Clear,
        ..Default::default()
    });
    assert_eq!(r.detached_since, None);
    assert_eq!(
        r.sandbox_key.as_deref(),
        Some("k"),
        "an unnamed field stays"
    );
}

#[test]
fn error_payloads_are_normalised_like_the_reference() {
    assert_eq!(
        RunError::from_json(&json!({"message": "m", "code": "c"})),
        RunError::new("m").with_code("c")
    );
    assert_eq!(
        RunError::from_json(&json!({"message": "m", "code": 429}))
            .code
            .as_deref(),
        Some("429")
    );
    assert_eq!(
        RunError::from_json(&json!({"message": "m", "status": 503}))
            .code
            .as_deref(),
        Some("503")
    );
    assert_eq!(
        RunError::from_json(&json!({"message": ""})).message,
        RunError::UNKNOWN_MESSAGE
    );
    assert_eq!(RunError::from_json(&json!("plain")).message, "plain");
    assert_eq!(
        RunError::from_json(&json!(42)).message,
        RunError::UNKNOWN_MESSAGE
    );
    assert_eq!(RunError::normalise("x", None, true), RunError::aborted());
    assert_eq!(
        RunError::aborted(),
        RunError::new("Request aborted").with_code("aborted")
    );
}
