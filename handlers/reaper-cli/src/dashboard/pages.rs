//! The dashboard's HTML. `maud` escapes every interpolated value; links to runs carry the run
//! id percent-encoded as one path segment.

use maud::{html, Markup, DOCTYPE};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use reaper_core::health::{LastSweep, ServiceStatus, StatusLimits};
use reaper_core::reason::ReasonCode;
use reaper_core::sweeps::SweepRecord;
use reaper_core::{EpochMs, RunRecord, RunStatus, StoreError};

use super::read::{format_cursor, DetachedPage, LedgerPage, RunPage};
use super::{SweepLine, LEDGER_ROWS, PAGE_ROWS};
use crate::render::{human_ms, timestamp};

/// Everything but unreserved characters is encoded, so a run id is always one path segment.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

fn run_href(run_id: &str) -> String {
    format!("/runs/{}", utf8_percent_encode(run_id, SEGMENT))
}

const STYLE: &str = "
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:10px 24px;display:flex;gap:24px;align-items:baseline}
header a{color:#cfd6e4;text-decoration:none}header a:hover{color:#fff}
header strong{font-size:16px;margin-right:12px}
main{padding:16px 24px;max-width:1200px}
h1{font-size:20px;margin:8px 0 12px}h2{font-size:16px;margin:20px 0 8px}
table{border-collapse:collapse;background:#fff;width:100%;margin-bottom:8px}
th,td{text-align:left;padding:5px 10px;border-bottom:1px solid #e3e6eb;vertical-align:top}
th{background:#eceff3;font-weight:600}
code{font:12px ui-monospace,monospace}
.ok{color:#17803d;font-weight:600}.bad{color:#b42318;font-weight:600}.warn{color:#9a6700}
.verdict{font-size:22px}.muted{color:#667085}
.cards{display:flex;gap:12px;flex-wrap:wrap}
.card{background:#fff;border:1px solid #e3e6eb;padding:10px 14px;min-width:180px}
.card b{display:block;font-size:20px}
.slot{border:1px dashed #98a2b3;padding:10px 14px;background:#fff}
";

fn layout(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · reaper" }
                style { (maud::PreEscaped(STYLE)) }
            }
            body {
                header {
                    strong { "reaper" }
                    nav {
                        a href="/" { "Overview" } " · "
                        a href="/runs" { "Detached runs" } " · "
                        a href="/ledger" { "Reclaim ledger" } " · "
                        a href="/sweeps" { "Sweeps" } " · "
                        a href="/healthz" { "healthz" } " · "
                        a href="/metrics" { "metrics" }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// A page that could not be served as asked, with what to do.
pub fn problem(title: &str, message: &str) -> Markup {
    layout(
        title,
        html! {
            h1 { (title) }
            p { (message) }
            p { a href="/" { "Back to the overview" } }
        },
    )
}

fn age(now: EpochMs, at: EpochMs) -> String {
    human_ms(now.saturating_sub(at).max(0))
}

/// What the next sweep does to a detached run, as a stable code and a sentence. Without a
/// probe this is the TTL arithmetic only: inside the TTL a sweep probes the run's journal.
pub fn detached_reason(record: &RunRecord, ttl_ms: u64, now: EpochMs) -> (&'static str, String) {
    let Some(since) = record.detached_since else {
        return (
            "attached",
            "a viewer is attached: no sweep touches it".into(),
        );
    };
    let for_ms = now.saturating_sub(since).max(0);
    let ttl = ttl_ms.min(i64::MAX as u64) as i64;
    if for_ms >= ttl {
        (
            ReasonCode::ExpiredTtl.as_str(),
            format!(
                "detached for {}, past the TTL of {}: the next sweep expires it and reclaims \
                 its sandbox",
                human_ms(for_ms),
                human_ms(ttl)
            ),
        )
    } else {
        (
            "waiting/inside-ttl",
            format!(
                "detached for {}, inside the TTL of {} ({} left): each sweep probes whether its \
                 agent finished",
                human_ms(for_ms),
                human_ms(ttl),
                human_ms(ttl - for_ms)
            ),
        )
    }
}

pub fn overview(
    status: &ServiceStatus,
    sweeps: &Result<Vec<SweepRecord>, String>,
    now: EpochMs,
) -> Markup {
    layout(
        "Overview",
        html! {
            h1 { "Overview" }
            p.verdict {
                @if status.healthy { span.ok { "healthy" } }
                @else { span.bad { "UNHEALTHY" } " (" (status.problems.len()) " problem(s))" }
            }
            @if !status.problems.is_empty() {
                ul { @for p in &status.problems { li { (p) } } }
            }
            div.cards {
                div.card {
                    "Last sweep"
                    @match (&status.last_sweep, status.last_sweep_age_ms) {
                        (Some(last), Some(age_ms)) => {
                            b { (human_ms(age_ms)) " ago" }
                            span.muted { "stale after " (human_ms(status.stale_sweep_after_ms as i64)) }
                            br;
                            span.muted { (last.considered) " run(s) considered" }
                        }
                        _ => { b { "none yet" } }
                    }
                    br; a href="/sweeps" { "Sweeps" }
                }
                div.card {
                    "Detached runs"
                    @if let Some(d) = &status.detached {
                        b { (d.listed) @if d.more { "+" } }
                        span.muted { (d.past_ttl) " past the TTL" }
                        @if let Some(o) = d.oldest_detached_ms {
                            br; span.muted { "oldest " (human_ms(o)) }
                        }
                    } @else { b { "unreadable" } }
                    br; a href="/runs" { "Detached runs" }
                }
                div.card {
                    "Reclaim ledger"
                    @if let Some(l) = &status.ledger {
                        b { (l.pending) " pending" }
                        @if l.leaked > 0 { span.bad { (l.leaked) " leaked" } }
                        @else { span.ok { "0 leaked" } }
                    } @else { b { "unreadable" } }
                    br; a href="/ledger" { "Reclaim ledger" }
                }
            }
            h2 { "Recent sweeps" }
            (sweep_records(sweeps, now))
            p { a href="/sweeps" { "All recent sweeps" } }
            p.muted { "As of " (timestamp(now)) ". Read-only: nothing on these pages changes a run." }
        },
    )
}

pub fn detached(page: &DetachedPage, ttl_ms: u64, now: EpochMs) -> Markup {
    layout(
        "Detached runs",
        html! {
            h1 { "Detached runs" }
            p.muted {
                "Oldest first, " (PAGE_ROWS) " per page. TTL " (human_ms(ttl_ms.min(i64::MAX as u64) as i64)) "."
                @if page.after.is_some() { " " a href="/runs" { "First page" } }
            }
            @if page.rows.is_empty() {
                p { "No detached runs" @if page.after.is_some() { " after this position" } "." }
            } @else {
                table {
                    thead { tr { th { "Run" } th { "Thread" } th { "Detached for" } th { "Sandbox" } th { "Reason" } } }
                    tbody {
                        @for row in &page.rows {
                            @let r = &row.record;
                            @let (code, sentence) = detached_reason(r, ttl_ms, now);
                            tr {
                                td { a href=(run_href(&r.run_id)) { code { (r.run_id) } } }
                                td { code { (r.thread_id) } }
                                td { (r.detached_since.map(|s| age(now, s)).unwrap_or_default()) }
                                td {
                                    @match &row.sandbox {
                                        Some(s) => { (s.provider) " " code { (s.provider_sandbox_id) } }
                                        None => { span.muted { (r.sandbox_key.as_deref().unwrap_or("none")) } }
                                    }
                                }
                                td {
                                    code { (code) } " " (sentence)
                                    @if r.cancel_requested == Some(true) { br; span.warn { "cancel requested" } }
                                    @if let Some(e) = &r.error { br; span.warn { (e.message) } }
                                }
                            }
                        }
                    }
                }
            }
            @if !page.corrupt.is_empty() {
                h2 { "Rows that could not be read" }
                ul { @for c in &page.corrupt { li { (c) } } }
            }
            @if let Some(next) = &page.next {
                p { a rel="next" href={ "/runs?after=" (utf8_percent_encode(&format_cursor(next), SEGMENT)) } { "Next page" } }
            }
        },
    )
}

pub fn ledger(page: &LedgerPage, now: EpochMs) -> Markup {
    let c = &page.counts;
    layout(
        "Reclaim ledger",
        html! {
            h1 { "Reclaim ledger" }
            p {
                (c.pending) " pending, "
                @if c.leaked > 0 { span.bad { (c.leaked) " leaked" } } @else { span.ok { "0 leaked" } }
                @if let Some(o) = c.oldest_first_seen { ", the oldest recorded " (age(now, o)) " ago" }
                "."
            }
            p.muted {
                "A pending entry is a finished run whose log close or sandbox destroy is not yet confirmed; \
                 a leaked one had a destroy fail, so its sandbox may still be running. Every sweep retries the due ones. "
                "Earliest due first, at most " (LEDGER_ROWS) " shown."
            }
            @if page.entries.is_empty() {
                p { "The ledger is empty: every finished run's aftermath is confirmed." }
            } @else {
                table {
                    thead { tr { th { "Run" } th { "State" } th { "Sandbox" } th { "Attempts" } th { "Next attempt" } th { "Last error" } } }
                    tbody {
                        @for e in &page.entries {
                            tr {
                                td { a href=(run_href(&e.run_id)) { code { (e.run_id) } } }
                                td { @if e.is_leak() { span.bad { "leaked" } } @else { "pending" } }
                                td {
                                    @if let (Some(p), Some(id)) = (&e.provider, &e.provider_sandbox_id) { (p) " " code { (id) } }
                                    @else { span.muted { (e.sandbox_key.as_deref().unwrap_or("none")) } }
                                }
                                td { (e.attempts) }
                                td { (due(e.next_attempt_at, now)) }
                                td { (e.last_error.as_deref().unwrap_or("")) }
                            }
                        }
                    }
                }
                @if page.more { p.muted { "More entries than shown: the counts above cover them all." } }
            }
        },
    )
}

fn due(at: EpochMs, now: EpochMs) -> String {
    if at <= now {
        format!("due now ({} ago)", age(now, at))
    } else {
        format!("in {}", human_ms(at - now))
    }
}

fn outcomes_of(last: &LastSweep) -> Vec<(String, u64)> {
    last.outcomes
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_u64().filter(|n| *n > 0).map(|n| (k.clone(), n)))
                .collect()
        })
        .unwrap_or_default()
}

pub fn sweeps(
    last: Result<Option<LastSweep>, StoreError>,
    stored: &Result<Vec<SweepRecord>, String>,
    recent: &[SweepLine],
    limits: StatusLimits,
    now: EpochMs,
) -> Markup {
    layout(
        "Sweeps",
        html! {
            h1 { "Sweeps" }
            h2 { "Recent sweeps of every host (kept in the store, newest first)" }
            (sweep_records(stored, now))
            h2 { "Last sweep (recorded in the store by whichever process swept)" }
            @match &last {
                Ok(Some(l)) => {
                    table {
                        tr { th { "Finished" } td { (timestamp(l.finished_at)) " (" (age(now, l.finished_at)) " ago; stale after " (human_ms(limits.stale_sweep_ms() as i64)) ")" } }
                        tr { th { "Took" } td { (human_ms(l.finished_at.saturating_sub(l.started_at))) } }
                        tr { th { "By" } td { code { (l.owner) } } }
                        tr { th { "Runs" } td { (l.considered) " considered, " (l.probed) " probed, " (l.deferred) " deferred" } }
                        tr { th { "Outcomes" } td { (outcome_list(&outcomes_of(l))) } }
                        @if let Some(ledger) = &l.ledger { tr { th { "Ledger after" } td { (ledger.pending) " pending, " (ledger.leaked) " leaked" } } }
                        @if let Some(e) = &l.listing_error { tr { th { "Listing failed" } td.bad { (e) } } }
                        @if let Some(e) = &l.damaged { tr { th { "Damaged" } td.bad { (e) } } }
                    }
                }
                Ok(None) => { p { "No sweep has recorded its mark yet." } }
                Err(e) => { p.bad { "The last-sweep mark could not be read: " (e) } }
            }
            h2 { "Recent sweeps of this watch process (newest first, kept in memory)" }
            @if recent.is_empty() {
                p { "This process has not swept yet." }
            } @else {
                table {
                    thead { tr { th { "#" } th { "Started" } th { "Took" } th { "Result" } th { "Considered" } th { "Outcomes" } th { "Ledger after" } } }
                    tbody {
                        @for s in recent {
                            tr {
                                td { (s.n) }
                                td { (timestamp(s.started_at)) }
                                td { (human_ms(s.duration_ms)) }
                                td {
                                    @if s.swept && s.trouble.is_none() { (s.headline) } @else { span.bad { (s.headline) } }
                                    @if let Some(t) = &s.trouble { br; span.bad { (t) } }
                                }
                                td { (s.considered) }
                                td { (outcome_list(&s.outcomes.iter().map(|(k, n)| (k.to_string(), *n as u64)).collect::<Vec<_>>())) }
                                td {
                                    @if let (Some(p), Some(l)) = (s.ledger_pending, s.ledger_leaked) {
                                        (p) " pending, " @if l > 0 { span.bad { (l) " leaked" } } @else { "0 leaked" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        },
    )
}

/// The store's sweep records as a table, newest first.
fn sweep_records(stored: &Result<Vec<SweepRecord>, String>, now: EpochMs) -> Markup {
    html! {
        @match stored {
            Err(why) => { p.muted { (why) "." } }
            Ok(records) if records.is_empty() => { p { "No sweep has recorded itself in the store yet." } }
            Ok(records) => {
                table.sweeps {
                    thead { tr { th { "Finished" } th { "By" } th { "Took" } th { "Result" } th { "Considered" } th { "Outcomes" } th { "In flight" } } }
                    tbody {
                        @for r in records {
                            tr {
                                td { (timestamp(r.finished_at)) br; span.muted { (age(now, r.finished_at)) " ago" } }
                                td { code { (r.host) } }
                                td { (human_ms(r.duration_ms)) }
                                td {
                                    @if r.failed { span.bad { "failed" } } @else { span.ok { "swept" } }
                                    @if let Some(e) = &r.error { br; span.bad { (e) } }
                                }
                                td { (r.considered) }
                                td { (outcome_list(&record_outcomes(r))) }
                                td { (r.concurrency) " of " (r.concurrency_cap) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The non-zero outcome counts of a record, in the report's order.
fn record_outcomes(r: &SweepRecord) -> Vec<(String, u64)> {
    reaper_core::reap::ReapOutcome::ALL
        .iter()
        .map(|o| (o.as_str().to_string(), r.outcomes.get(*o) as u64))
        .filter(|(_, n)| *n > 0)
        .collect()
}

fn outcome_list(outcomes: &[(String, u64)]) -> Markup {
    html! {
        @if outcomes.is_empty() { span.muted { "none" } }
        @for (i, (name, n)) in outcomes.iter().enumerate() {
            @if i > 0 { ", " }
            (name) " " b { (n) }
        }
    }
}

pub fn run(page: &RunPage, ttl_ms: u64, now: EpochMs) -> Markup {
    let r = &page.record;
    layout(
        &format!("Run {}", r.run_id),
        html! {
            h1 { "Run " code { (r.run_id) } }
            table {
                tr { th { "Status" } td { (r.status.as_str()) } }
                tr { th { "Thread" } td { code { (r.thread_id) } } }
                tr { th { "Started" } td { (timestamp(r.started_at)) " (" (age(now, r.started_at)) " ago)" } }
                @if let Some(f) = r.finished_at { tr { th { "Finished" } td { (timestamp(f)) " (" (age(now, f)) " ago)" } } }
                tr {
                    th { "Detached" }
                    td {
                        @match (r.detached_since, r.status) {
                            (Some(s), RunStatus::Running) => {
                                @let (code, sentence) = detached_reason(r, ttl_ms, now);
                                "since " (timestamp(s)) ": " code { (code) } " " (sentence)
                            }
                            (Some(s), _) => { "since " (timestamp(s)) " (finished since)" }
                            (None, _) => { span.muted { "no" } }
                        }
                    }
                }
                @if r.cancel_requested == Some(true) { tr { th { "Cancel" } td.warn { "requested" } } }
                @if let Some(e) = &r.error {
                    tr { th { "Error" } td { @if let Some(c) = &e.code { code { (c) } " " } (e.message) } }
                }
                @if let Some(epoch) = r.driver_epoch { tr { th { "Driver epoch" } td { (epoch) } } }
                tr {
                    th { "Sandbox" }
                    td {
                        @match (&page.sandbox, &r.sandbox_key) {
                            (Some(s), _) => {
                                (s.provider) " " code { (s.provider_sandbox_id) }
                                " (key " code { (s.key) } ", its latest run "
                                @match &s.latest_run_id { Some(id) => { a href=(run_href(id)) { code { (id) } } } None => { "none" } }
                                ")"
                            }
                            (None, Some(key)) => { code { (key) } span.muted { " (no instance record)" } }
                            (None, None) => { span.muted { "none" } }
                        }
                    }
                }
            }
            h2 { "Reclaim ledger" }
            @match &page.intent {
                Some(e) => {
                    table {
                        tr { th { "State" } td { @if e.is_leak() { span.bad { "leaked: its sandbox may still be running" } } @else { "pending" } } }
                        tr { th { "Recorded" } td { (timestamp(e.first_seen)) " (" (age(now, e.first_seen)) " ago)" } }
                        tr { th { "Attempts" } td { (e.attempts) } }
                        tr { th { "Next attempt" } td { (due(e.next_attempt_at, now)) } }
                        @if let Some(err) = &e.last_error { tr { th { "Last error" } td { (err) } } }
                    }
                }
                None => { p { "No entry: nothing of this run is waiting to be reclaimed." } }
            }
            h2 { "History" }
            @match &page.history {
                Ok(entries) if entries.is_empty() => { p { "No sweep has touched this run yet." } }
                Ok(entries) => {
                    table {
                        tr { th { "When" } th { "Outcome" } th { "Reason" } th { "Sandbox" } th { "Ledger" } th { "Host" } }
                        @for h in entries {
                            tr {
                                td { (timestamp(h.at)) " (" (age(now, h.at)) " ago)" }
                                td { (h.outcome) }
                                td { code { (h.reason_code) } " " (h.reason) }
                                td { @match &h.sandbox { Some(s) => { (s) } None => { span.muted { "-" } } } }
                                td { (h.ledger.join(", ")) }
                                td { (h.host) }
                            }
                        }
                    }
                }
                Err(why) => { div.slot { p { "Not available: " (why) ". The record and the ledger entry above are the run's state now." } } }
            }
        },
    )
}
