// The Cloudflare Sandbox bridge (sandbox-bridge/) in real workerd: its own rules, then the Rust
// provider conformance suite through it (sandboxd's client under the name `cloudflare`). The
// `@cloudflare/sandbox` import is the stand-in (sandbox-bridge/test-app/sandbox-standin.ts), whose
// containers are a real reaper-sandboxd on loopback.
import { spawn } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { build } from "esbuild";
import { Miniflare } from "miniflare";
import { startSandboxd, token, wrangler } from "./support.mjs";

const here = new URL("..", import.meta.url).pathname;
const bridgeDir = join(here, "sandbox-bridge");
const repo = join(here, "../..");
let out, script, sandboxd, secret, mf, url;

async function bundle() {
  out = mkdtempSync(join(tmpdir(), "reaper-bridge-"));
  script = join(out, "bridge-test.js");
  await build({
    entryPoints: [join(bridgeDir, "test-app/entry.ts")],
    bundle: true,
    format: "esm",
    target: "es2022",
    platform: "neutral",
    outfile: script,
    external: ["cloudflare:workers"],
    alias: { "@cloudflare/sandbox": join(bridgeDir, "test-app/sandbox-standin.ts") },
    logLevel: "warning",
  });
}

function start(bindings) {
  return new Miniflare({
    modules: true,
    scriptPath: script,
    modulesRoot: out,
    compatibilityDate: wrangler.compatibility_date,
    durableObjects: { Sandbox: { className: "Sandbox", useSQLite: true } },
    port: 0,
    bindings: {
      STANDIN_SANDBOXD_URL: sandboxd.url,
      STANDIN_SANDBOXD_TOKEN: sandboxd.token,
      MAX_OUTPUT_BYTES: "4096",
      ...bindings,
    },
  });
}

const containers = () => {
  try {
    return readdirSync(join(sandboxd.root, "sandboxes")).length;
  } catch {
    return 0;
  }
};

async function call(method, path, { auth = secret, body, base = url } = {}) {
  const headers = {};
  if (auth !== null) headers.authorization = `Bearer ${auth}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  const res = await fetch(new URL(path, base), { method, headers, body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body) });
  const text = await res.text();
  let json;
  try {
    json = JSON.parse(text);
  } catch {}
  return { status: res.status, json, headers: res.headers };
}

before(async () => {
  await bundle();
  sandboxd = await startSandboxd();
  secret = `bridge-${token()}`;
  mf = start({ BRIDGE_TOKEN: secret });
  url = await mf.ready;
});

after(async () => {
  await mf?.dispose();
  await sandboxd?.stop();
  if (out) rmSync(out, { recursive: true, force: true });
});

test("healthz answers without a token and everything else needs the bridge token", async () => {
  assert.equal((await call("GET", "/v1/healthz", { auth: null })).json.status, "ok");
  for (const auth of [null, "", "wrong", `${secret}x`, secret.slice(0, -1)]) {
    const res = await call("GET", "/v1/sandboxes/abc", { auth });
    assert.equal(res.status, 401, String(auth));
    assert.equal(res.json.error.code, "unauthorized");
    assert.match(res.json.error.message, /CLOUDFLARE_SANDBOX_BRIDGE_TOKEN/);
    assert.equal(res.headers.get("www-authenticate"), "Bearer");
  }
});

test("a bridge deployed without BRIDGE_TOKEN serves nothing and says how to set it", async () => {
  const open = start({});
  try {
    const base = await open.ready;
    const res = await call("DELETE", "/v1/sandboxes/abc", { auth: "", base });
    assert.equal(res.status, 503);
    assert.match(res.json.error.message, /wrangler secret put BRIDGE_TOKEN/);
  } finally {
    await open.dispose();
  }
});

// The values every reaper binary's token tests refuse, and the sentence each gives
// (reaper_core::settings::check_token), here for the bridge's own setting.
const ADVICE =
  "a token is 16 or more printable ASCII characters without spaces and nothing around it (no trailing newline); make one with `openssl rand -hex 32`";
const BAD_TOKENS = [
  ["short-token", "BRIDGE_TOKEN is too short (length 11)"],
  ["0123456789abcdef-token\n", "BRIDGE_TOKEN has whitespace before or after it (a newline stored with it?)"],
  ["0123456789abcdef token", "BRIDGE_TOKEN contains a space"],
];

test("a bridge whose BRIDGE_TOKEN breaks the token rule serves nothing and says why in the shared sentence", async () => {
  for (const [bad, said] of BAD_TOKENS) {
    const weak = start({ BRIDGE_TOKEN: bad });
    try {
      const base = await weak.ready;
      assert.equal((await call("GET", "/v1/healthz", { auth: null, base })).status, 200);
      // Even a request carrying exactly that value is refused: the bridge never runs on it.
      const res = await call("GET", "/v1/sandboxes/abc", { auth: bad.trim(), base });
      assert.equal(res.status, 503, JSON.stringify(bad));
      assert.ok(res.json.error.message.startsWith(`${said}: ${ADVICE}`), res.json.error.message);
      assert.match(res.json.error.message, /wrangler secret put BRIDGE_TOKEN/);
      assert.ok(!res.json.error.message.includes(bad.trim()), "never the value");
    } finally {
      await weak.dispose();
    }
  }
});

test("status and exec of a sandbox that is not running are not-found and start no container", async () => {
  const before = containers();
  const status = await call("GET", "/v1/sandboxes/never-started-1");
  assert.equal(status.status, 404);
  assert.equal(status.json.error.code, "sandbox-not-found");
  const exec = await call("POST", "/v1/sandboxes/never-started-1/exec", { body: { command: "echo hi" } });
  assert.equal(exec.status, 404);
  assert.equal(exec.json.error.code, "sandbox-not-found");
  assert.equal(containers(), before, "no container was booted by a probe");
});

test("bad ids, bodies and routes are refused with what to send", async () => {
  assert.equal((await call("GET", "/v1/sandboxes/a_b")).json.error.code, "invalid-sandbox-id");
  const cases = [
    ["not json", /must be JSON/],
    [{ command: 1 }, /"command": string/],
    [{ command: "x", timeout: 5 }, /unknown field timeout/],
    [{ command: "x", timeoutMs: 0 }, /timeoutMs must be an integer/],
  ];
  for (const [body, message] of cases) {
    const res = await call("POST", "/v1/sandboxes/abc/exec", { body });
    assert.equal(res.status, 400, JSON.stringify(body));
    assert.equal(res.json.error.code, "invalid-request");
    assert.match(res.json.error.message, message);
  }
  const route = await call("GET", "/v2/sandboxes/abc");
  assert.equal(route.status, 404);
  assert.equal(route.json.error.code, "route-not-found");
  assert.equal((await call("PUT", "/v1/sandboxes/abc")).status, 405);
});

test("the provider conformance suite passes through the bridge (sandboxd's client as cloudflare)", { timeout: 600_000 }, async () => {
  const child = spawn(
    "cargo",
    // --workspace: the features CI's test build already compiled, so nothing is rebuilt.
    ["test", "--workspace", "--locked", "--test", "cloudflare_bridge", "--", "--test-threads=4"],
    {
      cwd: repo,
      env: { ...process.env, REAPER_CLOUDFLARE_BRIDGE_TEST_URL: String(url), REAPER_CLOUDFLARE_BRIDGE_TEST_TOKEN: secret },
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  let output = "";
  child.stdout.on("data", (d) => (output += d));
  child.stderr.on("data", (d) => (output += d));
  const code = await new Promise((resolve) => child.once("exit", resolve));
  assert.equal(code, 0, output);
  assert.doesNotMatch(output, /skipped:/, "every case ran against the bridge");
  assert.match(output, /test result: ok\. 16 passed; 0 failed/, output);
});
