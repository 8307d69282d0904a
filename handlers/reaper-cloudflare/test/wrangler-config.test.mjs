// wrangler.toml passes wrangler's own config schema and declares what the Worker's code reads;
// the check refuses a config that loses the SQLite class, the cron, or leaks a secret into vars.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { parse as parseToml } from "smol-toml";

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
  const r = check(original.replace("[vars]", '[vars]\nREAPER_ADMIN_TOKEN = "oops"').replace("[triggers]", '[limits]\ncpu_ms = "30s"\n\n[triggers]'));
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

function checkDeploy(text) {
  const dir = mkdtempSync(join(tmpdir(), "reaper-cf-config-"));
  const file = join(dir, "wrangler.toml");
  writeFileSync(file, text);
  return spawnSync(process.execPath, [join(here, "scripts/check-wrangler-config.mjs"), "--deploy", file], { encoding: "utf8" });
}

const realUrl = (text) => text.replaceAll("https://sandboxes.example.com", "https://sandboxd.reaper.internal.acme.dev");

test("a deploy with the placeholder sandboxd URL is refused, in every environment", () => {
  const r = checkDeploy(original);
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /top level: \[vars\] REAPER_SANDBOXD_URL = "https:\/\/sandboxes\.example\.com" is a placeholder host/);
  assert.match(r.stderr, /\[env\.staging\]: \[vars\] REAPER_SANDBOXD_URL .* placeholder host/);
  for (const host of ["https://x.invalid", "http://daemon.test:8080", "https://example.org"]) {
    const other = checkDeploy(original.replaceAll("https://sandboxes.example.com", host));
    assert.notEqual(other.status, 0, host);
  }
  const ok = checkDeploy(realUrl(original));
  assert.equal(ok.status, 0, ok.stderr);
  assert.match(ok.stdout, /ready to deploy/);
});

test("the committed config deploys on the Free plan: no cpu_ms, and cpu_ms with REAPER_PLAN free is refused", () => {
  const config = realUrl(original);
  assert.doesNotMatch(config, /^\[limits\]/m);
  assert.match(config, /^REAPER_PLAN = "free"$/m);
  const r = checkDeploy(config.replace("[triggers]", "[limits]\ncpu_ms = 30000\n\n[triggers]"));
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /error 100328/);
});

test("on Paid, cpu_ms is optional and REAPER_CPU_LIMIT must match it; subrequests stay within the plan", () => {
  // [limits] is inherited by [env.staging], so both Workers go Paid together.
  const paid = realUrl(original).replaceAll('REAPER_PLAN = "free"', 'REAPER_PLAN = "paid"');
  assert.equal(checkDeploy(paid).status, 0);
  const raised = paid.replace("[triggers]", "[limits]\ncpu_ms = 300000\n\n[triggers]");
  const unmatched = checkDeploy(raised);
  assert.notEqual(unmatched.status, 0);
  assert.match(unmatched.stderr, /set REAPER_CPU_LIMIT = "300000ms"/);
  const matched = raised.replaceAll('REAPER_PLAN = "paid"', 'REAPER_PLAN = "paid"\nREAPER_CPU_LIMIT = "5m"');
  assert.equal(checkDeploy(matched).status, 0, checkDeploy(matched).stderr);
  const tooMany = checkDeploy(realUrl(original).replace('REAPER_PLAN = "free"', 'REAPER_PLAN = "free"\nREAPER_SUBREQUESTS = "1000"'));
  assert.notEqual(tooMany.status, 0);
  assert.match(tooMany.stderr, /exceeds the free plan's 50/);
});

test("the staging environment has its own Worker name, D1 database and cron, and a shared one is refused", () => {
  const config = parseToml(original);
  const staging = config.env.staging;
  assert.notEqual(staging.name, config.name);
  assert.notEqual(staging.d1_databases[0].database_name, config.d1_databases[0].database_name);
  assert.ok(staging.triggers.crons.length > 0);
  const shared = checkDeploy(realUrl(original).replace('name = "reaper-staging"', 'name = "reaper"'));
  assert.notEqual(shared.status, 0);
  assert.match(shared.stderr, /the Worker name "reaper" is also top level's/);
  const oneDb = checkDeploy(realUrl(original).replace('database_name = "reaper-staging"', 'database_name = "reaper"'));
  assert.notEqual(oneDb.status, 0);
  assert.match(oneDb.stderr, /would sweep one database/);
  const noBinding = checkDeploy(realUrl(original).replace(/\[\[env\.staging\.d1_databases\]\][^[]*/, ""));
  assert.notEqual(noBinding.status, 0);
  assert.match(noBinding.stderr, /\[env\.staging\]: no D1 binding DB/);
});
