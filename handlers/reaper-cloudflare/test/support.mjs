// Shared by the tests: the Worker in real workerd (Miniflare) configured from wrangler.toml, a
// real reaper-sandboxd on loopback, and polling helpers (bounded loops, never fixed sleeps).
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { setTimeout as sleep } from "node:timers/promises";
import { Miniflare } from "miniflare";
import { parse } from "smol-toml";

const here = new URL("..", import.meta.url).pathname;
export const wrangler = parse(readFileSync(join(here, "wrangler.toml"), "utf8"));
export const BASE = "http://reaper.test";

export function token() {
  return randomBytes(16).toString("hex");
}

/**
 * Starts the built Worker (build/index.js, the test-hooks build) in workerd with the bindings
 * wrangler.toml declares: the Durable Object, a fresh in-memory D1 database, and [vars]
 * overridden by `vars`. `secrets` are bound the way `wrangler secret put` binds them.
 */
export async function startWorker({ vars = {}, secrets = {}, persist, database } = {}) {
  const doBinding = wrangler.durable_objects.bindings[0];
  const sqlite = wrangler.migrations.some((m) => (m.new_sqlite_classes ?? []).includes(doBinding.class_name));
  const d1 = wrangler.d1_databases[0];
  // What the Worker writes to the console, one entry per call, as workerd reports it: `level` is
  // the console method (log, warn, error), `message` the line.
  const logs = [];
  const mf = new Miniflare({
    modules: true,
    scriptPath: join(here, "build/index.js"),
    modulesRules: [{ type: "CompiledWasm", include: ["**/*.wasm"], fallthrough: true }],
    compatibilityDate: wrangler.compatibility_date,
    durableObjects: { [doBinding.name]: { className: doBinding.class_name, useSQLite: sqlite } },
    d1Databases: { [d1.binding]: database ?? `test-${token()}` },
    // With `persist`, Durable Object storage (alarms included) and D1 live in that directory,
    // so a second Miniflare on it is the same deployment after its isolate was replaced.
    ...(persist ? { durableObjectsPersist: join(persist, "do"), d1Persist: join(persist, "d1") } : {}),
    // Paid's limits: Miniflare enforces no CPU limit, and the tests size batches of many runs
    // (a test of the Free plan's sizing passes REAPER_PLAN itself).
    bindings: { ...wrangler.vars, REAPER_PLAN: "paid", ...vars, ...secrets },
    handleStructuredLogs: (entry) => {
      logs.push(entry);
    },
  });
  await mf.ready;
  const call = async (method, path, { auth, body } = {}) => {
    const headers = {};
    if (auth) headers.authorization = `Bearer ${auth}`;
    if (body !== undefined) headers["content-type"] = "application/json";
    const res = await mf.dispatchFetch(`${BASE}${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    let json;
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
    return { status: res.status, text, json, headers: res.headers };
  };
  return {
    mf,
    call,
    logs,
    /** The console lines that are JSON objects, parsed, each with `console` (the method). */
    jsonLogs: () =>
      logs.flatMap(({ level, message }) => {
        try {
          const line = JSON.parse(message);
          return line && typeof line === "object" ? [{ console: level, ...line }] : [];
        } catch {
          return [];
        }
      }),
    db: () => mf.getD1Database(d1.binding),
    scheduled: async () => (await mf.getWorker()).scheduled({ cron: wrangler.triggers.crons[0] }),
    dispose: () => mf.dispose(),
  };
}

/** Polls `probe` until it returns a truthy value; fails after `ms`. */
export async function eventually(what, probe, ms = 20_000) {
  const deadline = Date.now() + ms;
  let last;
  for (;;) {
    last = await probe();
    if (last) return last;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(50);
  }
}

/** The status of the reaper DO once `predicate(status)` holds. */
export function statusWhen(worker, admin, what, predicate, ms) {
  return eventually(what, async () => {
    const s = await worker.call("GET", "/admin/status", { auth: admin });
    if (s.status !== 200) throw new Error(`status answered ${s.status}: ${s.text}`);
    return predicate(s.json) ? s.json : undefined;
  }, ms);
}

const sandboxdBin =
  process.env.REAPER_SANDBOXD_BIN ?? join(here, "../../target/debug/reaper-sandboxd");

/** A real reaper-sandboxd on a free loopback port, with its own root and a random token. */
export async function startSandboxd() {
  const root = mkdtempSync(join(tmpdir(), "reaper-cf-sandboxd-"));
  const secret = `tok-${token()}`;
  const child = spawn(sandboxdBin, ["--root", join(root, "sandboxes"), "--listen", "127.0.0.1:0"], {
    env: { ...process.env, REAPER_SANDBOXD_TOKEN: secret, RUST_LOG: "info" },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const exited = new Promise((resolve) => child.once("exit", resolve));
  const line = await Promise.race([
    new Promise((resolve) => createInterface({ input: child.stdout }).once("line", resolve)),
    exited.then((code) => {
      throw new Error(`reaper-sandboxd (${sandboxdBin}) exited with ${code} before listening`);
    }),
  ]);
  const url = line.replace(/^listening on /, "");
  const created = [];
  const api = async (method, path, body) => {
    const res = await fetch(`${url}/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${secret}`, "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    if (!res.ok) throw new Error(`sandboxd ${method} ${path}: ${res.status} ${text}`);
    const json = text ? JSON.parse(text) : undefined;
    if (method === "POST" && path === "/sandboxes") created.push(json.id);
    return json;
  };
  return {
    url,
    token: secret,
    root,
    api,
    journalDir: join(root, "journals"),
    /** Whether some journal in `dir` holds `marker` and an exit sentinel. */
    finished(dir, marker) {
      let names = [];
      try {
        names = readdirSync(dir).filter((n) => n.endsWith(".ndjson"));
      } catch {
        return false;
      }
      return names.some((n) => {
        const text = readFileSync(join(dir, n), "utf8");
        return text.includes(marker) && text.includes('"__exit":');
      });
    },
    async stop() {
      // Destroying kills the agents still running (destroy is idempotent).
      for (const id of created) await api("DELETE", `/sandboxes/${id}`).catch(() => {});
      child.kill("SIGTERM");
      await exited;
      rmSync(root, { recursive: true, force: true });
    },
  };
}

/**
 * Where a provider fake's binary is (the `fake_*` examples of the provider crates): the
 * variable `env` when set, else `<repo>/target/debug/examples/<name>`. Fails, saying how to build
 * it, when it is absent: CI must run the tests that need it, never skip them.
 */
export function providerFakeBin(name, env) {
  const bin = process.env[env] ?? join(here, "../../target/debug/examples", name);
  if (!existsSync(bin)) {
    throw new Error(
      `the provider fake ${name} is not built (looked for ${bin}): run ` +
        "`cargo build -p reaper-daytona -p reaper-e2b -p reaper-vercel-sandbox --examples` at the " +
        `repository root, or point ${env} at the binary`,
    );
  }
  return bin;
}

/**
 * A provider crate's OpenAPI-checked fake as a process (`bin`, see providerFakeBin): its first
 * stdout line says how to reach it. Returns the provider's name, the settings that point the
 * Worker at it (`vars`, and `secrets` for the keys), and its control API (see the examples'
 * support/control.rs): sandboxes, agents under the journaled wrapper, the request log and the
 * violations of the provider's documents. `stop()` closes its stdin, on which it destroys the
 * sandboxes it made and exits.
 */
export async function startProviderFake(bin) {
  const child = spawn(bin, [], {
    env: { ...process.env, RUST_LOG: process.env.RUST_LOG ?? "warn" },
    stdio: ["pipe", "pipe", "inherit"],
  });
  const exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve(code ?? signal)));
  const line = await Promise.race([
    new Promise((resolve) => createInterface({ input: child.stdout }).once("line", resolve)),
    exited.then((code) => {
      throw new Error(`the provider fake ${bin} exited with ${code} before it printed its address`);
    }),
  ]);
  const hello = JSON.parse(line);
  const api = async (method, path, body) => {
    const res = await fetch(`${hello.control}${path}`, {
      method,
      headers: body === undefined ? {} : { "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    if (!res.ok) throw new Error(`${hello.provider} fake: ${method} ${path}: ${res.status} ${text}`);
    return JSON.parse(text);
  };
  return {
    provider: hello.provider,
    vars: hello.vars,
    secrets: hello.secrets,
    api,
    /** A new running sandbox's id. */
    createSandbox: async () => (await api("POST", "/__test/sandboxes")).id,
    /** Starts `command` in sandbox `id` under the journaled wrapper, detached. */
    startAgent: (id, body) => api("POST", `/__test/sandboxes/${encodeURIComponent(id)}/agents`, body),
    /** Whether sandbox `id` still exists at the fake (false once destroyed through its API). */
    alive: async (id) => (await api("GET", `/__test/sandboxes/${encodeURIComponent(id)}`)).alive,
    /** Every request the fake's provider API received: {server, operation, method, path, status}. */
    requests: () => api("GET", "/__test/requests"),
    /** {recorded, unexpected}: the document violations, and those the crate does not tolerate. */
    violations: () => api("GET", "/__test/violations"),
    async stop() {
      child.stdin.end();
      const code = await exited;
      if (code !== 0) throw new Error(`the ${hello.provider} fake exited with ${code}`);
    },
  };
}

/**
 * Whether the journal `<dir>/<runId>.ndjson` holds `marker` (and, with `exited`, an exit
 * sentinel). For run ids of letters, digits and '-', which the journal's filename codec keeps as
 * they are.
 */
export function journalHas(dir, runId, marker, { exited = false } = {}) {
  let text;
  try {
    text = readFileSync(join(dir, `${runId}.ndjson`), "utf8");
  } catch {
    return false;
  }
  return text.includes(marker) && (!exited || text.includes('"__exit":'));
}
