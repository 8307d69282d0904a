// The store conformance suite against real D1 inside workerd: one node test per case, each one
// request to the Worker's test route, which runs that case against the bound database.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { startWorker, token } from "./support.mjs";

const admin = token();
const worker = await startWorker({
  secrets: { REAPER_ADMIN_TOKEN: admin, REAPER_SANDBOXD_TOKEN: "unused-sandboxd-token-0123456789" },
});
after(() => worker.dispose());

const list = await worker.call("GET", "/test/conformance", { auth: admin });
assert.equal(list.status, 200, list.text);

test("the suite lists every port's cases", () => {
  const suites = new Set(list.json.map((c) => c.suite));
  assert.deepEqual([...suites].sort(), [
    "delivery_log",
    "lease_store",
    "message_store",
    "reclaim_ledger",
    "run_store",
    "sandbox_instance_store",
  ]);
  assert.ok(list.json.length >= 60, `only ${list.json.length} cases`);
});

for (const { suite, case: name } of list.json) {
  test(`${suite}::${name}`, async () => {
    const res = await worker.call("POST", `/test/conformance?suite=${suite}&case=${name}`, { auth: admin });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.json.verdict, "passed", res.json.message);
  });
}
