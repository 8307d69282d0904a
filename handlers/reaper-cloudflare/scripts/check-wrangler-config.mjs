// Validates wrangler.toml (or the file given) against the JSON schema wrangler itself ships (config-schema.json),
// then checks what the schema cannot: the bindings and vars the Worker's code reads, in the top-level Worker and
// in every [env.*] (wrangler inherits neither vars nor bindings into an environment), and that the limits agree
// with REAPER_PLAN.
//
//   node scripts/check-wrangler-config.mjs [--deploy] [file]
//
// --deploy (run by scripts/build.sh, i.e. by `wrangler deploy`) also refuses placeholder hosts
// (example.com and the reserved .example/.invalid/.test/.localhost names): a deploy "green" against a
// daemon that does not exist sweeps nothing.
import { readFileSync } from "node:fs";
import { parse } from "smol-toml";
import Ajv from "ajv";

const args = process.argv.slice(2);
const deploy = args.includes("--deploy");
const fileArg = args.find((a) => !a.startsWith("--"));

// Read by path: wrangler's package "exports" do not include its schema.
const wrangler = new URL("../node_modules/wrangler/", import.meta.url);
const schema = JSON.parse(readFileSync(new URL("config-schema.json", wrangler), "utf8"));
const wranglerVersion = JSON.parse(readFileSync(new URL("package.json", wrangler), "utf8")).version;
const file = fileArg ?? new URL("../wrangler.toml", import.meta.url).pathname;
const config = parse(readFileSync(file, "utf8"));

const ajv = new Ajv({ allErrors: true, strict: false, allowUnionTypes: true });
const valid = ajv.validate(schema, config);
const problems = valid ? [] : ajv.errors.map((e) => `${e.instancePath || "/"} ${e.message} ${JSON.stringify(e.params)}`);
const need = (ok, message) => ok || problems.push(message);

// The plan's limits (Cloudflare's Workers limits page): CPU ms per invocation and subrequests.
const PLANS = { free: { cpuMs: 10, subrequests: 50 }, paid: { cpuMs: 30_000, subrequests: 10_000 } };

function ms(text) {
  const m = /^(\d+)\s*(ms|s|m)$/.exec(String(text ?? "").trim());
  return m ? Number(m[1]) * { ms: 1, s: 1000, m: 60_000 }[m[2]] : NaN;
}

const PLACEHOLDER = /^(.*\.)?example\.(com|org|net)$|\.(example|invalid|test|localhost)$|^(example|invalid|test|localhost)$/i;
function placeholderHost(url) {
  try {
    return PLACEHOLDER.test(new URL(url).hostname);
  } catch {
    return false;
  }
}

// One Worker: the top level, or an environment (`where` names it in messages).
function checkWorker(w, where, inherited) {
  const at = (m) => `${where}: ${m}`;
  const dos = w.durable_objects?.bindings ?? [];
  need(dos.some((b) => b.name === "REAPER" && b.class_name === "RunReaper"), at("no Durable Object binding REAPER -> RunReaper"));
  need((w.d1_databases ?? []).some((d) => d.binding === "DB"), at("no D1 binding DB"));
  const crons = w.triggers?.crons ?? inherited.triggers?.crons ?? [];
  need(crons.length > 0, at("no cron trigger: nothing heals a lost alarm"));
  for (const d1 of w.d1_databases ?? []) {
    need(!/^0{8}-0{4}-0{4}-0{4}-0{12}$/.test(d1.database_id ?? ""),
      at(`D1 binding ${d1.binding}: database_id is the all-zero placeholder; remove it (wrangler deploy binds database_name) or paste the id \`wrangler d1 create\` printed`));
  }
  const vars = w.vars ?? {};
  need(typeof vars.REAPER_DETACHED_TTL === "string", at("[vars] REAPER_DETACHED_TTL is required"));
  const providers = (vars.REAPER_PROVIDERS ?? "sandboxd").split(",").map((p) => p.trim().toLowerCase());
  if (providers.includes("sandboxd")) {
    need(typeof vars.REAPER_SANDBOXD_URL === "string", at("[vars] REAPER_SANDBOXD_URL is required while REAPER_PROVIDERS lists sandboxd"));
  }
  for (const secret of ["REAPER_SANDBOXD_TOKEN", "REAPER_ADMIN_TOKEN", "REAPER_STATUS_TOKEN", "DAYTONA_API_KEY", "E2B_API_KEY", "VERCEL_TOKEN", "VERCEL_OIDC_TOKEN"]) {
    need(!(secret in vars), at(`${secret} is a secret: never put it in [vars]`));
  }
  if (deploy) {
    for (const [name, value] of Object.entries(vars)) {
      if (/_URL$/.test(name) && typeof value === "string" && placeholderHost(value)) {
        problems.push(at(`[vars] ${name} = "${value}" is a placeholder host: set the real URL before deploying`));
      }
    }
  }
  // Limits: [limits] is inherited by environments unless restated.
  const plan = String(vars.REAPER_PLAN ?? "free").toLowerCase();
  const limits = PLANS[plan];
  need(limits, at(`[vars] REAPER_PLAN = "${vars.REAPER_PLAN}" is not free or paid`));
  if (!limits) return;
  const cpuMs = (w.limits ?? inherited.limits)?.cpu_ms;
  if (plan === "free") {
    need(cpuMs === undefined, at("[limits] cpu_ms is set but REAPER_PLAN is free: Cloudflare rejects cpu_ms on the Free plan (error 100328); remove it, or set REAPER_PLAN = \"paid\" on a Paid account"));
  }
  need(Number.isInteger(cpuMs) || cpuMs === undefined, at("[limits] cpu_ms is not a whole number of milliseconds"));
  const effectiveCpu = cpuMs ?? limits.cpuMs;
  if (vars.REAPER_CPU_LIMIT !== undefined) {
    need(ms(vars.REAPER_CPU_LIMIT) === effectiveCpu,
      at(`[vars] REAPER_CPU_LIMIT (${vars.REAPER_CPU_LIMIT}) differs from the CPU limit the Worker gets (${effectiveCpu} ms: ${cpuMs === undefined ? `the ${plan} plan's` : "[limits] cpu_ms"})`));
  } else if (cpuMs !== undefined) {
    need(cpuMs === limits.cpuMs, at(`[limits] cpu_ms = ${cpuMs} but REAPER_CPU_LIMIT is unset, so the sweep sizes for ${limits.cpuMs} ms: set REAPER_CPU_LIMIT = "${cpuMs}ms"`));
  }
  if (vars.REAPER_SUBREQUESTS !== undefined) {
    need(Number(vars.REAPER_SUBREQUESTS) <= limits.subrequests,
      at(`[vars] REAPER_SUBREQUESTS (${vars.REAPER_SUBREQUESTS}) exceeds the ${plan} plan's ${limits.subrequests} per invocation`));
  }
}

need(config.observability?.enabled === true, "[observability] enabled is not true: the sweep's JSON log lines would reach no Workers Logs");
need((config.migrations ?? []).some((m) => (m.new_sqlite_classes ?? []).includes("RunReaper")), "RunReaper is not created as a SQLite-backed class (new_sqlite_classes)");
checkWorker(config, "top level", {});
const names = new Map([[config.name, "top level"]]);
const databases = new Map((config.d1_databases ?? []).map((d) => [d.database_name, "top level"]));
for (const [env, w] of Object.entries(config.env ?? {})) {
  const where = `[env.${env}]`;
  checkWorker(w, where, config);
  // Without its own name an environment deploys as `<name>-<env>`; a name equal to another's replaces that Worker.
  const name = w.name ?? `${config.name}-${env}`;
  need(!names.has(name), `${where}: the Worker name "${name}" is also ${names.get(name)}'s: the two deploys would replace each other`);
  names.set(name, where);
  for (const d of w.d1_databases ?? []) {
    need(!databases.has(d.database_name), `${where}: D1 database "${d.database_name}" is also ${databases.get(d.database_name)}'s: the two would sweep one database`);
    databases.set(d.database_name, where);
  }
}

if (problems.length) {
  console.error(`wrangler.toml is invalid:\n  ${problems.join("\n  ")}`);
  process.exit(1);
}
console.log(`wrangler.toml is valid against wrangler ${wranglerVersion}'s config schema${deploy ? " and ready to deploy" : ""}`);
