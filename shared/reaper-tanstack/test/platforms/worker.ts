// The reaper's own Worker (handlers/reaper-cloudflare, its test build in build/) in real workerd
// through Miniflare, bound as wrangler.toml binds it: the RunReaper Durable Object (whose alarm
// sweeps) and a D1 database `DB`, which the app reaches from Node through Miniflare's binding.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { randomBytes } from 'node:crypto'
import { Miniflare } from 'miniflare'
import { REPO } from './services.js'

const WORKER = join(REPO, 'handlers', 'reaper-cloudflare')
// Miniflare only routes by path here; the host is never resolved.
const BASE = 'http://reaper.test'

/** What `GET /admin/status` answers (the parts read here). */
interface Status {
  sweeps?: number
  lastSweep?: { report: Record<string, unknown> }
}

export class ReaperWorker {
  private constructor(
    private readonly mf: Miniflare,
    private readonly admin: string,
  ) {}

  static async start(vars: Record<string, string>, secrets: Record<string, string>): Promise<ReaperWorker> {
    const build = process.env.REAPER_WORKER_BUILD
    if (!build) throw new Error('REAPER_WORKER_BUILD is not set: run the platform tests through test-platforms.sh')
    const script = join(build, 'index.js')
    const toml = readFileSync(join(WORKER, 'wrangler.toml'), 'utf8')
    const compatibilityDate = /^compatibility_date\s*=\s*"([^"]+)"/m.exec(toml)![1]
    // The deployment's [vars] (the top-level table: `KEY = "value"` lines), under the test's own.
    const section = toml.slice(toml.indexOf('\n[vars]\n') + '\n[vars]\n'.length)
    const deployed = Object.fromEntries(
      [...section.slice(0, section.search(/^\[/m)).matchAll(/^([A-Z_]+)\s*=\s*"([^"]*)"/gm)].map((m) => [m[1], m[2]]),
    )
    const admin = randomBytes(16).toString('hex')
    const mf = new Miniflare({
      modules: true,
      scriptPath: script,
      // Module names are paths relative to this root; the build is outside the working directory.
      modulesRoot: build,
      modulesRules: [{ type: 'CompiledWasm', include: ['**/*.wasm'], fallthrough: true }],
      compatibilityDate,
      durableObjects: { REAPER: { className: 'RunReaper', useSQLite: true } },
      d1Databases: { DB: `reaper-tanstack-e2e-${process.pid}` },
      // Paid's limits, as the Worker's own tests run (Miniflare enforces no CPU limit).
      bindings: { ...deployed, REAPER_PLAN: 'paid', ...vars, ...secrets, REAPER_ADMIN_TOKEN: admin },
    })
    await mf.ready
    return new ReaperWorker(mf, admin)
  }

  /** The D1 binding the Worker sweeps, reached from Node. */
  async db(): Promise<unknown> {
    return this.mf.getD1Database('DB')
  }

  async call(method: string, path: string): Promise<{ status: number; json: Status; text: string }> {
    const res = await this.mf.dispatchFetch(`${BASE}${path}`, { method, headers: { authorization: `Bearer ${this.admin}` } })
    const text = await res.text()
    let json: Status = {}
    try {
      json = JSON.parse(text) as Status
    } catch {
      // Not JSON: the status and text say what went wrong.
    }
    return { status: res.status, json, text }
  }

  /** Arms the alarm (it fires at once) and resolves with the first sweep's report. */
  async sweep(): Promise<Record<string, unknown>> {
    const boot = await this.call('POST', '/admin/bootstrap')
    if (boot.status !== 200) throw new Error(`bootstrap: ${boot.status} ${boot.text}`)
    const deadline = Date.now() + 120_000 // a hang guard only
    for (;;) {
      const s = await this.call('GET', '/admin/status')
      if (s.status !== 200) throw new Error(`status: ${s.status} ${s.text}`)
      if ((s.json.sweeps ?? 0) >= 1 && s.json.lastSweep) return s.json.lastSweep.report
      if (Date.now() > deadline) throw new Error(`no sweep: ${s.text}`)
      await new Promise((r) => setTimeout(r, 50))
    }
  }

  async stop(): Promise<void> {
    await this.mf.dispose()
  }
}
