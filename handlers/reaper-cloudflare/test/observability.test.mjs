// Workers Logs in real workerd: the core's tracing events and the handler's sweep summary reach the
// console as one JSON line each (level, target, message, fields), errors through console.error;
// and a fresh deployment needs no bootstrap request: the cron arms the first alarm.
import assert from "node:assert/strict";
import { test } from "node:test";
import { eventually, startWorker, statusWhen, token } from "./support.mjs";

// Nothing listens on the discard port: every sandboxd call fails at once.
const NO_SANDBOXD = "http://127.0.0.1:9";
const COUNTS = [
  "considered", "probed", "deferred",
  "finalized", "expired", "producing", "unknown",
  "budget_exceeded", "not_claimed", "reclaim_failed", "failed",
  "corrupt",
];

function line(worker, what, predicate) {
  return eventually(what, () => worker.jsonLogs().find(predicate));
}

test("the cron arms the first alarm of a fresh deployment without the bootstrap request, and it sweeps", async () => {
  const admin = token();
  const worker = await startWorker({
    vars: { REAPER_EVERY: "1m", REAPER_SANDBOXD_URL: NO_SANDBOXD },
    secrets: { REAPER_ADMIN_TOKEN: admin, REAPER_SANDBOXD_TOKEN: "unused-sandboxd-token-0123456789" },
  });
  try {
    const fresh = await worker.call("GET", "/admin/status", { auth: admin });
    assert.equal(fresh.status, 200, fresh.text);
    assert.deepEqual({ alarm: fresh.json.alarm, attempts: fresh.json.attempts }, { alarm: null, attempts: 0 });

    await worker.scheduled();
    const swept = await statusWhen(worker, admin, "the first sweep after the cron", (s) => s.sweeps >= 1);
    assert.equal(swept.lastSweep.report.sweep.state, "swept", JSON.stringify(swept.lastSweep));
    assert.ok(swept.alarm > Date.now() + 30_000, "re-armed one interval on");
    // The alarm's sweep created the schema: no /admin/migrate either.
    const tables = await (await worker.db())
      .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'reaper_runs'")
      .all();
    assert.equal(tables.results.length, 1);

    const armed = await line(worker, "the cron's alarm check", (l) => l.message === "alarm checked");
    assert.equal(armed.reason, "cron");
    assert.equal(armed.action, "arm-missing");
    assert.equal(armed.target, "reaper::cloudflare");
  } finally {
    await worker.dispose();
  }
});

test("the sweep summary is one JSON line with the sweep state and every count", async () => {
  const admin = token();
  const worker = await startWorker({
    vars: { REAPER_EVERY: "1m", REAPER_SANDBOXD_URL: NO_SANDBOXD },
    secrets: { REAPER_ADMIN_TOKEN: admin, REAPER_SANDBOXD_TOKEN: "unused-sandboxd-token-0123456789" },
  });
  try {
    await worker.scheduled();
    const summary = await line(worker, "the sweep summary", (l) => l.message === "sweep summary");
    assert.equal(summary.console, "log", JSON.stringify(summary));
    assert.equal(summary.level, "INFO");
    assert.equal(summary.target, "reaper::cloudflare");
    assert.equal(summary.state, "swept");
    for (const key of COUNTS) assert.equal(summary[key], 0, `${key} in ${JSON.stringify(summary)}`);
    for (const key of ["duration_ms", "max_runs", "deadline", "next_alarm"]) {
      assert.equal(typeof summary[key], "number", `${key} in ${JSON.stringify(summary)}`);
    }
    assert.equal(
      worker.jsonLogs().filter((l) => l.message === "sweep summary").length,
      1,
      "one summary per sweep",
    );
    // The core's own event came through the same route.
    const core = await line(worker, "the core's sweep event", (l) => l.target === "reaper" && l.message === "sweep complete");
    assert.equal(core.level, "INFO");
  } finally {
    await worker.dispose();
  }
});

test("a failed reclaim is logged by the core as an error line, and the summary counts it", async () => {
  const admin = token();
  const worker = await startWorker({
    vars: {
      REAPER_EVERY: "1m",
      REAPER_SANDBOXD_URL: NO_SANDBOXD,
      REAPER_DETACHED_TTL: "30m",
      REAPER_QUIET_WINDOW: "0s",
      REAPER_RUN_BUDGET: "2s",
    },
    secrets: { REAPER_ADMIN_TOKEN: admin, REAPER_SANDBOXD_TOKEN: "sandboxd-secret-must-not-be-logged" },
  });
  try {
    assert.equal((await worker.call("POST", "/admin/migrate", { auth: admin })).status, 200);
    const db = await worker.db();
    const now = Date.now();
    const runId = `run-stale-${token().slice(0, 8)}`;
    // Past its TTL: the sweep records the cancel and then destroys its sandbox, which fails.
    await db
      .prepare("INSERT INTO reaper_sandbox_instances (key, provider, provider_sandbox_id, thread_id, latest_run_id, updated_at) VALUES (?1, 'sandboxd', 'sbx-gone', 'thread-1', ?2, ?3)")
      .bind(`key-${runId}`, runId, now)
      .run();
    await db
      .prepare("INSERT INTO reaper_runs (run_id, thread_id, status, started_at, sandbox_key, detached_since) VALUES (?1, 'thread-1', 'running', ?2, ?3, ?4)")
      .bind(runId, now - 3 * 3_600_000, `key-${runId}`, now - 2 * 3_600_000)
      .run();

    await worker.scheduled();
    const failed = await line(worker, "the core's reclaim error", (l) => l.message === "reclaiming the run's sandbox failed");
    assert.equal(failed.console, "error", JSON.stringify(failed));
    assert.equal(failed.level, "ERROR");
    assert.equal(failed.target, "reaper");
    assert.equal(failed.run_id, runId);
    assert.match(failed.error, new RegExp(`reclaim failed for run ${runId}`));

    const summary = await line(worker, "the sweep summary", (l) => l.message === "sweep summary");
    assert.equal(summary.console, "error", "a sweep with a failure is summarized as an error");
    assert.equal(summary.reclaim_failed, 1, JSON.stringify(summary));
    assert.equal(summary.considered, 1);

    const all = worker.logs.map((l) => l.message).join("\n");
    assert.ok(!all.includes("sandboxd-secret-must-not-be-logged"), "a secret reached the logs");
  } finally {
    await worker.dispose();
  }
});
