// The admin routes are never open: no token, a wrong token, or no configured secret is refused;
// the right token bootstraps the first alarm once and then leaves it alone.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { startWorker, token } from "./support.mjs";

const admin = token();
let worker;
let unconfigured;

before(async () => {
  const secrets = { REAPER_ADMIN_TOKEN: admin, REAPER_SANDBOXD_TOKEN: "unused-sandboxd-token-0123456789" };
  // A minute between sweeps: nothing fires again while these tests look at the alarm.
  worker = await startWorker({ secrets, vars: { REAPER_EVERY: "1m" } });
  unconfigured = await startWorker({ secrets: { REAPER_SANDBOXD_TOKEN: "unused-sandboxd-token-0123456789" } });
});

after(async () => {
  await worker?.dispose();
  await unconfigured?.dispose();
});

test("bootstrap without a bearer token is refused and arms nothing", async () => {
  const res = await worker.call("POST", "/admin/bootstrap");
  assert.equal(res.status, 401);
  assert.equal(res.headers.get("www-authenticate"), "Bearer");
  const status = await worker.call("GET", "/admin/status");
  assert.equal(status.status, 401);
});

test("bootstrap with a wrong token of the right length is refused", async () => {
  const wrong = admin.replace(/.$/, (c) => (c === "0" ? "1" : "0"));
  const res = await worker.call("POST", "/admin/bootstrap", { auth: wrong });
  assert.equal(res.status, 401);
  assert.match(res.text, /bearer token/);
});

test("with no admin secret configured every admin route is refused, even with a token", async () => {
  const res = await unconfigured.call("POST", "/admin/bootstrap", { auth: "anything" });
  assert.equal(res.status, 503);
  assert.match(res.text, /REAPER_ADMIN_TOKEN/);
});

test("an authenticated bootstrap arms the first alarm and a second one keeps it", async () => {
  const first = await worker.call("POST", "/admin/bootstrap", { auth: admin });
  assert.equal(first.status, 200, first.text);
  assert.equal(first.json.heal.action, "arm-missing");
  const armed = await worker.call("GET", "/admin/status", { auth: admin });
  assert.equal(armed.status, 200);
  assert.ok(armed.json.alarm !== null || armed.json.attempts > 0, armed.text);

  const second = await worker.call("POST", "/admin/bootstrap", { auth: admin });
  assert.equal(second.status, 200, second.text);
  assert.equal(second.json.heal.action, "keep");
});

test("routes outside /admin answer 404 without revealing anything", async () => {
  const res = await worker.call("GET", "/");
  assert.equal(res.status, 404);
});
