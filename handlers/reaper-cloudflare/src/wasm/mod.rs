//! Everything that touches the Workers runtime: the Durable Object, the Worker's routes, the
//! Cron Trigger, and the adapters the core runs on.

mod console;
mod d1;
mod runtime;
#[cfg(feature = "test-hooks")]
mod test_hooks;

use std::sync::Arc;

use reaper_core::reap::{sweep_until, ReapDeps, SweepReport};
use reaper_core::{EpochMs, ProviderSet, SandboxProvider};
use reaper_d1::D1Store;
use reaper_http_sandbox::{HttpProviderConfig, HttpSandboxProvider};
use serde_json::json;
use worker::*;

use crate::config::{Config, ADMIN_TOKEN, STATUS_TOKEN};
use crate::health;
use crate::logging::{self, TARGET};
use crate::meter::SubrequestMeter;
use crate::plan;
use d1::D1Client;
use runtime::{now_ms, FetchTransport, Metered, WorkerClock, WorkerSleeper};

/// The Durable Object binding and the one instance's name: the reaper is a singleton.
const DO_BINDING: &str = "REAPER";
const DO_NAME: &str = "reaper";
/// The D1 binding.
const D1_BINDING: &str = "DB";
/// When the settings are unusable the alarm still re-arms, this far out, so fixing `[vars]`
/// and redeploying is enough to bring the reaper back.
const BAD_CONFIG_RETRY_MS: i64 = 5 * 60 * 1000;

const KEY_LAST_SWEEP: &str = "lastSweep";
const KEY_SWEEPS: &str = "sweeps";
const KEY_ATTEMPTS: &str = "attempts";
const KEY_LAST_RETENTION: &str = "lastRetention";
/// The [`health::Mark`] of the last alarm, judged by `/status`.
const KEY_HEALTH: &str = "health";
/// When the object first saw a request or alarm: a fresh deployment is not yet stale.
const KEY_FIRST_SEEN: &str = "firstSeen";

/// A `[vars]` setting or a secret.
fn setting(env: &Env, name: &str) -> Option<String> {
    env.var(name)
        .map(|v| v.to_string())
        .or_else(|_| env.secret(name).map(|v| v.to_string()))
        .ok()
}

/// Set once the deprecated setting names have been warned about: the settings are read on
/// every event, the warning is logged once per isolate.
static WARNED_RENAMED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub(crate) fn config(env: &Env) -> std::result::Result<Config, crate::config::ConfigError> {
    let config = Config::from_lookup(|name| setting(env, name))?;
    if !config.renamed.is_empty()
        && !WARNED_RENAMED.swap(true, std::sync::atomic::Ordering::Relaxed)
    {
        for renamed in &config.renamed {
            tracing::warn!(target: TARGET, old = renamed.old, new = renamed.new, "{renamed}");
        }
    }
    Ok(config)
}

fn absolute(at: EpochMs) -> ScheduledTime {
    // Absolute on purpose: worker's `i64` and `Duration` alarm times are offsets from now.
    ScheduledTime::new(js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(
        at as f64,
    )))
}

pub(crate) async fn open_store(env: &Env) -> Result<D1Store> {
    open_metered_store(env, None).await
}

/// The store, with every D1 round trip counted on `meter` when one is given.
pub(crate) async fn open_metered_store(
    env: &Env,
    meter: Option<Arc<SubrequestMeter>>,
) -> Result<D1Store> {
    let client = Arc::new(D1Client(env.d1(D1_BINDING)?, meter.clone()));
    // The alarm (metered) reads only the schema's version when it is current: D1 bills rows
    // read, and the full shape check reads 143. The admin routes check it in full.
    let opened = match meter {
        Some(_) => D1Store::open_current(client).await,
        None => D1Store::open(client).await,
    };
    opened.map_err(|e| Error::RustError(e.to_string()))
}

/// The providers `REAPER_PROVIDERS` lists, each over the metered `fetch`, routed by the
/// provider name in each instance record.
fn providers(config: &Config, env: &Env, meter: Arc<SubrequestMeter>) -> Result<ProviderSet> {
    let transport: Arc<dyn reaper_http_sandbox::HttpTransport> = Arc::new(Metered {
        inner: FetchTransport,
        meter,
    });
    let lookup = |name: &str| setting(env, name);
    let mut members: Vec<Arc<dyn SandboxProvider>> = Vec::new();
    for kind in &config.providers {
        let built = reaper_providers::build_hosted(*kind, lookup, transport.clone())
            .map_err(|e| Error::RustError(e.to_string()))?;
        match (built, &config.sandboxd) {
            (Some(hosted), _) => members.push(hosted),
            (None, Some(sandboxd)) => {
                let mut http = HttpProviderConfig::new(&sandboxd.url, sandboxd.token.expose());
                http.name = sandboxd.provider_name.clone();
                members.push(Arc::new(
                    HttpSandboxProvider::with_transport(http, transport.clone())
                        .map_err(|e| Error::RustError(e.to_string()))?,
                ));
            }
            (None, None) => {}
        }
    }
    ProviderSet::new(members).map_err(|e| Error::RustError(e.to_string()))
}

/// Builds the sweep's ports: D1 for every store, the listed providers over `fetch`.
fn deps(
    config: &Config,
    env: &Env,
    store: D1Store,
    meter: Arc<SubrequestMeter>,
) -> Result<ReapDeps> {
    let provider: Arc<dyn SandboxProvider> = Arc::new(providers(config, env, meter)?);
    Ok(ReapDeps::journaled(
        Arc::new(store),
        provider,
        Arc::new(WorkerClock),
        Arc::new(WorkerSleeper),
        config.journal_dir.clone(),
    ))
}

#[durable_object]
pub struct RunReaper {
    state: State,
    env: Env,
}

impl RunReaper {
    async fn count(&self, key: &str) -> Result<u64> {
        let storage = self.state.storage();
        let n = storage.get::<u64>(key).await?.unwrap_or(0) + 1;
        storage.put(key, n).await?;
        Ok(n)
    }

    /// When this object first saw a request (recorded on the first call).
    async fn first_seen(&self, now: EpochMs) -> Result<EpochMs> {
        let storage = self.state.storage();
        match storage.get::<EpochMs>(KEY_FIRST_SEEN).await? {
            Some(at) => Ok(at),
            None => {
                storage.put(KEY_FIRST_SEEN, now).await?;
                Ok(now)
            }
        }
    }

    async fn mark(&self, mark: &health::Mark) -> Result<()> {
        self.state.storage().put(KEY_HEALTH, mark).await
    }

    /// The health verdict: reads only (but for the first-seen time), never sweeps.
    async fn health(&self) -> Result<Response> {
        let now = now_ms();
        let config = match config(&self.env) {
            Ok(c) => c,
            Err(e) => {
                let body = json!({ "healthy": false, "now": now, "problems": [format!("the settings are unusable, so nothing sweeps: {e}")] });
                return Ok(Response::from_json(&body)?.with_status(503));
            }
        };
        let first = self.first_seen(now).await.ok();
        let mark = self
            .state
            .storage()
            .get::<health::Mark>(KEY_HEALTH)
            .await
            .map_err(|e| e.to_string());
        let verdict = health::assess(&config, mark, now, first);
        Ok(Response::from_json(&verdict)?.with_status(verdict.http_status()))
    }

    /// Arms the alarm when it is missing, stale or too far out (bootstrap and cron watchdog).
    async fn ensure(&self, reason: &str) -> Result<Response> {
        let config = match config(&self.env) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(target: TARGET, reason, error = %e, "cannot check the alarm: the settings are unusable");
                return Response::error(e.to_string(), 500);
            }
        };
        let storage = self.state.storage();
        let now = now_ms();
        self.first_seen(now).await?;
        let heal = plan::heal(&config, storage.get_alarm().await?, now);
        if let Some(at) = heal.arm_at() {
            storage.set_alarm(absolute(at)).await?;
        }
        tracing::info!(target: TARGET, reason, action = heal.action(), arm_at = heal.arm_at(), "alarm checked");
        Response::from_json(&json!({ "reason": reason, "heal": heal, "now": now }))
    }

    async fn status(&self) -> Result<Response> {
        let storage = self.state.storage();
        let last: Option<String> = storage.get(KEY_LAST_SWEEP).await?;
        let last: serde_json::Value = last
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or(serde_json::Value::Null);
        Response::from_json(&json!({
            "now": now_ms(),
            "alarm": storage.get_alarm().await?,
            "sweeps": storage.get::<u64>(KEY_SWEEPS).await?.unwrap_or(0),
            "attempts": storage.get::<u64>(KEY_ATTEMPTS).await?.unwrap_or(0),
            "lastSweep": last,
            "lastRetention": storage.get::<plan::RetentionMark>(KEY_LAST_RETENTION).await?,
        }))
    }

    async fn record(&self, value: serde_json::Value) -> Result<()> {
        self.state
            .storage()
            .put(KEY_LAST_SWEEP, value.to_string())
            .await
    }

    async fn run_sweep(
        &self,
        config: &Config,
        start: EpochMs,
    ) -> Result<(SweepReport, plan::SweepPlan, D1Store, crate::meter::Used)> {
        let owner = format!("cloudflare:{}:{start}", self.state.id());
        // The round-robin cursor is the core's: kept with the sweep lease in D1.
        let plan = plan::plan(config, owner, start);
        let meter = Arc::new(SubrequestMeter::new(plan.subrequest_stop_at));
        let store = open_metered_store(&self.env, Some(meter.clone())).await?;
        let deps = deps(config, &self.env, store.clone(), meter.clone())?;
        let report = sweep_until(&deps, &plan.options, plan.lease_ttl_ms, Some(meter.stop())).await;
        let used = meter.used();
        Ok((report, plan, store, used))
    }

    /// Ages out delivery-log events after a sweep, when due ([`plan::retention_due`]) and
    /// before the sweep's deadline, within [`plan::RETENTION_ROUND_TRIPS`] D1 round trips.
    /// Best effort: a failure is logged and the next alarm tries again.
    async fn retention(&self, config: &Config, store: &D1Store, deadline: EpochMs) -> Result<()> {
        let storage = self.state.storage();
        let last = storage
            .get::<plan::RetentionMark>(KEY_LAST_RETENTION)
            .await?;
        let now = now_ms();
        if now >= deadline || !plan::retention_due(last, now) {
            return Ok(());
        }
        let retention_ms = u64::try_from(config.log_retention.as_millis()).unwrap_or(u64::MAX);
        match store
            .prune_events(
                now,
                retention_ms,
                plan::RETENTION_BATCH_EVENTS,
                plan::RETENTION_ROUND_TRIPS,
            )
            .await
        {
            Ok(r) => {
                tracing::info!(target: TARGET, runs = r.runs, events_deleted = r.events_deleted, batches = r.batches, more = r.more, retention_ms, "event retention");
                storage
                    .put(
                        KEY_LAST_RETENTION,
                        plan::RetentionMark {
                            at: now,
                            more: r.more,
                        },
                    )
                    .await?;
            }
            Err(e) => {
                tracing::error!(target: TARGET, error = %e, damaged = reaper_d1::is_damaged(&e), "event retention failed");
            }
        }
        Ok(())
    }
}

impl DurableObject for RunReaper {
    fn new(state: State, env: Env) -> Self {
        console::install();
        RunReaper { state, env }
    }

    async fn fetch(&self, req: Request) -> Result<Response> {
        let path = req.path();
        match (req.method(), path.as_str()) {
            (Method::Post, "/ensure") => {
                let reason = req
                    .url()?
                    .query_pairs()
                    .find(|(k, _)| k == "reason")
                    .map(|(_, v)| v.into_owned())
                    .unwrap_or_else(|| "ensure".into());
                self.ensure(&reason).await
            }
            (Method::Get, "/status") => self.status().await,
            (Method::Get, "/health") => self.health().await,
            #[cfg(feature = "test-hooks")]
            (_, p) if p.starts_with("/test/") => test_hooks::durable_object(self, req).await,
            _ => Response::error("not found", 404),
        }
    }

    async fn alarm(&self) -> Result<Response> {
        let start = now_ms();
        let storage = self.state.storage();
        let config = match config(&self.env) {
            Ok(c) => c,
            Err(e) => {
                storage
                    .set_alarm(absolute(start + BAD_CONFIG_RETRY_MS))
                    .await?;
                tracing::error!(target: TARGET, error = %e, retry_at = start + BAD_CONFIG_RETRY_MS, "not sweeping: the settings are unusable");
                self.record(json!({ "startedAt": start, "error": e.to_string() }))
                    .await?;
                self.mark(&health::Mark::failed(
                    format!("the settings are unusable: {e}"),
                    start,
                ))
                .await?;
                return Response::ok("configuration error");
            }
        };
        // The safety net first: from here on, a panic (which aborts the wasm instance), a hang
        // or the runtime's kill still leaves an alarm. If this write fails the alarm returns an
        // error and the runtime retries it.
        storage
            .set_alarm(absolute(plan::safety_net_at(&config, start)))
            .await?;
        self.count(KEY_ATTEMPTS).await?;
        #[cfg(feature = "test-hooks")]
        test_hooks::sabotage(self).await?;

        let outcome = self.run_sweep(&config, start).await;
        let end = now_ms();
        let next = plan::next_alarm_at(&config, end);
        // Re-arm before anything else can fail: the report is best effort.
        storage.set_alarm(absolute(next)).await?;
        match outcome {
            Ok((report, plan, store, used)) => {
                logging::sweep_summary(&report, &plan, &used, next);
                self.mark(&health::Mark::of(&report, end)).await?;
                self.count(KEY_SWEEPS).await?;
                self.record(json!({ "report": report, "plan": plan, "subrequests": used, "nextAlarm": next }))
                    .await?;
                self.retention(&config, &store, plan.deadline).await?;
            }
            Err(e) => {
                tracing::error!(target: TARGET, error = %e, next_alarm = next, "the sweep could not start");
                self.mark(&health::Mark::failed(
                    format!("the sweep could not start: {e}"),
                    end,
                ))
                .await?;
                self.record(
                    json!({ "startedAt": start, "error": e.to_string(), "nextAlarm": next }),
                )
                .await?;
            }
        }
        Response::ok("swept")
    }
}

/// Whether the request carries `Authorization: Bearer <REAPER_ADMIN_TOKEN>`. Refuses everything
/// while the secret is unset: an admin route is never open.
fn authorized(req: &Request, env: &Env) -> std::result::Result<(), Response> {
    authorized_by(req, env, &[ADMIN_TOKEN], "admin routes")
}

/// Whether the request's bearer token is one of the `secrets` that are set. Refuses everything
/// while none is set: the route is never open.
fn authorized_by(
    req: &Request,
    env: &Env,
    secrets: &[&str],
    what: &str,
) -> std::result::Result<(), Response> {
    let refuse = |status, message: &str| {
        let mut r = Response::error(message, status).expect("a static response");
        let _ = r.headers_mut().set("www-authenticate", "Bearer");
        r
    };
    let mut expected: Vec<reaper_core::secret::Secret> = Vec::new();
    for name in secrets {
        let value = env.secret(name).ok().map(|s| s.to_string());
        match reaper_core::settings::read_token(name, value) {
            Ok(Some(token)) => expected.push(reaper_core::secret::Secret::new(token)),
            Ok(None) => {}
            // A token the rule refuses admits nobody; the sentence says how to fix it.
            Err(e) => return Err(refuse(503, &e.to_string())),
        }
    }
    if expected.is_empty() {
        return Err(refuse(
            503,
            &format!(
                "{what} are disabled: set the {} secret",
                secrets.join(" or ")
            ),
        ));
    }
    let given = req
        .headers()
        .get("authorization")
        .ok()
        .flatten()
        .and_then(|h| h.strip_prefix("Bearer ").map(str::to_string))
        .unwrap_or_default();
    // Constant time (digests compared with `subtle`), and every token is compared.
    if expected
        .iter()
        .fold(false, |any, e| any | e.matches(given.as_bytes()))
    {
        Ok(())
    } else {
        Err(refuse(401, "missing or wrong bearer token"))
    }
}

/// `GET`/`HEAD /status`: the health verdict for a monitor holding the read-only status token
/// (or the admin token). 200 healthy, 503 not; HEAD gets the status alone.
async fn status_route(req: &Request, env: &Env) -> Result<Response> {
    let head = req.method() == Method::Head;
    if !head && req.method() != Method::Get {
        let mut r = Response::error("method not allowed", 405)?;
        r.headers_mut().set("allow", "GET, HEAD")?;
        return Ok(r);
    }
    let (status, body, verdict) =
        match authorized_by(req, env, &[STATUS_TOKEN, ADMIN_TOKEN], "the status route") {
            Err(mut refused) => (refused.status_code(), refused.text().await?, false),
            Ok(()) => {
                let mut verdict = reaper_stub(env)?
                    .fetch_with_request(Request::new("https://reaper/health", Method::Get)?)
                    .await?;
                (verdict.status_code(), verdict.text().await?, true)
            }
        };
    // A fresh response: one from a Durable Object's fetch has immutable headers.
    let mut out = if head {
        Response::empty()?
    } else {
        Response::ok(body)?
    }
    .with_status(status);
    let headers = out.headers_mut();
    headers.set("cache-control", "no-store")?;
    if !verdict {
        headers.set("www-authenticate", "Bearer")?;
    } else if !head {
        headers.set("content-type", "application/json")?;
    }
    Ok(out)
}

fn reaper_stub(env: &Env) -> Result<Stub> {
    env.durable_object(DO_BINDING)?
        .id_from_name(DO_NAME)?
        .get_stub()
}

#[event(fetch)]
async fn fetch(req: Request, env: Env, _ctx: Context) -> Result<Response> {
    console::install();
    let path = req.path();
    if path == "/status" {
        return status_route(&req, &env).await;
    }
    let admin = path.starts_with("/admin/") || path.starts_with("/test/");
    if !admin {
        return Response::error("not found", 404);
    }
    if let Err(refused) = authorized(&req, &env) {
        return Ok(refused);
    }
    match (req.method(), path.as_str()) {
        (Method::Post, "/admin/bootstrap") => {
            // The store is opened (and migrated) here too, so a bad D1 binding fails the deploy
            // check rather than the first alarm.
            open_store(&env).await?;
            reaper_stub(&env)?
                .fetch_with_request(Request::new(
                    "https://reaper/ensure?reason=bootstrap",
                    Method::Post,
                )?)
                .await
        }
        (Method::Post, "/admin/migrate") => {
            // For applications that write runs into D1 before the first sweep has run.
            open_store(&env).await?;
            Response::from_json(&json!({ "schemaVersion": reaper_d1::SCHEMA_VERSION }))
        }
        (Method::Get, "/admin/status") => {
            reaper_stub(&env)?
                .fetch_with_request(Request::new("https://reaper/status", Method::Get)?)
                .await
        }
        #[cfg(feature = "test-hooks")]
        (_, p) if p.starts_with("/test/") => test_hooks::worker(req, env).await,
        _ => Response::error("not found", 404),
    }
}

/// The Cron Trigger: the watchdog that re-arms a missing or stale alarm. It also arms the very
/// first alarm after a deploy, so no bootstrap request is needed.
#[event(scheduled)]
async fn scheduled(event: ScheduledEvent, env: Env, _ctx: ScheduleContext) {
    console::install();
    let result = async {
        reaper_stub(&env)?
            .fetch_with_request(Request::new(
                "https://reaper/ensure?reason=cron",
                Method::Post,
            )?)
            .await?
            .text()
            .await
    }
    .await;
    if let Err(e) = result {
        tracing::error!(target: TARGET, cron = %event.cron(), error = %e, "the cron could not check the alarm");
    }
}
