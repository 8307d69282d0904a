// The hosted providers (Daytona, E2B, Vercel Sandbox) through the Worker's own `fetch`, in real
// workerd: each against its crate's fake (every request and answer checked against the
// provider's published OpenAPI document, real local sandboxes behind it), all three served by
// one alarm, each record routed to the provider it names, and a record of a provider the Worker
// does not serve left alone.
//
// Needs the fakes built: `cargo build -p reaper-daytona -p reaper-e2b -p reaper-vercel-sandbox
// --examples` (or REAPER_FAKE_{DAYTONA,E2B,VERCEL_SANDBOX}_BIN); the test fails, saying so,
// when they are absent.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import {
  eventually,
  journalHas,
  providerFakeBin,
  startProviderFake,
  startWorker,
  statusWhen,
  token,
} from "./support.mjs";

const FAKES = [
  ["fake_daytona", "REAPER_FAKE_DAYTONA_BIN"],
  ["fake_e2b", "REAPER_FAKE_E2B_BIN"],
  ["fake_vercel_sandbox", "REAPER_FAKE_VERCEL_SANDBOX_BIN"],
];

/** Requests per operation, as "operation: n" sorted by operation. */
function tally(requests) {
  const counts = new Map();
  for (const r of requests) counts.set(r.operation, (counts.get(r.operation) ?? 0) + 1);
  return [...counts].sort(([a], [b]) => a.localeCompare(b));
}

describe("one alarm over Daytona, E2B and Vercel Sandbox through fetch", () => {
  const admin = token();
  const n = token().slice(0, 8);
  let journalDir;
  let worker;
  /** provider name → its fake. */
  const fakes = new Map();

  before(async () => {
    const bins = FAKES.map(([name, env]) => providerFakeBin(name, env));
    journalDir = mkdtempSync(join(tmpdir(), "reaper-cf-providers-"));
    for (const fake of await Promise.all(bins.map((bin) => startProviderFake(bin)))) {
      fakes.set(fake.provider, fake);
    }
    const vars = Object.assign({}, ...[...fakes.values()].map((f) => f.vars));
    const secrets = Object.assign({}, ...[...fakes.values()].map((f) => f.secrets));
    worker = await startWorker({
      vars: {
        ...vars,
        REAPER_PROVIDERS: [...fakes.keys()].join(","),
        // One alarm only: the assertions are about what the first one did.
        REAPER_EVERY: "1h",
        REAPER_DETACHED_TTL: "30m",
        REAPER_JOURNAL_DIR: journalDir,
        REAPER_QUIET_WINDOW: "0s",
      },
      secrets: { ...secrets, REAPER_ADMIN_TOKEN: admin },
    });
  });

  after(async () => {
    await worker?.dispose();
    const stopped = await Promise.allSettled([...fakes.values()].map((f) => f.stop()));
    if (journalDir) rmSync(journalDir, { recursive: true, force: true });
    for (const s of stopped) if (s.status === "rejected") throw s.reason;
  });

  test("finalizes and destroys each provider's finished run through its own API, leaves the producing ones and the unserved provider's record, with no document violation", async () => {
    // Per provider: a finished agent and a producing one, each in its own sandbox (reclaiming a
    // terminal run destroys its sandbox). The unserved record names a sandbox that exists at
    // Daytona with a finished journal: were it routed anywhere but to "docker", it would be
    // finalized and destroyed.
    const runs = [];
    for (const [provider, fake] of fakes) {
      for (const kind of ["done", "live"]) {
        const runId = `run-${provider}-${kind}-${n}`;
        const marker = `${provider}-${kind}-${n}`;
        const command =
          kind === "done" ? `echo '{"delta":"${marker}"}'` : `echo '{"delta":"${marker}"}'; sleep 600`;
        const sandbox = await fake.createSandbox();
        await fake.startAgent(sandbox, { runId, command, journalDir });
        runs.push({ provider, recorded: provider, kind, runId, marker, sandbox });
      }
    }
    const daytona = fakes.get("daytona");
    const hidden = await daytona.createSandbox();
    const unserved = {
      provider: "daytona",
      recorded: "docker",
      kind: "unserved",
      runId: `run-docker-${n}`,
      marker: `docker-${n}`,
      sandbox: hidden,
    };
    await daytona.startAgent(hidden, {
      runId: unserved.runId,
      command: `echo '{"delta":"${unserved.marker}"}'`,
      journalDir,
    });
    runs.push(unserved);
    for (const run of runs) {
      const exited = run.kind !== "live";
      await eventually(`the ${run.kind} agent's journal (${run.runId})`, () =>
        journalHas(journalDir, run.runId, run.marker, { exited }),
      );
    }

    const migrated = await worker.call("POST", "/admin/migrate", { auth: admin });
    assert.equal(migrated.status, 200, migrated.text);
    const db = await worker.db();
    const now = Date.now();
    for (const [i, run] of runs.entries()) {
      await db
        .prepare("INSERT INTO reaper_sandbox_instances (key, provider, provider_sandbox_id, thread_id, latest_run_id, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)")
        .bind(`key-${run.runId}`, run.recorded, run.sandbox, `thread-${run.runId}`, run.runId, now)
        .run();
      await db
        .prepare("INSERT INTO reaper_runs (run_id, thread_id, status, started_at, sandbox_key, detached_since) VALUES (?1, ?2, 'running', ?3, ?4, ?5)")
        .bind(run.runId, `thread-${run.runId}`, now - 60_000, `key-${run.runId}`, now - 10_000 - i)
        .run();
    }

    const before = new Map();
    for (const [provider, fake] of fakes) before.set(provider, (await fake.requests()).length);
    const boot = await worker.call("POST", "/admin/bootstrap", { auth: admin });
    assert.equal(boot.status, 200, boot.text);
    const first = await statusWhen(worker, admin, "the first sweep", (s) => s.sweeps >= 1, 60_000);
    const report = first.lastSweep.report;
    const detail = JSON.stringify(first.lastSweep);
    assert.equal(report.sweep.state, "swept", detail);

    // The alarm's traffic, per provider, printed for the record.
    const traffic = new Map();
    for (const [provider, fake] of fakes) {
      const requests = (await fake.requests()).slice(before.get(provider));
      traffic.set(provider, requests);
      const counts = tally(requests).map(([op, count]) => `${count} ${op}`);
      console.log(`${provider}: ${requests.length} request(s) in the alarm: ${counts.join(", ")}`);
    }
    const { fetch: fetches, d1 } = first.lastSweep.subrequests;
    console.log(`the alarm's subrequests: ${fetches} fetch + ${d1} D1`);
    // The meter counts every provider request the fakes received, and nothing else went out.
    const received = [...traffic.values()].reduce((sum, requests) => sum + requests.length, 0);
    assert.equal(fetches, received, `fetches metered vs requests the fakes received: ${detail}`);

    const outcome = (runId) => report.runs.find((r) => r.runId === runId)?.outcome;
    const row = (runId) => db.prepare("SELECT status FROM reaper_runs WHERE run_id = ?1").bind(runId).first();
    const transcript = (runId) =>
      db.prepare("SELECT body FROM reaper_transcripts WHERE run_id = ?1").bind(runId).first();
    const instance = (runId) =>
      db.prepare("SELECT provider FROM reaper_sandbox_instances WHERE key = ?1").bind(`key-${runId}`).first();
    for (const run of runs) {
      const fake = fakes.get(run.provider);
      const what = `${run.kind} run on ${run.recorded} (${run.runId}): ${detail}`;
      if (run.kind === "done") {
        assert.equal(outcome(run.runId), "finalized", what);
        assert.equal((await row(run.runId)).status, "completed", what);
        const saved = await transcript(run.runId);
        assert.ok(saved, `the transcript of ${run.runId} was saved`);
        assert.ok(saved.body.includes(run.marker), `the transcript holds the agent's output: ${saved.body}`);
        assert.equal(await fake.alive(run.sandbox), false, `${run.provider} destroyed the finished run's sandbox`);
        assert.equal(await instance(run.runId), null, "the reclaimed sandbox's instance record is deleted");
      } else if (run.kind === "live") {
        assert.equal(outcome(run.runId), "producing", what);
        assert.equal((await row(run.runId)).status, "running", what);
        assert.equal(await fake.alive(run.sandbox), true, `the producing run's sandbox at ${run.provider} lives`);
      } else {
        assert.equal(outcome(run.runId), "unknown", what);
        assert.equal((await row(run.runId)).status, "running", what);
        assert.equal(await transcript(run.runId), null, what);
        assert.deepEqual(await instance(run.runId), { provider: "docker" }, "the unserved record is kept");
        assert.equal(await fake.alive(run.sandbox), true, "the unserved record's sandbox was not destroyed");
      }
    }
    assert.deepEqual(
      { finalized: report.outcomes.finalized, producing: report.outcomes.producing, unknown: report.outcomes.unknown },
      { finalized: fakes.size, producing: fakes.size, unknown: 1 },
      detail,
    );

    // Every sandbox id a fake heard of was one of its own records' (so no destroy, no probe,
    // went to the wrong provider), the unserved record's reached none, and each finished
    // sandbox's destroy reached its own provider.
    const destroyOps = { daytona: "deleteSandbox", e2b: "DELETE /sandboxes/{sandboxID}", vercel: "deleteSandbox" };
    for (const [provider, requests] of traffic) {
      for (const run of runs) {
        const mentioned = requests.filter((r) => r.path.includes(run.sandbox));
        if (run.recorded !== provider) {
          assert.deepEqual(mentioned, [], `${provider} received requests for ${run.recorded}'s sandbox ${run.sandbox}`);
        } else {
          const destroys = mentioned.filter((r) => r.operation === destroyOps[provider]);
          assert.equal(destroys.length, run.kind === "done" ? 1 : 0, `${provider} destroys of ${run.sandbox}: ${JSON.stringify(mentioned)}`);
        }
      }
    }

    for (const [provider, fake] of fakes) {
      const { recorded, unexpected } = await fake.violations();
      assert.deepEqual(unexpected, [], `${provider}: the Worker's traffic broke the provider's documents`);
      if (recorded.length) console.log(`${provider}: ${recorded.length} tolerated undeclared status(es): ${recorded.join("; ")}`);
    }
  });
});
