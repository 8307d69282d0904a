// wrangler.toml passes wrangler's own config schema and declares what the Worker's code reads;
// the check refuses a config that loses the SQLite class, the cron, or leaks a secret into vars.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

const here = new URL("..", import.meta.url).pathname;
const original = readFileSync(join(here, "wrangler.toml"), "utf8");

function check(text) {
  const dir = mkdtempSync(join(tmpdir(), "reaper-cf-config-"));
  const file = join(dir, "wrangler.toml");
  writeFileSync(file, text);
  return spawnSync(process.execPath, [join(here, "scripts/check-wrangler-config.mjs"), file], { encoding: "utf8" });
}

test("wrangler.toml is valid against wrangler's config schema", () => {
  const r = check(original);
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /valid against wrangler 4\.\d+\.\d+'s config schema/);
});

test("a config whose Durable Object is not a SQLite class is refused", () => {
  const r = check(original.replace('new_sqlite_classes = ["RunReaper"]', 'new_classes = ["RunReaper"]'));
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /new_sqlite_classes/);
});

test("a config without the cron watchdog is refused", () => {
  const r = check(original.replace(/crons = \[[^\]]*\]/, "crons = []"));
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /no cron trigger/);
});

test("a secret in [vars] is refused and a wrongly typed limit fails the schema", () => {
  const r = check(original.replace("[vars]", '[vars]\nREAPER_ADMIN_TOKEN = "oops"').replace("cpu_ms = 30000", 'cpu_ms = "30s"'));
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /REAPER_ADMIN_TOKEN is a secret/);
  assert.match(r.stderr, /\/limits\/cpu_ms must be number/);
});

test("a config without observability enabled is refused", () => {
  const r = check(original.replace(/\[observability\]\nenabled = true/, "[observability]\nenabled = false"));
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /\[observability\] enabled is not true/);
});

test("a D1 binding with the all-zero placeholder database_id is refused", () => {
  const r = check(original.replace('database_name = "reaper"', 'database_name = "reaper"\ndatabase_id = "00000000-0000-0000-0000-000000000000"'));
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /database_id is the all-zero placeholder/);
});
