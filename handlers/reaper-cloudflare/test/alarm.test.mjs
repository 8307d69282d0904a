// The alarm in real workerd: it sweeps detached runs in D1 against sandboxes served by a real
// reaper-sandboxd on loopback, and re-arms on every path (a sweep that panics, fails or hangs),
// and the cron watchdog heals a deleted alarm.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { startSandboxd, startWorker, statusWhen, eventually, token } from "./support.mjs";

const FAST = { REAPER_EVERY: "1s", REAPER_WALL_LIMIT: "2s" };

describe("a sweep against sandboxd", () => {
  const admin = token();
  let sandboxd;
  let worker;
  const ids = {};

  before(async () => {
    sandboxd = await startSandboxd();
    worker = await startWorker({
      vars: {
        // The expired run's agent never ends: its drive lasts the run budget, kept short here.
        REAPER_RUN_BUDGET: "2s",
        REAPER_EVERY: "1s",
        REAPER_WALL_LIMIT: "1m",
        REAPER_DETACHED_TTL: "30m",
        REAPER_SANDBOXD_URL: sandboxd.url,
        REAPER_JOURNAL_DIR: sandboxd.journalDir,
        REAPER_QUIET_WINDOW: "0s",
      },
      secrets: { REAPER_ADMIN_TOKEN: admin, REAPER_SANDBOXD_TOKEN: sandboxd.token },
    });
  });

  after(async () => {
    await worker?.dispose();
    await sandboxd?.stop();
  });

  test("finalizes the finished run, expires the stale one, leaves the producing one, keeps the sweep's record and the history of what it did in D1, and re-arms", async () => {
    const n = token().slice(0, 8);
    const runs = {
      done: { runId: `run-done-${n}`, command: `echo '{"marker":"done-${n}"}'` },
      stale: { runId: `run-stale-${n}`, command: "sleep 60" },
      live: { runId: `run-live-${n}`, command: `echo '{"marker":"live-${n}"}'; sleep 60` },
    };
    // One sandbox per run: reclaiming a terminal run destroys its sandbox.
    for (const [name, run] of Object.entries(runs)) {
      const sbx = await sandboxd.api("POST", "/sandboxes", { journalDir: sandboxd.journalDir });
      await sandboxd.api("POST", `/sandboxes/${sbx.id}/agents`, run);
      ids[name] = sbx.id;
    }
    await eventually("the finished agent's exit sentinel", () => sandboxd.finished(sandboxd.journalDir, `done-${n}`));

    const migrated = await worker.call("POST", "/admin/migrate", { auth: admin });
    assert.equal(migrated.status, 200, migrated.text);
    // The application's side: plain SQL into the shared schema.
    const db = await worker.db();
    const now = Date.now();
    const detached = { done: now - 10_000, stale: now - 2 * 3_600_000, live: now - 10_000 };
    for (const [name, run] of Object.entries(runs)) {
      await db
        .prepare("INSERT INTO reaper_sandbox_instances (key, provider, provider_sandbox_id, thread_id, latest_run_id, updated_at) VALUES (?1, 'sandboxd', ?2, ?3, ?4, ?5)")
        .bind(`key-${name}-${n}`, ids[name], `thread-${name}`, run.runId, now)
        .run();
      await db
        .prepare("INSERT INTO reaper_runs (run_id, thread_id, status, started_at, sandbox_key, detached_since) VALUES (?1, ?2, 'running', ?3, ?4, ?5)")
        .bind(run.runId, `thread-${name}`, now - 3 * 3_600_000, `key-${name}-${n}`, detached[name])
        .run();
    }

    const boot = await worker.call("POST", "/admin/bootstrap", { auth: admin });
    assert.equal(boot.status, 200, boot.text);
    const first = await statusWhen(worker, admin, "the first sweep", (s) => s.sweeps >= 1);
    const report = first.lastSweep.report;
    assert.equal(report.sweep.state, "swept", JSON.stringify(first.lastSweep));
    assert.deepEqual(
      { finalized: report.outcomes.finalized, expired: report.outcomes.expired, producing: report.outcomes.producing },
      { finalized: 1, expired: 1, producing: 1 },
      JSON.stringify(report),
    );

    const status = async (id) =>
      (await db.prepare("SELECT status FROM reaper_runs WHERE run_id = ?1").bind(id).first()).status;
    assert.equal(await status(runs.done.runId), "completed");
    assert.notEqual(await status(runs.stale.runId), "running");
    assert.equal(await status(runs.live.runId), "running");
    const log = await db
      .prepare("SELECT COUNT(*) AS n FROM reaper_log_entries WHERE run_id = ?1")
      .bind(runs.done.runId)
      .first();
    assert.ok(log.n >= 1, "the finished run's journal was replayed into its delivery log");
    const transcript = await db
      .prepare("SELECT body FROM reaper_transcripts WHERE run_id = ?1")
      .bind(runs.done.runId)
      .first();
    assert.ok(transcript, "the finished run's transcript was saved");

    // Each run's history, as `reaper status RUN_ID` reads it from the same D1 table: the sweep
    // that finalized or expired it, how and why, and its sandbox's fate.
    const history = async (id) =>
      (await db.prepare("SELECT entry FROM reaper_run_history WHERE run_id = ?1 ORDER BY at").bind(id).all()).results.map((r) =>
        JSON.parse(r.entry),
      );
    const [done] = await history(runs.done.runId);
    const detail = JSON.stringify(done);
    assert.equal(done?.outcome, "finalized", detail);
    assert.equal(done.reasonCode, "finalized/exited", detail);
    assert.equal(done.sandbox, "destroyed", detail);
    assert.deepEqual(done.ledger, ["recorded", "resolved"], detail);
    assert.match(done.host, /^cloudflare:/, detail);
    const [stale] = await history(runs.stale.runId);
    assert.equal(stale?.outcome, "expired", JSON.stringify(stale));
    assert.equal(stale.sweepId, done.sweepId, "one sweep wrote both");
    // A run left producing gets no entry (a write per working run and sweep for no
    // information); the sweep's record, in the same batch, counts it.
    assert.deepEqual(await history(runs.live.runId), []);
    assert.equal(report.history?.recorded, 2, JSON.stringify(report.history));
    assert.equal(report.history?.sweepRecorded, true, JSON.stringify(report.history));
    const record = await db
      .prepare("SELECT record FROM reaper_sweeps WHERE sweep_id = ?1")
      .bind(done.sweepId)
      .first();
    assert.ok(record, "the sweep's record is in D1");
    const counts = JSON.parse(record.record).outcomes;
    assert.deepEqual([counts.finalized, counts.expired, counts.producing], [1, 1, 1], record.record);

    // Re-armed: the alarm is set one interval on, and it fires again.
    assert.ok(first.alarm > first.lastSweep.report.startedAt, JSON.stringify(first));
    const second = await statusWhen(worker, admin, "a second sweep", (s) => s.sweeps >= 2);
    assert.ok(second.alarm !== null);
    assert.equal(await status(runs.live.runId), "running");
  });
});

describe("a sweep that does not return still leaves an alarm", () => {
  // A panic aborts the wasm instance inside a promise job, so the alarm() promise never
  // settles: to workerd, a panic is a hang. Production ends a hung alarm at its wall limit
  // (Miniflare never does); the safety net, armed before the sweep at interval + wall limit,
  // then fires. The test plays the runtime's part by replacing the isolate: a second Miniflare on
  // the same persisted storage is the same deployment, and its overdue alarm must fire.
  for (const [mode, verb] of [["panic", "panics"], ["hang", "hangs"], ["fail", "fails"]]) {
    test(`a sweep that ${verb} leaves the safety-net alarm armed, and it fires and sweeps`, async () => {
      const admin = token();
      const persist = mkdtempSync(join(tmpdir(), "reaper-cf-persist-"));
      const options = {
        persist,
        database: "reaper",
        vars: { ...FAST, REAPER_SANDBOXD_URL: "http://127.0.0.1:9" },
        secrets: { REAPER_ADMIN_TOKEN: admin, REAPER_SANDBOXD_TOKEN: "unused-sandboxd-token-0123456789" },
      };
      let worker = await startWorker(options);
      try {
        const set = await worker.call("POST", "/test/sabotage", { auth: admin, body: { mode, times: 1 } });
        assert.equal(set.status, 200, set.text);
        const started = Date.now();
        assert.equal((await worker.call("POST", "/admin/bootstrap", { auth: admin })).status, 200);

        const hit = await statusWhen(worker, admin, `the sabotaged (${mode}) alarm`, (s) => s.attempts >= 1);
        assert.equal(hit.sweeps, 0, "the sabotaged alarm did not sweep");
        // Armed before the sweep, interval + wall limit (3 s) out.
        assert.ok(hit.alarm !== null, `no alarm armed after a ${mode}: ${JSON.stringify(hit)}`);
        assert.ok(hit.alarm >= started + 2_900, `alarm only ${hit.alarm - started} ms after start`);

        if (mode !== "fail") {
          await worker.dispose();
          worker = await startWorker(options);
        }
        const later = await statusWhen(worker, admin, `a sweep after the ${mode}`, (s) => s.sweeps >= 1);
        assert.ok(later.attempts >= 2);
        assert.equal(later.lastSweep.report.sweep.state, "swept");
        assert.ok(later.alarm !== null, "re-armed after the recovered sweep");
      } finally {
        await worker.dispose();
        rmSync(persist, { recursive: true, force: true });
      }
    });
  }
});

describe("the cron watchdog", () => {
  test("re-arms a deleted alarm, which then fires and sweeps", async () => {
    const admin = token();
    const worker = await startWorker({
      vars: { REAPER_EVERY: "1m", REAPER_SANDBOXD_URL: "http://127.0.0.1:9" },
      secrets: { REAPER_ADMIN_TOKEN: admin, REAPER_SANDBOXD_TOKEN: "unused-sandboxd-token-0123456789" },
    });
    try {
      assert.equal((await worker.call("POST", "/admin/bootstrap", { auth: admin })).status, 200);
      await statusWhen(worker, admin, "the first sweep", (s) => s.sweeps >= 1);

      const deleted = await worker.call("DELETE", "/test/alarm", { auth: admin });
      assert.equal(deleted.status, 200, deleted.text);
      assert.equal(deleted.json.alarm, null);

      await worker.scheduled();
      const healed = await statusWhen(worker, admin, "a sweep after the cron re-armed", (s) => s.sweeps >= 2);
      assert.ok(healed.alarm !== null, "re-armed after the healed sweep");
      assert.ok(healed.alarm > Date.now() + 30_000, "the healed schedule is back to one interval");
    } finally {
      await worker.dispose();
    }
  });

  test("leaves a healthy alarm alone", async () => {
    const admin = token();
    const worker = await startWorker({
      vars: { REAPER_EVERY: "1m", REAPER_SANDBOXD_URL: "http://127.0.0.1:9" },
      secrets: { REAPER_ADMIN_TOKEN: admin, REAPER_SANDBOXD_TOKEN: "unused-sandboxd-token-0123456789" },
    });
    try {
      await worker.call("POST", "/admin/bootstrap", { auth: admin });
      const before = await statusWhen(worker, admin, "the first sweep", (s) => s.sweeps >= 1);
      await worker.scheduled();
      const afterCron = await worker.call("GET", "/admin/status", { auth: admin });
      assert.equal(afterCron.json.alarm, before.alarm);
      assert.equal(afterCron.json.sweeps, before.sweeps);
    } finally {
      await worker.dispose();
    }
  });
});
