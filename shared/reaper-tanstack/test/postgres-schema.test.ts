// The PostgreSQL schema is the Rust store's own (shared/reaper-postgres/SCHEMA.md): the same
// statements, and a schema this package does not know (newer, another application's, damaged) is
// refused before anything is written.
import { it } from 'node:test'
import assert from 'node:assert/strict'
import pg from 'pg'
import { freshPostgresDatabase, interop } from './backends.js'
import { MIGRATIONS, RUST_POSTGRES_SCHEMA_VERSION, SHAPE } from '../src/postgres-schema.generated.js'
import { POSTGRES_SCHEMA_VERSION, ReaperPostgres } from '../src/postgres.js'
import { SchemaError } from '../src/types.js'

/** Everything in a schema, to prove a refused open wrote nothing. */
async function dump(url: string, schema = 'reaper'): Promise<unknown> {
  const c = new pg.Client({ connectionString: url })
  await c.connect()
  try {
    const tables = (
      await c.query(
        "SELECT table_name AS t FROM information_schema.tables WHERE table_schema = $1 ORDER BY table_name",
        [schema],
      )
    ).rows.map((r) => r.t as string)
    const out: Record<string, unknown> = {}
    for (const t of tables) out[t] = (await c.query(`SELECT * FROM "${schema}"."${t}" ORDER BY 1`)).rows
    const schemas = (await c.query('SELECT nspname FROM pg_namespace ORDER BY 1')).rows
    return { out, schemas }
  } finally {
    await c.end()
  }
}

async function exec(url: string, sql: string): Promise<void> {
  const c = new pg.Client({ connectionString: url })
  await c.connect()
  try {
    await c.query(sql)
  } finally {
    await c.end()
  }
}

it('the generated PostgreSQL migrations are exactly the Rust reaper_postgres::schema', () => {
  const rust = JSON.parse(interop(['schema-postgres'])) as { version: number; migrations: unknown; shape: unknown }
  assert.equal(rust.version, RUST_POSTGRES_SCHEMA_VERSION)
  assert.equal(POSTGRES_SCHEMA_VERSION, RUST_POSTGRES_SCHEMA_VERSION, 'postgres.ts follows the Rust schema version')
  assert.deepEqual(MIGRATIONS, rust.migrations, 'stale: run `node scripts/gen-schema.mjs <interop binary>`')
  assert.deepEqual(SHAPE, rust.shape, 'stale: run `node scripts/gen-schema.mjs <interop binary>`')
})

it('a PostgreSQL schema the Rust reaper created opens without a migration, and one this package created opens in Rust', async () => {
  const rustMade = await freshPostgresDatabase()
  interop(['write', rustMade], [])
  const s = await ReaperPostgres.open({ connectionString: rustMade })
  const versions = (await s.pool.query('SELECT version FROM reaper.schema_migrations ORDER BY version')).rows
  // Every version the Rust store applied, and no migration of this package's on top.
  assert.deepEqual(versions, MIGRATIONS.map((m) => ({ version: m.version })))
  await s.close()
  const tsMade = await freshPostgresDatabase()
  await (await ReaperPostgres.open({ connectionString: tsMade })).close()
  assert.equal(interop(['read', tsMade], { runIds: [] }).trim(), '[]')
})

it('a PostgreSQL schema version newer than the package is refused and nothing is written', async () => {
  const url = await freshPostgresDatabase()
  await (await ReaperPostgres.open({ connectionString: url })).close()
  await exec(url, "INSERT INTO reaper.schema_migrations (version, description) VALUES (99, 'from the future')")
  const before = await dump(url)
  await assert.rejects(ReaperPostgres.open({ connectionString: url }), (e: unknown) => {
    assert.ok(e instanceof SchemaError)
    assert.match(e.message, /reaper schema version 99, but this package writes version 3; nothing was written/)
    return true
  })
  assert.deepEqual(await dump(url), before)
})

it("another application's tables in the reaper's PostgreSQL schema are refused, named, and left alone", async () => {
  const url = await freshPostgresDatabase()
  await exec(url, 'CREATE SCHEMA reaper; CREATE TABLE reaper.invoices (id INTEGER)')
  const before = await dump(url)
  await assert.rejects(ReaperPostgres.open({ connectionString: url }), /another application's tables \(invoices\)/)
  assert.deepEqual(await dump(url), before)
})

it('a damaged PostgreSQL schema (a table of its version missing) is refused and left alone', async () => {
  const url = await freshPostgresDatabase()
  await (await ReaperPostgres.open({ connectionString: url })).close()
  await exec(url, 'DROP TABLE reaper.transcripts')
  const before = await dump(url)
  await assert.rejects(ReaperPostgres.open({ connectionString: url }), /is damaged: table transcripts is missing/)
  assert.deepEqual(await dump(url), before)
})
