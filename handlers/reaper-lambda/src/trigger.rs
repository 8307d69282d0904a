//! What invoked the function. Only for logging: every payload sweeps the same way, so a
//! Scheduler `Input` of `{}` or a manual test event works as well as the rule envelope.

use aws_lambda_events::eventbridge::EventBridgeEvent;
use serde::Serialize;
use serde_json::Value;

/// The Scheduler `Input` the SAM template sets: Scheduler fills in the `<aws.scheduler.*>`
/// context attributes on each delivery.
pub const SCHEDULER_INPUT_SOURCE: &str = "reaper.schedule";

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "trigger")]
pub enum Trigger {
    /// An EventBridge rule's "Scheduled Event" envelope.
    ScheduledRule {
        id: Option<String>,
        time: Option<String>,
        rule: Option<String>,
    },
    /// EventBridge Scheduler with the template's `Input` (context attributes filled in).
    Scheduler {
        #[serde(rename = "scheduleArn")]
        schedule_arn: Option<String>,
        #[serde(rename = "scheduledTime")]
        scheduled_time: Option<String>,
        #[serde(rename = "executionId")]
        execution_id: Option<String>,
        attempt: Option<String>,
    },
    /// Anything else: a Scheduler with another `Input` (even `{}`), a console test, a manual
    /// `aws lambda invoke`.
    Other,
}

impl Trigger {
    /// Recognises the payload without ever failing on it.
    pub fn recognise(payload: &Value) -> Trigger {
        if payload.get("detail-type").and_then(Value::as_str) == Some("Scheduled Event") {
            if let Ok(event) = serde_json::from_value::<EventBridgeEvent>(payload.clone()) {
                return Trigger::ScheduledRule {
                    id: event.id,
                    time: event.time.map(|t| t.to_rfc3339()),
                    rule: event.resources.and_then(|r| r.into_iter().next()),
                };
            }
        }
        if payload.get("source").and_then(Value::as_str) == Some(SCHEDULER_INPUT_SOURCE) {
            let field = |name: &str| match payload.get(name) {
                Some(Value::String(s)) => Some(s.clone()),
                Some(Value::Number(n)) => Some(n.to_string()),
                _ => None,
            };
            return Trigger::Scheduler {
                schedule_arn: field("scheduleArn"),
                scheduled_time: field("scheduledTime"),
                execution_id: field("executionId"),
                attempt: field("attempt"),
            };
        }
        Trigger::Other
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_rule_envelope_is_recognised_with_its_id_time_and_rule() {
        let payload = json!({
            "version": "0", "id": "53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa",
            "detail-type": "Scheduled Event", "source": "aws.events",
            "account": "123456789012", "time": "2015-10-08T16:53:06Z", "region": "us-east-1",
            "resources": ["arn:aws:events:us-east-1:123456789012:rule/my-scheduled-rule"],
            "detail": {}
        });
        assert_eq!(
            Trigger::recognise(&payload),
            Trigger::ScheduledRule {
                id: Some("53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa".into()),
                time: Some("2015-10-08T16:53:06+00:00".into()),
                rule: Some("arn:aws:events:us-east-1:123456789012:rule/my-scheduled-rule".into()),
            }
        );
    }

    #[test]
    fn the_templates_scheduler_input_is_recognised_with_its_context_attributes() {
        let payload = json!({
            "source": SCHEDULER_INPUT_SOURCE,
            "scheduleArn": "arn:aws:scheduler:us-east-1:123456789012:schedule/default/reaper",
            "scheduledTime": "2026-01-01T00:01:00Z",
            "executionId": "d7c8e2a1",
            "attempt": "1"
        });
        let Trigger::Scheduler {
            schedule_arn,
            attempt,
            ..
        } = Trigger::recognise(&payload)
        else {
            panic!("not recognised as the Scheduler input");
        };
        assert!(schedule_arn.unwrap().ends_with("schedule/default/reaper"));
        assert_eq!(attempt.as_deref(), Some("1"));
    }

    #[test]
    fn an_empty_object_null_or_a_malformed_envelope_is_other_and_never_an_error() {
        for payload in [
            json!({}),
            Value::Null,
            json!("tick"),
            json!([1, 2]),
            json!({"detail-type": "Scheduled Event"}),
            json!({"detail-type": "Scheduled Event", "source": 7, "detail": {}}),
        ] {
            assert_eq!(Trigger::recognise(&payload), Trigger::Other, "{payload}");
        }
    }
}
