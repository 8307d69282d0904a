//! Human output: aligned tables and one-line summaries. Machine output is the reports' JSON.

use std::fmt::Write;
use std::time::Duration;

use reaper_core::reap::{
    OutcomeCounts, ReapOutcome, ReapRunEntry, ReclaimReport, SandboxFate, SweepReport, SweepStatus,
};
use reaper_core::EpochMs;

/// A plain text table: columns padded to their widest cell, two spaces apart.
#[derive(Debug)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&str]) -> Self {
        Table {
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                if let Some(w) = widths.get_mut(i) {
                    *w = (*w).max(cell.chars().count());
                }
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&self.headers).chain(&self.rows) {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                if i + 1 == row.len() {
                    line.push_str(cell);
                } else {
                    let _ = write!(line, "{cell:<width$}  ", width = widths[i]);
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `1.2s`, `350ms`, `2h 5m`: a duration rounded to what a person reads.
pub fn human_ms(ms: i64) -> String {
    let ms = ms.max(0) as u64;
    if ms < 1000 {
        return format!("{ms}ms");
    }
    if ms < 60_000 {
        return format!("{:.1}s", ms as f64 / 1000.0);
    }
    let rounded = Duration::from_secs(ms / 1000);
    let rounded = if ms >= 3_600_000 {
        Duration::from_secs(rounded.as_secs() / 60 * 60)
    } else {
        rounded
    };
    humantime::format_duration(rounded).to_string()
}

/// RFC 3339 in UTC, to the second.
pub fn timestamp(at: EpochMs) -> String {
    let t = std::time::UNIX_EPOCH + Duration::from_millis(at.max(0) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

/// `finalized 2 · producing 1`, the nonzero outcome counts in their fixed order.
pub fn outcome_totals(o: &OutcomeCounts) -> String {
    let parts: Vec<String> = ReapOutcome::ALL
        .iter()
        .filter(|x| o.get(**x) > 0)
        .map(|x| format!("{x} {}", o.get(*x)))
        .collect();
    if parts.is_empty() {
        "nothing to do".into()
    } else {
        parts.join(" · ")
    }
}

/// The note for one entry: its reason's code and sentence (why it ended as it did), the same
/// pair the JSON report carries as `reason`.
pub fn entry_note(e: &ReapRunEntry) -> String {
    e.reason.to_string()
}

/// One line saying whether and how the sweep ran.
pub fn sweep_headline(r: &SweepReport) -> String {
    match &r.sweep {
        SweepStatus::Swept => format!(
            "swept {} detached run{} in {} (probed {}{})",
            r.report.considered,
            if r.report.considered == 1 { "" } else { "s" },
            human_ms(r.duration_ms),
            r.report.probed,
            if r.report.deferred > 0 {
                format!(", {} deferred to the next sweep", r.report.deferred)
            } else {
                String::new()
            }
        ),
        SweepStatus::AlreadyRunning { holder, expires_at } => format!(
            "skipped: another sweep holds the lease (holder {holder}, until {}); nothing to do \
             here",
            timestamp(*expires_at)
        ),
        SweepStatus::LeaseUnavailable { error } => {
            format!("could not sweep: taking the sweep lease failed: {error}")
        }
        SweepStatus::InvalidOptions { error } => format!("could not sweep: {error}"),
        SweepStatus::DryRun => format!(
            "dry run: {} detached run{} planned (probed {}, read-only); nothing was written and \
             no sandbox touched",
            r.report.considered,
            if r.report.considered == 1 { "" } else { "s" },
            r.report.probed,
        ),
        SweepStatus::Paused { by, since, reason } => format!(
            "paused: sweeping was paused by {by} at {}{}; nothing done (reaper resume ends the \
             pause)",
            timestamp(*since),
            reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        ),
    }
}

/// What became of a run's sandbox, in the table: a leak in capitals, so it is seen.
pub fn sandbox_fate(fate: Option<SandboxFate>) -> &'static str {
    match fate {
        None => "-",
        Some(SandboxFate::Destroyed) => "destroyed",
        Some(SandboxFate::NoSandbox) => "no sandbox",
        Some(SandboxFate::Kept) => "kept",
        Some(SandboxFate::Leaked) => "LEAKED",
        Some(SandboxFate::NotReclaimed) => "not reclaimed",
    }
}

/// The reclaim ledger after a sweep: what it retried, and what is still pending or leaked.
pub fn ledger_line(r: &ReclaimReport, now: EpochMs) -> String {
    let mut out = format!(
        "reclaim ledger: retried {} (settled {}, failed {}",
        r.retried, r.settled, r.failed
    );
    if r.busy > 0 {
        let _ = write!(out, ", busy {}", r.busy);
    }
    if r.deferred > 0 {
        let _ = write!(out, ", deferred {}", r.deferred);
    }
    out.push(')');
    match &r.ledger {
        Some(l) => {
            let _ = write!(out, "; pending {}, leaked {}", l.pending, l.leaked);
            if let Some(oldest) = l.oldest_first_seen {
                let _ = write!(out, " (oldest {} old)", human_ms(now - oldest));
            }
            if l.leaked > 0 {
                out.push_str(
                    "; LEAKED sandboxes may still be running: `reaper status` lists them, \
                     every sweep retries them",
                );
            }
        }
        None => out.push_str("; the ledger could not be read"),
    }
    if let Some(error) = &r.error {
        let _ = write!(out, ": {error}");
    }
    out
}

/// The full human report of one sweep.
pub fn sweep_report(r: &SweepReport) -> String {
    let mut out = sweep_headline(r);
    out.push('\n');
    if !matches!(r.sweep, SweepStatus::Swept | SweepStatus::DryRun) {
        return out;
    }
    if !r.report.runs.is_empty() {
        let mut table = Table::new(&["RUN", "OUTCOME", "STATUS", "EXIT", "SANDBOX", "NOTE"]);
        for e in &r.report.runs {
            table.row(vec![
                e.run_id.clone(),
                if e.planned {
                    format!("would: {}", e.outcome)
                } else {
                    e.outcome.to_string()
                },
                e.status
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| "-".into()),
                e.exit_code
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "-".into()),
                sandbox_fate(e.sandbox).into(),
                entry_note(e),
            ]);
        }
        out.push('\n');
        out.push_str(&table.render());
        out.push('\n');
    }
    if !r.report.corrupt.is_empty() {
        let _ = writeln!(
            out,
            "{} malformed run row{} not swept (fix or delete {}; every other run was swept):",
            r.report.corrupt.len(),
            if r.report.corrupt.len() == 1 { "" } else { "s" },
            if r.report.corrupt.len() == 1 {
                "it"
            } else {
                "them"
            },
        );
        let mut table = Table::new(&["ROW", "ERROR"]);
        for c in &r.report.corrupt {
            table.row(vec![
                c.key.clone().unwrap_or_else(|| "?".into()),
                c.error.clone(),
            ]);
        }
        out.push_str(&table.render());
        out.push('\n');
    }
    if !r.report.runs.is_empty() {
        let _ = writeln!(out, "totals: {}", outcome_totals(&r.report.outcomes));
    }
    for p in &r.report.reclaims.planned {
        let _ = writeln!(out, "ledger {}: would {} ({})", p.run_id, p.action, p.why);
    }
    let _ = writeln!(
        out,
        "{}",
        ledger_line(&r.report.reclaims, r.started_at + r.duration_ms)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_columns_are_padded_to_the_widest_cell() {
        let mut t = Table::new(&["A", "LONG HEADER", "C"]);
        t.row(vec!["wide cell".into(), "x".into(), "last".into()]);
        assert_eq!(
            t.render(),
            "A          LONG HEADER  C\nwide cell  x            last\n"
        );
    }

    #[test]
    fn durations_read_as_a_person_would_say_them() {
        assert_eq!(human_ms(250), "250ms");
        assert_eq!(human_ms(1_250), "1.2s");
        assert_eq!(human_ms(125_000), "2m 5s");
        assert_eq!(human_ms(2 * 3_600_000 + 61_000), "2h 1m");
    }
}
