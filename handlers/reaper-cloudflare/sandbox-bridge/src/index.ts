// The Cloudflare Sandbox bridge: a small Worker that serves reaper-sandboxd's v1 HTTP API
// (handlers/reaper-sandboxd/openapi.json: status, exec, destroy) in front of a `@cloudflare/sandbox`
// Durable Object binding, so a reaper anywhere reaches the team's sandboxes with sandboxd's client
// under the provider name `cloudflare`. A Sandbox is a Durable Object reachable only through a
// Worker binding; this is that Worker.
//
// Rules it keeps (each has a test in ../test/sandbox-bridge.test.mjs):
// - Every route but GET /v1/healthz needs `Authorization: Bearer <BRIDGE_TOKEN>`, compared in
//   constant time; a bridge without BRIDGE_TOKEN refuses everything (503), it never runs open.
// - BRIDGE_TOKEN follows the reaper's one token rule (reaper_core::settings::check_token: 16 or
//   more printable ASCII characters, no space, nothing around it); a bad one refuses everything
//   (503) with the sentence every reaper binary gives, never the value.
// - It never starts a sandbox: status and exec first ask the container's state, and a sandbox
//   that is not running (destroyed, never started, or asleep: a Cloudflare container's disk does
//   not survive a stop) is `sandbox-not-found`. exec on it would boot an empty container.
// - Output is bounded inside the sandbox (each stream through `head -c limit+1`), so an endless
//   command ends on SIGPIPE and more than the bound is `output-limit-exceeded`, never a cut.
// - Errors are sandboxd's `{"error": {"code", "message"}}`, each message saying what to do.

import { getSandbox } from "@cloudflare/sandbox";

export interface Env {
  /** The Sandbox Durable Object namespace (`[[durable_objects.bindings]] name = "Sandbox"`). */
  Sandbox: DurableObjectNamespace;
  /** The bearer token reapers send (`wrangler secret put BRIDGE_TOKEN`). */
  BRIDGE_TOKEN?: string;
  /** Per-stream output bound of an exec, bytes (default 1 MiB, as sandboxd's). */
  MAX_OUTPUT_BYTES?: string;
  /** The longest exec timeout accepted, ms (default 300000). */
  MAX_EXEC_TIMEOUT_MS?: string;
  /** Reported as the sandboxes' journal directory (informational). */
  JOURNAL_DIR?: string;
}

/** The part of the Sandbox SDK's stub this bridge uses (see SOURCE.md). */
interface SandboxStub {
  exec(command: string, options?: { timeout?: number }): Promise<{
    stdout: string;
    stderr: string;
    exitCode: number;
    success: boolean;
  }>;
  destroy(): Promise<void>;
  getState(): Promise<{ status: string; lastChange?: number }>;
}

const VERSION = "0.1.0";
const MAX_BODY_BYTES = 64 * 1024;
const DEFAULT_EXEC_TIMEOUT_MS = 30_000;
const ID = /^[A-Za-z0-9-]{1,64}$/;
const LIVE = new Set(["running", "healthy"]);

// Each stream of `sh -c "$c"` passes through `head -c $n` (n = bound + 1): reaching n bytes
// proves an overflow and names its stream; the command gets SIGPIPE instead of printing on. The
// command's status leaves the pipeline on fd 5. No stdin (the port's contract).
const WRAPPER = `n=$1 c=$2
exec 4>&1
s=$( { { { sh -c "$c" </dev/null 2>&3 3>&- 4>&- 5>&-; echo $? >&5; } | head -c "$n" >&4 3>&- 4>&- 5>&-; } 3>&1 | head -c "$n" >&2 4>&- 5>&-; } 5>&1 )
exec 4>&-
exit "\${s:-1}"`;

function quote(s: string): string {
  return `'${s.replaceAll("'", `'\\''`)}'`;
}

export function bounded(command: string, limit: number): string {
  return `sh -c ${quote(WRAPPER)} reaper-exec ${limit + 1} ${quote(command)}`;
}

function error(status: number, code: string, message: string, headers: Record<string, string> = {}): Response {
  return Response.json({ error: { code, message } }, { status, headers });
}

function timedOut(ms: number): Response {
  // Worded as sandboxd words it ("after <ms> ms"): its client reads the timeout from it.
  return error(422, "exec-timeout", `sandbox command timed out after ${ms} ms and was stopped`);
}

function positive(value: string | undefined, fallback: number, name: string): number {
  if (value === undefined || value.trim() === "") return fallback;
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n <= 0) throw new Error(`${name} must be a positive integer, not ${JSON.stringify(value)}`);
  return n;
}

// The reaper's token rule and sentence (reaper_core::settings::check_token and TOKEN_ADVICE;
// a Rust test in ../../src/config.rs checks this file still carries the same words).
const TOKEN_MIN_CHARS = 16;
const TOKEN_ADVICE =
  "a token is 16 or more printable ASCII characters without spaces and nothing around it (no trailing newline); make one with `openssl rand -hex 32`";
// Rust's char::is_whitespace (Unicode White_Space), which is what `str::trim` strips there.
const EDGE_SPACE = /^[\t-\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]|[\t-\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]$/;

/** Why `value` is no token, as one sentence naming `setting`; null when it is one. */
export function tokenProblem(setting: string, value: string): string | null {
  let problem: string | null = null;
  if (EDGE_SPACE.test(value)) problem = "has whitespace before or after it (a newline stored with it?)";
  else if (value.includes(" ")) problem = "contains a space";
  else if (!/^[\x21-\x7e]*$/.test(value)) problem = "contains a control or non-ASCII character";
  else if (value.length < TOKEN_MIN_CHARS) problem = `is too short (length ${value.length})`;
  return problem === null ? null : `${setting} ${problem}: ${TOKEN_ADVICE}`;
}

/** Constant-time token check: equal-length digests compared with timingSafeEqual. */
async function authorized(request: Request, expected: string): Promise<boolean> {
  const header = request.headers.get("authorization") ?? "";
  const given = header.startsWith("Bearer ") ? header.slice("Bearer ".length) : "";
  const enc = new TextEncoder();
  const [a, b] = await Promise.all([
    crypto.subtle.digest("SHA-256", enc.encode(given)),
    crypto.subtle.digest("SHA-256", enc.encode(expected)),
  ]);
  // workerd's crypto.subtle has timingSafeEqual; the digests make the lengths equal.
  return (crypto.subtle as unknown as { timingSafeEqual(a: ArrayBuffer, b: ArrayBuffer): boolean }).timingSafeEqual(a, b) && given.length > 0;
}

async function live(stub: SandboxStub): Promise<{ live: boolean; since: number }> {
  const state = await stub.getState();
  return { live: LIVE.has(state.status), since: state.lastChange ?? 0 };
}

function bytes(s: string): number {
  return new TextEncoder().encode(s).length;
}

export default {
  async fetch(request: Request, env: Env): Promise<Response> {
    const url = new URL(request.url);
    const path = url.pathname.replace(/\/+$/, "");
    if (path === "/v1/healthz") {
      if (request.method !== "GET" && request.method !== "HEAD") return error(405, "method-not-allowed", "use GET", { allow: "GET, HEAD" });
      return Response.json({ status: "ok", api: "v1", version: VERSION });
    }
    if (!env.BRIDGE_TOKEN) {
      return error(503, "internal", "the bridge has no BRIDGE_TOKEN: set it with `wrangler secret put BRIDGE_TOKEN`; until then it serves nothing");
    }
    const bad = tokenProblem("BRIDGE_TOKEN", env.BRIDGE_TOKEN);
    if (bad !== null) {
      return error(503, "internal", `${bad}; set a good one with \`wrangler secret put BRIDGE_TOKEN\` (the reapers send it as CLOUDFLARE_SANDBOX_BRIDGE_TOKEN); until then the bridge serves nothing`);
    }
    if (!(await authorized(request, env.BRIDGE_TOKEN))) {
      return error(401, "unauthorized", "send Authorization: Bearer <the bridge's BRIDGE_TOKEN> (CLOUDFLARE_SANDBOX_BRIDGE_TOKEN on the reaper)", { "www-authenticate": "Bearer" });
    }
    let limits: { output: number; maxTimeout: number };
    try {
      limits = {
        output: positive(env.MAX_OUTPUT_BYTES, 1024 * 1024, "MAX_OUTPUT_BYTES"),
        maxTimeout: positive(env.MAX_EXEC_TIMEOUT_MS, 300_000, "MAX_EXEC_TIMEOUT_MS"),
      };
    } catch (e) {
      return error(500, "internal", `the bridge is misconfigured: ${(e as Error).message}`);
    }
    const m = /^\/v1\/sandboxes\/([^/]*)(\/exec)?$/.exec(path);
    if (!m) return error(404, "route-not-found", `no route ${request.method} ${url.pathname}: this bridge serves /v1/sandboxes/{id}, /v1/sandboxes/{id}/exec and /v1/healthz (check the base URL)`);
    const id = decodeURIComponent(m[1]);
    if (!ID.test(id)) return error(400, "invalid-sandbox-id", `${JSON.stringify(id.slice(0, 80))} is not a sandbox id: 1-64 characters of [A-Za-z0-9-]`);
    const stub = getSandbox(env.Sandbox, id) as unknown as SandboxStub;
    const gone = () => error(404, "sandbox-not-found", `sandbox ${id} is not running (destroyed, never started, or asleep with its disk gone)`);
    try {
      if (m[2]) {
        if (request.method !== "POST") return error(405, "method-not-allowed", "use POST", { allow: "POST" });
        const text = await request.text();
        if (bytes(text) > MAX_BODY_BYTES) return error(413, "payload-too-large", `the body is over ${MAX_BODY_BYTES} bytes`);
        let body: { command?: unknown; timeoutMs?: unknown };
        try {
          body = JSON.parse(text);
        } catch {
          return error(400, "invalid-request", 'the body must be JSON: {"command": "...", "timeoutMs": 30000}');
        }
        const extra = Object.keys(body ?? {}).filter((k) => k !== "command" && k !== "timeoutMs");
        if (typeof body !== "object" || body === null || typeof body.command !== "string" || extra.length) {
          return error(400, "invalid-request", `the body must be {"command": string, "timeoutMs"?: integer}${extra.length ? `; unknown field ${extra[0]}` : ""}`);
        }
        const timeout = body.timeoutMs === undefined ? DEFAULT_EXEC_TIMEOUT_MS : body.timeoutMs;
        if (!Number.isSafeInteger(timeout) || (timeout as number) <= 0 || (timeout as number) > limits.maxTimeout) {
          return error(400, "invalid-request", `timeoutMs must be an integer from 1 to ${limits.maxTimeout}`);
        }
        if (!(await live(stub)).live) return gone();
        const started = Date.now();
        let result;
        try {
          result = await stub.exec(bounded(body.command, limits.output), { timeout: timeout as number });
        } catch (e) {
          const message = String((e as Error)?.message ?? e);
          if (Date.now() - started >= (timeout as number) || /time(d)? ?out/i.test(message)) {
            return timedOut(timeout as number);
          }
          if (!(await live(stub).catch(() => ({ live: true }))).live) return gone();
          return error(502, "internal", `the Sandbox SDK failed to run the command: ${message.slice(0, 300)}`);
        }
        // A command the SDK ended at its timeout may come back as a result (killed by a signal),
        // not an error: past the timeout it is a timeout either way, never an exit code.
        if (Date.now() - started >= (timeout as number)) return timedOut(timeout as number);
        for (const [stream, out] of [["stdout", result.stdout], ["stderr", result.stderr]] as const) {
          if (bytes(out ?? "") > limits.output) {
            // Worded as sandboxd words it: its client reads the stream and the limit from it.
            return error(422, "output-limit-exceeded", `sandbox command ${stream} exceeded the ${limits.output}-byte output limit; read less per call`);
          }
        }
        return Response.json({ stdout: result.stdout ?? "", stderr: result.stderr ?? "", exitCode: result.exitCode });
      }
      if (request.method === "GET") {
        const state = await live(stub);
        if (!state.live) return gone();
        return Response.json({ id, createdAt: state.since, journalDir: env.JOURNAL_DIR ?? "", agents: [] });
      }
      if (request.method === "DELETE") {
        try {
          await stub.destroy();
        } catch (e) {
          return error(409, "destroy-refused", `the sandbox refused teardown and may still be running: ${String((e as Error)?.message ?? e).slice(0, 300)}`);
        }
        return new Response(null, { status: 204 });
      }
      return error(405, "method-not-allowed", "use GET or DELETE", { allow: "GET, DELETE" });
    } catch (e) {
      // The Durable Object or its container could not be reached: retryable.
      return error(503, "internal", `the Sandbox Durable Object did not answer: ${String((e as Error)?.message ?? e).slice(0, 300)}`, { "retry-after": "5" });
    }
  },
};
