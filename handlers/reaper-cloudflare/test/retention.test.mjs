// The alarm ages out delivery-log events in real D1 inside workerd: a run finished longer ago
// than REAPER_EVENT_RETENTION loses its events (its log reads back closed and empty) while its
// run row and transcript stay; a recent run and a running one keep theirs.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { startWorker, statusWhen, token } from "./support.mjs";

const admin = token();
let worker;

before(async () => {
  worker = await startWorker({
    // No detached runs: the sweep never calls this sandboxd.
    vars: { REAPER_EVERY: "1m", REAPER_EVENT_RETENTION: "1d", REAPER_SANDBOXD_URL: "http://127.0.0.1:9" },
    secrets: { REAPER_ADMIN_TOKEN: admin, REAPER_SANDBOXD_TOKEN: "unused-sandboxd-token-0123456789" },
  });
});

after(async () => {
  await worker?.dispose();
});

test("the alarm deletes the events of runs finished longer ago than the retention and keeps the rest", async () => {
  const migrated = await worker.call("POST", "/admin/migrate", { auth: admin });
  assert.equal(migrated.status, 200, migrated.text);
  const db = await worker.db();
  const now = Date.now();
  const day = 86_400_000;
  const runs = {
    old: { status: "completed", finished: now - 2 * day, events: 700 },
    recent: { status: "completed", finished: now - 3_600_000, events: 3 },
    live: { status: "running", finished: null, events: 4 },
  };
  for (const [id, run] of Object.entries(runs)) {
    const statements = [
      db
        .prepare("INSERT INTO reaper_runs (run_id, thread_id, status, started_at, finished_at) VALUES (?1, 't', ?2, ?3, ?4)")
        .bind(id, run.status, now - 3 * day, run.finished),
      db.prepare("INSERT INTO reaper_logs (run_id, closed, last_append_at, next_seq) VALUES (?1, ?2, ?3, ?4)").bind(id, run.finished ? 1 : 0, now - 3 * day, run.events),
      db
        .prepare("INSERT INTO reaper_transcripts (run_id, thread_id, body, exit_code, saved_at) VALUES (?1, 't', ?2, 0, ?3)")
        .bind(id, JSON.stringify([{ role: "assistant", content: `all of ${id}` }]), now - 2 * day),
    ];
    for (let seq = 0; seq < run.events; seq++) {
      statements.push(
        db.prepare("INSERT INTO reaper_log_entries (run_id, seq, chunk) VALUES (?1, ?2, ?3)").bind(id, seq, JSON.stringify({ type: "TEXT_MESSAGE_CONTENT", delta: `${seq}` })),
      );
    }
    await db.batch(statements);
  }

  const boot = await worker.call("POST", "/admin/bootstrap", { auth: admin });
  assert.equal(boot.status, 200, boot.text);
  const status = await statusWhen(worker, admin, "the first event retention", (s) => s.lastRetention != null);
  // 700 events at 500 per batch: two batches after one listing, within one alarm's bound.
  assert.equal(status.lastRetention.more, false, JSON.stringify(status));

  const count = async (sql, id) => (await db.prepare(sql).bind(id).first()).n;
  assert.equal(await count("SELECT COUNT(*) AS n FROM reaper_log_entries WHERE run_id = ?1", "old"), 0);
  const log = await db.prepare("SELECT closed, events_pruned_at FROM reaper_logs WHERE run_id = 'old'").first();
  assert.equal(log.closed, 1);
  assert.ok(log.events_pruned_at >= now, JSON.stringify(log));
  assert.equal(await count("SELECT COUNT(*) AS n FROM reaper_runs WHERE run_id = ?1", "old"), 1);
  assert.equal(await count("SELECT COUNT(*) AS n FROM reaper_transcripts WHERE run_id = ?1", "old"), 1);
  assert.equal(await count("SELECT COUNT(*) AS n FROM reaper_log_entries WHERE run_id = ?1", "recent"), 3);
  assert.equal(await count("SELECT COUNT(*) AS n FROM reaper_log_entries WHERE run_id = ?1", "live"), 4);
  const line = worker.jsonLogs().find((l) => l.message === "event retention");
  assert.ok(line, JSON.stringify(worker.logs));
  assert.equal(line.events_deleted, 700, JSON.stringify(line));
  assert.equal(line.runs, 1, JSON.stringify(line));
});
