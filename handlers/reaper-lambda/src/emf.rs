//! The sweep report as one CloudWatch Embedded Metric Format line: CloudWatch Logs turns it into
//! metrics (and the template's alarm watches `reclaim-failed`) with no API call and no agent.
//! <https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html>

use reaper_core::reap::{ReapOutcome, SweepStatus};
use reaper_serverless::ServerlessReport;
use serde_json::{json, Map, Value};

/// The namespace when `REAPER_METRICS_NAMESPACE` is unset.
pub const DEFAULT_NAMESPACE: &str = "Reaper";
/// The one dimension: the function's name (so two stacks in one account stay apart).
pub const DIMENSION: &str = "FunctionName";

pub const CONSIDERED: &str = "considered";
pub const PROBED: &str = "probed";
pub const DEFERRED: &str = "deferred";
pub const DURATION: &str = "duration";
pub const DYNAMODB_REQUESTS: &str = "dynamodb-requests";
/// 1 when another sweep held the lease (nothing was done; not an error).
pub const LEASE_HELD: &str = "lease-held";
/// 1 when the sweep could not run at all (lease store failed, invalid options, or the listing
/// of detached runs failed).
pub const SWEEP_FAILED: &str = "sweep-failed";
/// 1 when the sweep listed the detached runs and finished, else 0: the heartbeat. `duration` is
/// written by every invocation that returns, failed and lease-held ones included, so it cannot
/// tell a working reaper from one that fails every tick.
pub const SWEPT: &str = "swept";
/// Reclaim-ledger entries not yet settled, and those whose destroy failed (may be billing).
pub const SANDBOXES_PENDING: &str = "sandboxes-pending";
pub const SANDBOXES_LEAKED: &str = "sandboxes-leaked";
/// Detached runs the listing matched, and how long the oldest has waited.
pub const BACKLOG: &str = "backlog";
pub const OLDEST_DETACHED: &str = "oldest-detached-age";
/// The longest waits of this sweep's runs (see `reaper_core::reap::SweepSlo`).
pub const DETACHED_TO_FINALIZED: &str = "detached-to-finalized";
pub const TTL_TO_DESTROYED: &str = "ttl-to-destroyed";

/// Every metric name with its unit, outcomes first (named as in the report).
pub fn metrics() -> Vec<(&'static str, &'static str)> {
    let mut all: Vec<_> = ReapOutcome::ALL
        .iter()
        .map(|o| (o.as_str(), "Count"))
        .collect();
    all.extend([
        (CONSIDERED, "Count"),
        (PROBED, "Count"),
        (DEFERRED, "Count"),
        (DURATION, "Milliseconds"),
        (DYNAMODB_REQUESTS, "Count"),
        (LEASE_HELD, "Count"),
        (SWEEP_FAILED, "Count"),
        (SWEPT, "Count"),
        (SANDBOXES_PENDING, "Count"),
        (SANDBOXES_LEAKED, "Count"),
        (BACKLOG, "Count"),
        (OLDEST_DETACHED, "Milliseconds"),
        (DETACHED_TO_FINALIZED, "Milliseconds"),
        (TTL_TO_DESTROYED, "Milliseconds"),
    ]);
    all
}

/// The EMF document for one sweep. `timestamp` is epoch milliseconds.
pub fn document(
    report: &ServerlessReport,
    namespace: &str,
    function_name: &str,
    timestamp: i64,
) -> Value {
    let r = &report.sweep.report;
    let (held, failed) = match report.sweep.sweep {
        // A sweep whose listing failed swept nothing: the same alarm as one that could not run.
        SweepStatus::Swept if r.listing_error.is_some() => (0, 1),
        // Damage stopped the sweep: the same alarm, every sweep, until it is repaired.
        SweepStatus::Swept if r.damaged.is_some() => (0, 1),
        SweepStatus::Swept => (0, 0),
        SweepStatus::AlreadyRunning { .. } => (1, 0),
        // An operator's pause is no failure to alarm on (the staleness alarm still fires).
        SweepStatus::Paused { .. } => (0, 0),
        _ => (0, 1),
    };
    let mut doc = Map::new();
    for outcome in ReapOutcome::ALL {
        doc.insert(outcome.as_str().into(), json!(r.outcomes.get(outcome)));
    }
    doc.insert(CONSIDERED.into(), json!(r.considered));
    doc.insert(PROBED.into(), json!(r.probed));
    doc.insert(DEFERRED.into(), json!(r.deferred));
    doc.insert(DURATION.into(), json!(report.sweep.duration_ms));
    doc.insert(
        DYNAMODB_REQUESTS.into(),
        json!(report.dynamodb.total.requests),
    );
    doc.insert(LEASE_HELD.into(), json!(held));
    doc.insert(SWEEP_FAILED.into(), json!(failed));
    let swept = matches!(report.sweep.sweep, SweepStatus::Swept) && failed == 0;
    doc.insert(SWEPT.into(), json!(u8::from(swept)));
    doc.insert(BACKLOG.into(), json!(r.slo.backlog));
    // A log field, not a metric: whether `backlog` is the count or a floor ("at least").
    doc.insert("backlogExact".into(), json!(r.slo.backlog_exact));
    // Figures that have no value this sweep (no ledger read, no run finalized) are left out,
    // and so are their definitions: CloudWatch would reject a declared metric without a value.
    let optional = [
        (
            SANDBOXES_PENDING,
            r.reclaims.ledger.map(|l| l.pending as i64),
        ),
        (SANDBOXES_LEAKED, r.reclaims.ledger.map(|l| l.leaked as i64)),
        (OLDEST_DETACHED, r.slo.oldest_detached_ms),
        (DETACHED_TO_FINALIZED, r.slo.max_detached_to_finalized_ms),
        (TTL_TO_DESTROYED, r.slo.max_ttl_to_destroyed_ms),
    ];
    for (name, value) in optional {
        if let Some(v) = value {
            doc.insert(name.into(), json!(v));
        }
    }
    doc.insert(DIMENSION.into(), json!(function_name));
    // Not a metric: lets a log query tie the metrics to the sweep.
    doc.insert("sweepState".into(), json!(report.state()));
    let definitions: Vec<Value> = metrics()
        .into_iter()
        .filter(|(name, _)| doc.contains_key(*name))
        .map(|(name, unit)| json!({ "Name": name, "Unit": unit }))
        .collect();
    doc.insert(
        "_aws".into(),
        json!({
            "Timestamp": timestamp,
            "CloudWatchMetrics": [{
                "Namespace": namespace,
                "Dimensions": [[DIMENSION]],
                "Metrics": definitions,
            }],
        }),
    );
    Value::Object(doc)
}

#[cfg(test)]
mod tests {
    use reaper_core::reap::{OutcomeCounts, ReapReport, SweepReport};
    use reaper_dynamodb::RequestStats;
    use reaper_serverless::{plan, ServerlessConfig};

    use super::*;

    fn report(sweep: SweepStatus) -> ServerlessReport {
        let config = ServerlessConfig::from_env(|k| {
            Some(
                match k {
                    "REAPER_TABLE" => "runs",
                    "REAPER_SANDBOXD_URL" => "http://127.0.0.1:1",
                    "REAPER_SANDBOXD_TOKEN" => "t0123456789abcdef",
                    "REAPER_DETACHED_TTL" => "30m",
                    _ => return None,
                }
                .into(),
            )
        })
        .unwrap();
        let mut dynamodb = RequestStats::default();
        dynamodb.total.requests = 17;
        ServerlessReport {
            sweep: SweepReport {
                sweep,
                started_at: 1_000,
                duration_ms: 2_345,
                report: ReapReport {
                    considered: 6,
                    probed: 5,
                    deferred: 3,
                    outcomes: OutcomeCounts {
                        finalized: 2,
                        expired: 1,
                        producing: 1,
                        reclaim_failed: 1,
                        failed: 1,
                        ..OutcomeCounts::default()
                    },
                    reclaims: reaper_core::reap::ReclaimReport {
                        ledger: Some(reaper_core::LedgerCounts {
                            pending: 4,
                            leaked: 2,
                            oldest_first_seen: Some(1),
                        }),
                        ..Default::default()
                    },
                    slo: reaper_core::reap::SweepSlo {
                        backlog: 40,
                        oldest_detached_ms: Some(7_200_000),
                        max_detached_to_finalized_ms: Some(95_000),
                        max_ttl_to_destroyed_ms: Some(12_000),
                        ..Default::default()
                    },
                    ..ReapReport::default()
                },
            },
            plan: plan(&config, "me", 1_000, 301_000),
            dynamodb,
            postgres: None,
        }
    }

    #[test]
    fn the_document_declares_every_metric_once_under_one_namespace_and_dimension() {
        let doc = document(&report(SweepStatus::Swept), "Reaper", "reaper-fn", 42);
        let aws = &doc["_aws"];
        assert_eq!(aws["Timestamp"], 42);
        let directives = aws["CloudWatchMetrics"].as_array().unwrap();
        assert_eq!(directives.len(), 1);
        assert_eq!(directives[0]["Namespace"], "Reaper");
        assert_eq!(directives[0]["Dimensions"], json!([["FunctionName"]]));
        let names: Vec<&str> = directives[0]["Metrics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["Name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "finalized",
                "expired",
                "producing",
                "unknown",
                "budget-exceeded",
                "not-claimed",
                "reclaim-failed",
                "failed",
                "considered",
                "probed",
                "deferred",
                "duration",
                "dynamodb-requests",
                "lease-held",
                "sweep-failed",
                "swept",
                "sandboxes-pending",
                "sandboxes-leaked",
                "backlog",
                "oldest-detached-age",
                "detached-to-finalized",
                "ttl-to-destroyed",
            ]
        );
        // EMF requires every declared metric and dimension as a top-level member.
        for name in names.iter().chain(["FunctionName"].iter()) {
            assert!(doc.get(name).is_some(), "{name} has no value");
        }
        assert_eq!(doc["FunctionName"], "reaper-fn");
        assert!(doc["backlogExact"].is_boolean(), "{doc}");
        assert_eq!(
            directives[0]["Metrics"][11],
            json!({"Name": "duration", "Unit": "Milliseconds"})
        );
    }

    #[test]
    fn the_values_are_the_reports_counts_duration_and_requests() {
        let doc = document(&report(SweepStatus::Swept), "Reaper", "f", 0);
        assert_eq!(
            (
                &doc["finalized"],
                &doc["expired"],
                &doc["producing"],
                &doc["unknown"]
            ),
            (&json!(2), &json!(1), &json!(1), &json!(0))
        );
        assert_eq!(
            (&doc["reclaim-failed"], &doc["failed"]),
            (&json!(1), &json!(1))
        );
        assert_eq!(
            (&doc["considered"], &doc["probed"], &doc["deferred"]),
            (&json!(6), &json!(5), &json!(3))
        );
        assert_eq!(doc["duration"], 2_345);
        assert_eq!(doc["dynamodb-requests"], 17);
        assert_eq!(
            (&doc["lease-held"], &doc["sweep-failed"]),
            (&json!(0), &json!(0))
        );
        assert_eq!(doc["sweepState"], "swept");
    }

    #[test]
    fn a_held_lease_and_a_failed_sweep_are_their_own_metrics() {
        let held = document(
            &report(SweepStatus::AlreadyRunning {
                holder: "other".into(),
                expires_at: 9,
            }),
            "N",
            "f",
            0,
        );
        assert_eq!(
            (&held["lease-held"], &held["sweep-failed"]),
            (&json!(1), &json!(0))
        );
        let failed = document(
            &report(SweepStatus::LeaseUnavailable {
                error: "throttled".into(),
            }),
            "N",
            "f",
            0,
        );
        assert_eq!(
            (&failed["lease-held"], &failed["sweep-failed"]),
            (&json!(0), &json!(1))
        );
        assert_eq!(failed["sweepState"], "lease-unavailable");
    }

    #[test]
    fn the_leak_and_wait_figures_are_metrics_and_absent_ones_are_left_out() {
        let doc = document(&report(SweepStatus::Swept), "Reaper", "reaper-fn", 42);
        assert_eq!(doc[SANDBOXES_LEAKED], 2);
        assert_eq!(doc[SANDBOXES_PENDING], 4);
        assert_eq!(doc[BACKLOG], 40);
        assert_eq!(doc[OLDEST_DETACHED], 7_200_000);
        let mut quiet = report(SweepStatus::Swept);
        quiet.sweep.report.reclaims.ledger = None;
        quiet.sweep.report.slo = Default::default();
        let doc = document(&quiet, "Reaper", "reaper-fn", 42);
        assert!(doc.get(SANDBOXES_LEAKED).is_none());
        let declared = doc["_aws"]["CloudWatchMetrics"][0]["Metrics"].to_string();
        assert!(!declared.contains(SANDBOXES_LEAKED), "{declared}");
        assert!(!declared.contains(TTL_TO_DESTROYED), "{declared}");
        assert_eq!(doc[BACKLOG], 0);
    }

    #[test]
    fn a_failed_listing_is_a_failed_sweep() {
        let mut r = report(SweepStatus::Swept);
        r.sweep.report.listing_error = Some("database is damaged".into());
        assert_eq!(document(&r, "Reaper", "f", 1)[SWEEP_FAILED], 1);
        assert_eq!(
            document(&report(SweepStatus::Swept), "Reaper", "f", 1)[SWEEP_FAILED],
            0
        );
    }

    #[test]
    fn a_sweep_stopped_by_damage_is_a_failed_sweep_and_not_swept() {
        let mut r = report(SweepStatus::Swept);
        r.sweep.report.damaged = Some("the database is damaged: ResourceNotFoundException".into());
        let doc = document(&r, "Reaper", "f", 1);
        assert_eq!(doc[SWEEP_FAILED], 1);
        assert_eq!(doc[SWEPT], 0);
    }

    #[test]
    fn only_a_sweep_that_listed_and_finished_counts_as_swept() {
        assert_eq!(document(&report(SweepStatus::Swept), "R", "f", 1)[SWEPT], 1);
        let mut listing_failed = report(SweepStatus::Swept);
        listing_failed.sweep.report.listing_error = Some("AccessDenied".into());
        let held = report(SweepStatus::AlreadyRunning {
            holder: "other".into(),
            expires_at: 9,
        });
        let lease_failed = report(SweepStatus::LeaseUnavailable {
            error: "AccessDenied".into(),
        });
        for r in [listing_failed, held, lease_failed] {
            let doc = document(&r, "R", "f", 1);
            assert_eq!(doc[SWEPT], 0, "{}", doc["sweepState"]);
            // Still declared, so the heartbeat's Sum sees a 0, not a gap it could misread.
            assert!(doc["_aws"].to_string().contains(SWEPT));
        }
    }

    #[test]
    fn the_document_is_a_single_json_line() {
        let line =
            serde_json::to_string(&document(&report(SweepStatus::Swept), "R", "f", 1)).unwrap();
        assert!(!line.contains('\n'));
        let back: Value = serde_json::from_str(&line).unwrap();
        assert!(back["_aws"]["CloudWatchMetrics"].is_array());
    }
}
