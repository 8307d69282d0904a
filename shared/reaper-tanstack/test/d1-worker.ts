// The test Worker: this package's D1 backend inside workerd on a real D1 binding (`DB`).
//   GET  /cases            the contract cases' names
//   POST /case?name=…      runs one case (the same code contract.test.ts runs in Node)
//   POST /corpus/write     writes the corpus tagged `?tag=` through ReaperD1; answers its ids
//   POST /corpus/read      reads entries (the body) back through ReaperD1
//   POST /schema/newer     a database at a schema version this package does not know (the second
//                          binding, FRESH) is refused, naming the version, with nothing written
//   POST /schema/upgrade   a database at schema version 4 holding runs (the third binding, OLD) is
//                          upgraded by ReaperD1.open: its versions, runs and indexes after
//   POST /batch            runs `{batch:[{sql, params}]}` as one D1 batch: the bridge the Rust
//                          `reaper-d1` store (interop `d1-stdio`) reaches the same binding by
import { ReaperD1, type D1Database } from '../src/d1.js'
import { SchemaError } from '../src/types.js'
import { MIGRATIONS } from '../src/schema.generated.js'
import { contractCases } from './contract-cases.js'
import { corpus, ids, readTs, writeTs, type Entry } from './corpus-cases.js'

interface Env {
  DB: D1Database
  FRESH: D1Database
  OLD: D1Database
}

/** Every table's rows, to prove a refused open wrote nothing. */
async function dump(db: D1Database): Promise<string> {
  const tables = (await db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").all<{ name: string }>())
    .results.map((r) => r.name)
    .filter((n) => !n.startsWith('_cf_') && !n.startsWith('sqlite_'))
  const out: Record<string, unknown> = {}
  for (const t of tables) out[t] = (await db.prepare(`SELECT * FROM "${t}"`).all()).results
  return JSON.stringify(out)
}

let clock = 1_000_000
let opened: Promise<ReaperD1> | undefined

const json = (v: unknown, status = 200) =>
  new Response(JSON.stringify(v), { status, headers: { 'content-type': 'application/json' } })

export default {
  async fetch(request: Request, env: Env): Promise<Response> {
    const url = new URL(request.url)
    if (url.pathname === '/batch') {
      const { batch } = (await request.json()) as { batch: Array<{ sql: string; params: Array<unknown> }> }
      try {
        const out = await env.DB.batch<Record<string, unknown>>(
          batch.map((s) => (s.params.length > 0 ? env.DB.prepare(s.sql).bind(...s.params) : env.DB.prepare(s.sql))),
        )
        return json({ results: out.map((r) => r.results ?? []) })
      } catch (e) {
        return json({ error: e instanceof Error ? e.message : String(e) })
      }
    }
    if (url.pathname === '/schema/newer') {
      await ReaperD1.open(env.FRESH)
      await env.FRESH.prepare("INSERT INTO reaper_schema (version, description) VALUES (99, 'from the future')").run()
      const before = await dump(env.FRESH)
      let refusal = ''
      try {
        await ReaperD1.open(env.FRESH)
      } catch (e) {
        refusal = e instanceof SchemaError ? e.message : `not a SchemaError: ${String(e)}`
      }
      return json({ refusal, unchanged: (await dump(env.FRESH)) === before })
    }
    if (url.pathname === '/schema/upgrade') {
      const old = env.OLD
      for (const m of MIGRATIONS.filter((m) => m.version <= 4)) {
        await old.batch([
          ...m.statements.map((sql) => old.prepare(sql)),
          old.prepare('INSERT INTO reaper_schema (version, description) VALUES (?1, ?2)').bind(m.version, m.description),
        ])
      }
      await old
        .prepare(
          "INSERT INTO runs (run_id, thread_id, status, started_at, detached_since) VALUES ('run-ok', 't', 'running', 1, 5), ('run-far', 't', 'running', 1, 9007199254740993), ('run-done', 't', 'completed', 1, NULL)",
        )
        .run()
      await ReaperD1.open(old)
      const column = async (sql: string) => (await old.prepare(sql).all<Record<string, unknown>>()).results.map((r) => Object.values(r)[0])
      return json({
        versions: await column('SELECT version FROM reaper_schema ORDER BY version'),
        runs: await column('SELECT run_id FROM reaper_runs ORDER BY run_id'),
        indexes: await column("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'reaper_runs' AND sql IS NOT NULL ORDER BY name"),
        oldNames: await column("SELECT name FROM sqlite_master WHERE name NOT LIKE 'reaper\\_%' ESCAPE '\\' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND name NOT LIKE '\\_cf\\_%' ESCAPE '\\' ORDER BY name"),
      })
    }
    opened ??= ReaperD1.open(env.DB, { now: () => clock, pollMs: 10 })
    const store = await opened
    if (url.pathname === '/cases' || url.pathname === '/case') {
      const cases = contractCases({ store, tick: (ms) => void (clock += ms) })
      if (url.pathname === '/cases') return json(cases.map((c) => c.name))
      const c = cases.find((x) => x.name === url.searchParams.get('name'))
      if (!c) return json({ verdict: 'unknown case' }, 404)
      try {
        await c.run()
        return json({ verdict: 'passed' })
      } catch (e) {
        return json({ verdict: 'failed', message: e instanceof Error ? `${e.message}\n${e.stack}` : String(e) })
      }
    }
    if (url.pathname === '/corpus/write') {
      const entries = corpus(url.searchParams.get('tag') ?? 'ts')
      await writeTs({ store }, entries)
      return json({ entries, ids: ids(entries) })
    }
    if (url.pathname === '/corpus/read') {
      return json(await readTs({ store }, (await request.json()) as Array<Entry>))
    }
    return json({ error: 'no such route' }, 404)
  },
}
