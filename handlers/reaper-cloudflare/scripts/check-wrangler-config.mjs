// Validates wrangler.toml (or the file given) against the JSON schema wrangler itself ships (config-schema.json),
// then checks what the schema cannot: the bindings and vars the Worker's code reads.
import { readFileSync } from "node:fs";
import { parse } from "smol-toml";
import Ajv from "ajv";

// Read by path: wrangler's package "exports" do not include its schema.
const wrangler = new URL("../node_modules/wrangler/", import.meta.url);
const schema = JSON.parse(readFileSync(new URL("config-schema.json", wrangler), "utf8"));
const wranglerVersion = JSON.parse(readFileSync(new URL("package.json", wrangler), "utf8")).version;
const file = process.argv[2] ?? new URL("../wrangler.toml", import.meta.url).pathname;
const config = parse(readFileSync(file, "utf8"));

const ajv = new Ajv({ allErrors: true, strict: false, allowUnionTypes: true });
const valid = ajv.validate(schema, config);
const problems = valid ? [] : ajv.errors.map((e) => `${e.instancePath || "/"} ${e.message} ${JSON.stringify(e.params)}`);

const need = (ok, message) => ok || problems.push(message);
const dos = config.durable_objects?.bindings ?? [];
need(dos.some((b) => b.name === "REAPER" && b.class_name === "RunReaper"), "no Durable Object binding REAPER -> RunReaper");
need((config.migrations ?? []).some((m) => (m.new_sqlite_classes ?? []).includes("RunReaper")), "RunReaper is not created as a SQLite-backed class (new_sqlite_classes)");
need((config.d1_databases ?? []).some((d) => d.binding === "DB"), "no D1 binding DB");
need((config.triggers?.crons ?? []).length > 0, "no cron trigger: nothing heals a lost alarm");
need(Number.isInteger(config.limits?.cpu_ms), "no [limits] cpu_ms");
need(config.observability?.enabled === true, "[observability] enabled is not true: the sweep's JSON log lines would reach no Workers Logs");
for (const d1 of config.d1_databases ?? []) {
  need(!/^0{8}-0{4}-0{4}-0{4}-0{12}$/.test(d1.database_id ?? ""),
    `D1 binding ${d1.binding}: database_id is the all-zero placeholder; remove it (wrangler deploy binds database_name) or paste the id \`wrangler d1 create\` printed`);
}
need(typeof config.vars?.REAPER_DETACHED_TTL === "string", "[vars] REAPER_DETACHED_TTL is required");
const providers = (config.vars?.REAPER_PROVIDERS ?? "sandboxd").split(",").map((p) => p.trim().toLowerCase());
if (providers.includes("sandboxd")) {
  need(typeof config.vars?.REAPER_SANDBOXD_URL === "string", "[vars] REAPER_SANDBOXD_URL is required while REAPER_PROVIDERS lists sandboxd");
}
for (const secret of ["REAPER_SANDBOXD_TOKEN", "REAPER_ADMIN_TOKEN", "DAYTONA_API_KEY", "E2B_API_KEY", "VERCEL_TOKEN", "VERCEL_OIDC_TOKEN"]) {
  need(!(secret in (config.vars ?? {})), `${secret} is a secret: never put it in [vars]`);
}
const cpu = config.vars?.REAPER_CPU_LIMIT;
need(cpu === undefined || cpu === `${config.limits?.cpu_ms / 1000}s` || cpu === `${config.limits?.cpu_ms}ms`,
  `[vars] REAPER_CPU_LIMIT (${cpu}) differs from [limits] cpu_ms (${config.limits?.cpu_ms})`);

if (problems.length) {
  console.error(`wrangler.toml is invalid:\n  ${problems.join("\n  ")}`);
  process.exit(1);
}
console.log(`wrangler.toml is valid against wrangler ${wranglerVersion}'s config schema`);
