//! Test-only routes, compiled only with the `test-hooks` feature (never in the deploy build):
//! make the next sweeps panic, hang or fail; delete the alarm; run the store conformance suite
//! against the bound D1 database, one case per request.

use reaper_core::ports::RunStoreCapabilities;
use reaper_d1::D1Store;
use reaper_testkit::conformance::{
    delivery_log, lease_store, message_store, reclaim_ledger, run_cases, run_store,
    sandbox_instance_store, Case, Verdict,
};
use serde::Deserialize;
use serde_json::json;
use worker::*;

use super::{open_store, RunReaper};

const KEY_SABOTAGE: &str = "sabotage";

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
struct Sabotage {
    /// `panic`, `hang` or `fail`.
    mode: String,
    /// How many alarms in a row it applies to.
    times: u32,
}

/// Called by `alarm()` right after the safety net is armed.
pub(super) async fn sabotage(reaper: &RunReaper) -> Result<()> {
    let storage = reaper.state.storage();
    let Some(mut s) = storage.get::<Sabotage>(KEY_SABOTAGE).await? else {
        return Ok(());
    };
    s.times = s.times.saturating_sub(1);
    if s.times == 0 {
        storage.delete(KEY_SABOTAGE).await?;
    } else {
        storage.put(KEY_SABOTAGE, &s).await?;
    }
    match s.mode.as_str() {
        "panic" => panic!("sabotaged sweep: panicking on request"),
        "hang" => {
            Delay::from(std::time::Duration::from_secs(3_600)).await;
            Ok(())
        }
        _ => Err(Error::RustError(
            "sabotaged sweep: failing on request".into(),
        )),
    }
}

pub(super) async fn durable_object(reaper: &RunReaper, mut req: Request) -> Result<Response> {
    let storage = reaper.state.storage();
    match (req.method(), req.path().as_str()) {
        (Method::Post, "/test/sabotage") => {
            let s: Sabotage = req.json().await?;
            storage.put(KEY_SABOTAGE, &s).await?;
            Response::from_json(&s)
        }
        (Method::Delete, "/test/alarm") => {
            storage.delete_alarm().await?;
            Response::from_json(&json!({ "alarm": storage.get_alarm().await? }))
        }
        (Method::Post, "/test/alarm") => {
            let at: i64 = req.json().await?;
            storage.set_alarm(super::absolute(at)).await?;
            Response::from_json(&json!({ "alarm": storage.get_alarm().await? }))
        }
        _ => Response::error("not found", 404),
    }
}

type Suite = (&'static str, Vec<Case<D1Store>>);

fn suites() -> Vec<Suite> {
    vec![
        ("run_store", run_store::cases::<D1Store>()),
        ("lease_store", lease_store::cases::<D1Store>()),
        ("delivery_log", delivery_log::cases::<D1Store>()),
        (
            "sandbox_instance_store",
            sandbox_instance_store::cases::<D1Store>(),
        ),
        ("message_store", message_store::cases::<D1Store>()),
        ("reclaim_ledger", reclaim_ledger::cases::<D1Store>()),
    ]
}

pub(super) async fn worker(req: Request, env: Env) -> Result<Response> {
    if req.path() != "/test/conformance" {
        let stub = super::reaper_stub(&env)?;
        return stub.fetch_with_request(req).await;
    }
    let url = req.url()?;
    let param = |name: &str| {
        url.query_pairs()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    };
    let (Some(suite), Some(case)) = (param("suite"), param("case")) else {
        let list: Vec<_> = suites()
            .into_iter()
            .flat_map(|(suite, cases)| {
                cases
                    .into_iter()
                    .map(move |c| json!({ "suite": suite, "case": c.name }))
            })
            .collect();
        return Response::from_json(&list);
    };
    let Some(found) = suites()
        .into_iter()
        .find(|(s, _)| *s == suite)
        .and_then(|(_, cases)| cases.into_iter().find(|c| c.name == case))
    else {
        return Response::error(format!("no case {suite}::{case}"), 404);
    };
    let store = open_store(&env).await?;
    let nonce = format!(
        "cf{}x{}",
        super::now_ms(),
        (js_sys::Math::random() * 1e9) as u64
    );
    let report = run_cases(&store, &[found], &nonce, RunStoreCapabilities::default())
        .await
        .pop()
        .expect("one case ran");
    let (verdict, message) = match report.result {
        Ok(Verdict::Passed) => ("passed", String::new()),
        Ok(Verdict::Skipped(reason)) => ("skipped", reason),
        Err(failure) => ("failed", failure.message),
    };
    Response::from_json(&json!({
        "suite": suite,
        "case": case,
        "verdict": verdict,
        "message": message,
    }))
}
