// GET/HEAD /status in real workerd: the health contract every platform serves (200 healthy, 503
// not, the problems in the body; HEAD the status alone), behind a read-only REAPER_STATUS_TOKEN
// that can read the verdict and nothing else.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { startWorker, statusWhen, token } from "./support.mjs";

const admin = token();
const status = token();
// A hang guard only: the sweep is awaited by polling its recorded state.
const GUARD_MS = 120_000;
let worker;
let broken;
let closed;

before(async () => {
  const secrets = { REAPER_ADMIN_TOKEN: admin, REAPER_STATUS_TOKEN: status, REAPER_SANDBOXD_TOKEN: "unused-sandboxd-token-0123456789" };
  // No run is detached, so a sweep never reaches the (absent) daemon.
  const vars = { REAPER_EVERY: "1m", REAPER_SANDBOXD_URL: "http://127.0.0.1:9" };
  worker = await startWorker({ secrets, vars });
  broken = await startWorker({ secrets, vars: { ...vars, REAPER_DETACHED_TTL: "soon" } });
  closed = await startWorker({ secrets: { REAPER_SANDBOXD_TOKEN: "unused-sandboxd-token-0123456789" }, vars });
});

after(async () => {
  await worker?.dispose();
  await broken?.dispose();
  await closed?.dispose();
});

test("the status route is healthy 200 after a clean sweep, for GET and HEAD", async () => {
  const boot = await worker.call("POST", "/admin/bootstrap", { auth: admin });
  assert.equal(boot.status, 200, boot.text);
  await statusWhen(worker, admin, "a finished sweep", (s) => s.sweeps > 0, GUARD_MS);
  const get = await worker.call("GET", "/status", { auth: status });
  assert.equal(get.status, 200, get.text);
  assert.equal(get.json.healthy, true, get.text);
  assert.deepEqual(get.json.problems, []);
  assert.equal(typeof get.json.lastSweep.finishedAt, "number");
  assert.equal(get.headers.get("cache-control"), "no-store");
  const head = await worker.call("HEAD", "/status", { auth: status });
  assert.equal(head.status, 200);
  assert.equal(head.text, "");
});

test("unusable settings are unhealthy 503 with the reason, for GET and HEAD", async () => {
  const get = await broken.call("GET", "/status", { auth: status });
  assert.equal(get.status, 503, get.text);
  assert.equal(get.json.healthy, false);
  assert.match(get.json.problems.join("\n"), /REAPER_DETACHED_TTL/);
  const head = await broken.call("HEAD", "/status", { auth: status });
  assert.equal(head.status, 503);
  assert.equal(head.text, "");
});

test("the status token reads the verdict and can neither bootstrap nor read the admin status", async () => {
  for (const [method, path] of [["POST", "/admin/bootstrap"], ["POST", "/admin/migrate"], ["GET", "/admin/status"]]) {
    const res = await worker.call(method, path, { auth: status });
    assert.equal(res.status, 401, `${method} ${path}: ${res.text}`);
  }
  const post = await worker.call("POST", "/status", { auth: status });
  assert.equal(post.status, 405);
  assert.equal(post.headers.get("allow"), "GET, HEAD");
});

test("the status route refuses a missing or wrong token, and is closed while no token is set", async () => {
  assert.equal((await worker.call("GET", "/status")).status, 401);
  assert.equal((await worker.call("HEAD", "/status", { auth: token() })).status, 401);
  const res = await closed.call("GET", "/status", { auth: "anything" });
  assert.equal(res.status, 503);
  assert.match(res.text, /REAPER_STATUS_TOKEN/);
});
