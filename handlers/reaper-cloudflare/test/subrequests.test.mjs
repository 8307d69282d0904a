// The alarm counts its subrequests (D1 round trips and fetches to sandboxd) as they happen and
// stops starting runs once the count leaves only room for the runs in flight and the sweep's
// tail: a limit far below what the batch would need defers the rest of the batch instead of
// running into the runtime's "Too many subrequests".
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { startSandboxd, startWorker, statusWhen, token } from "./support.mjs";

const LIMIT = 120;
const PER_RUN = 20;
let sandboxd;
let worker;
const admin = token();

before(async () => {
  sandboxd = await startSandboxd();
  worker = await startWorker({
    vars: {
      REAPER_EVERY: "1h",
      REAPER_DETACHED_TTL: "30m",
      REAPER_SANDBOXD_URL: sandboxd.url,
      REAPER_JOURNAL_DIR: sandboxd.journalDir,
      REAPER_QUIET_WINDOW: "0s",
      REAPER_SUBREQUESTS: String(LIMIT),
      REAPER_SUBREQUESTS_PER_RUN: String(PER_RUN),
    },
    secrets: { REAPER_ADMIN_TOKEN: admin, REAPER_SANDBOXD_TOKEN: sandboxd.token },
  });
});

after(async () => {
  await worker?.dispose();
  await sandboxd?.stop();
});

test("the subrequest meter stops starting runs before the plan's limit with the run history on, and reports the count", async () => {
  const n = token().slice(0, 8);
  const migrated = await worker.call("POST", "/admin/migrate", { auth: admin });
  assert.equal(migrated.status, 200, migrated.text);
  const db = await worker.db();
  const now = Date.now();
  // Twenty agents still producing inside the TTL: each costs a probe (D1 and sandboxd requests).
  const runs = 20;
  for (let i = 0; i < runs; i++) {
    const runId = `run-live-${n}-${i}`;
    const sbx = await sandboxd.api("POST", "/sandboxes", { journalDir: sandboxd.journalDir });
    await sandboxd.api("POST", `/sandboxes/${sbx.id}/agents`, { runId, command: "echo '{}'; sleep 60" });
    await db
      .prepare("INSERT INTO reaper_sandbox_instances (key, provider, provider_sandbox_id, thread_id, latest_run_id, updated_at) VALUES (?1, 'sandboxd', ?2, ?3, ?4, ?5)")
      .bind(`key-${n}-${i}`, sbx.id, `thread-${n}-${i}`, runId, now)
      .run();
    await db
      .prepare("INSERT INTO reaper_runs (run_id, thread_id, status, started_at, sandbox_key, detached_since) VALUES (?1, ?2, 'running', ?3, ?4, ?5)")
      .bind(runId, `thread-${n}-${i}`, now - 60_000, `key-${n}-${i}`, now - 10_000 - i)
      .run();
  }

  const boot = await worker.call("POST", "/admin/bootstrap", { auth: admin });
  assert.equal(boot.status, 200, boot.text);
  const status = await statusWhen(worker, admin, "the first sweep", (s) => s.sweeps >= 1);
  const { report, plan, subrequests } = status.lastSweep;
  const detail = JSON.stringify(status.lastSweep);

  assert.equal(report.sweep.state, "swept", detail);
  // The sweep's own D1 round trips, at most 21 (the run history's one batch among them), and
  // the event retention's 8.
  const stopAt = LIMIT - 29 - 4 * PER_RUN;
  assert.equal(plan.subrequestStopAt, stopAt, detail);
  assert.equal(plan.concurrency, 4, detail);
  assert.equal(subrequests.stopped, true, detail);
  assert.ok(report.deferred > 0, `the rest of the batch is deferred: ${detail}`);
  assert.ok(report.considered < runs, detail);
  assert.equal(report.outcomes.producing, report.considered, detail);
  // The run history is on: the sweep's record was written in its one batch, in the sweep's own
  // count; runs left producing get no entry of their own.
  assert.equal(report.history?.sweepRecorded, true, detail);
  assert.equal(report.history?.recorded, 0, detail);
  assert.equal(report.history?.error, undefined, detail);
  // Every run started before the stop had room for its worst case: the limit was never reached,
  // with the event retention's 8 round trips after the stored count.
  const used = subrequests.fetch + subrequests.d1;
  assert.ok(used >= stopAt && used + 8 <= LIMIT, `used ${used} of ${LIMIT}: ${detail}`);
  console.log(`subrequests: ${subrequests.fetch} fetch + ${subrequests.d1} D1 for ${report.considered} producing runs (stop at ${stopAt}, limit ${LIMIT})`);
});
