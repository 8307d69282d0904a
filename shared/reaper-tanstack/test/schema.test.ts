// The SQLite schema is the reaper's own: the same statements, and a version this package does
// not know is refused before anything is written.
import { it } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { DatabaseSync } from 'node:sqlite'
import { interop, scratch } from './backends.js'
import { BASELINE, MIGRATIONS, RUST_SCHEMA_VERSION } from '../src/schema.generated.js'
import { pendingMigrations } from '../src/sql-schema.js'
import { ReaperSqlite } from '../src/sqlite.js'
import { SCHEMA_VERSION, SchemaError } from '../src/types.js'

it('the generated migrations are exactly the Rust reaper_sql::MIGRATIONS', () => {
  const rust = JSON.parse(interop(['schema'])) as { version: number; migrations: unknown; baseline: unknown }
  assert.equal(rust.version, RUST_SCHEMA_VERSION)
  assert.equal(SCHEMA_VERSION, RUST_SCHEMA_VERSION, 'types.ts SCHEMA_VERSION follows the Rust schema')
  assert.deepEqual(MIGRATIONS, rust.migrations, 'stale: run `node scripts/gen-schema.mjs <interop binary>`')
  assert.deepEqual(BASELINE, rust.baseline, 'stale: run `node scripts/gen-schema.mjs <interop binary>`')
})

it('a database the Rust reaper created opens without a migration, and one this package created opens in Rust', () => {
  const dir = scratch('schema')
  const rustMade = join(dir, 'rust.db')
  interop(['write', `sqlite:${rustMade}`], [])
  const s = ReaperSqlite.open(rustMade)
  const versions = s.db.prepare('SELECT version FROM reaper_schema ORDER BY version').all().map((r) => r.version)
  assert.deepEqual(versions, pendingMigrations(0).map((m) => m.version))
  s.close()
  const tsMade = join(dir, 'ts.db')
  ReaperSqlite.open(tsMade).close()
  assert.equal(interop(['read', `sqlite:${tsMade}`], { runIds: [] }).trim(), '[]')
})

it('a schema version newer than the package is refused and the file is left byte-for-byte as it was', () => {
  const path = join(scratch('schema'), 'newer.db')
  ReaperSqlite.open(path).close()
  const db = new DatabaseSync(path)
  db.prepare("INSERT INTO reaper_schema (version, description) VALUES (99, 'from the future')").run()
  db.close()
  const before = readFileSync(path)
  assert.throws(() => ReaperSqlite.open(path), (e: unknown) => {
    assert.ok(e instanceof SchemaError)
    assert.match(e.message, new RegExp(`schema version 99, but this package writes version ${SCHEMA_VERSION}; nothing was written`))
    return true
  })
  assert.deepEqual(readFileSync(path), before)
})

it("another application's SQLite file is refused, naming its tables and how to add the reaper's", () => {
  const path = join(scratch('schema'), 'foreign.db')
  const db = new DatabaseSync(path)
  db.exec('CREATE TABLE invoices (id INTEGER)')
  db.close()
  const before = readFileSync(path)
  assert.throws(
    () => ReaperSqlite.open(path),
    /another application's SQLite database \(tables: invoices\) with no reaper tables yet; nothing was written\. Pass \{ besideAppTables: true \}/,
  )
  assert.deepEqual(readFileSync(path), before)
})

it("besideAppTables adds the reaper's tables beside an application's and keeps its rows", () => {
  const path = join(scratch('schema'), 'app.db')
  const db = new DatabaseSync(path)
  db.exec("CREATE TABLE invoices (id INTEGER, what TEXT); INSERT INTO invoices VALUES (1, 'tea')")
  db.close()
  ReaperSqlite.open(path, { besideAppTables: true }).close()
  // From now on a plain open (and the Rust reaper) takes it as a reaper database.
  const store = ReaperSqlite.open(path)
  assert.deepEqual(
    store.db.prepare('SELECT what FROM invoices').all().map((r) => (r as { what: string }).what),
    ['tea'],
  )
  store.close()
})

it("a table named like the reaper's without its schema is refused even beside app tables", () => {
  const path = join(scratch('schema'), 'clash.db')
  const db = new DatabaseSync(path)
  db.exec('CREATE TABLE invoices (id INTEGER); CREATE TABLE reaper_runs (id INTEGER)')
  db.close()
  const before = readFileSync(path)
  assert.throws(
    () => ReaperSqlite.open(path, { besideAppTables: true }),
    /holds tables named like the reaper's \(reaper_runs\) but no reaper_schema/,
  )
  assert.deepEqual(readFileSync(path), before)
})

it("besideAppTables works beside an application's own runs, logs and transcripts, and Rust reads it", () => {
  const path = join(scratch('schema'), 'app-runs.db')
  const db = new DatabaseSync(path)
  db.exec(
    'CREATE TABLE runs (id INTEGER PRIMARY KEY, what TEXT); CREATE TABLE logs (line TEXT); ' +
      'CREATE TABLE transcripts (id INTEGER, said TEXT); CREATE INDEX runs_by_thread ON runs (what); ' +
      "INSERT INTO runs (what) VALUES ('nightly import'); INSERT INTO logs VALUES ('app log'); " +
      "INSERT INTO transcripts VALUES (1, 'hello')",
  )
  db.close()
  ReaperSqlite.open(path, { besideAppTables: true }).close()
  const store = ReaperSqlite.open(path)
  const rows = (sql: string) => store.db.prepare(sql).all().map((r) => Object.values(r as object)[0])
  assert.deepEqual(rows('SELECT what FROM runs'), ['nightly import'])
  assert.deepEqual(rows('SELECT line FROM logs'), ['app log'])
  assert.deepEqual(rows('SELECT said FROM transcripts'), ['hello'])
  assert.deepEqual(rows('SELECT COUNT(*) FROM reaper_runs'), [0])
  store.close()
  assert.equal(interop(['read', `sqlite:${path}`], { runIds: [] }).trim(), '[]')
})

/** The index's WHERE (reaper_sql::runs::UNLISTABLE_WHERE), read from the generated migration. */
const UNLISTABLE_WHERE = (MIGRATIONS.find((m) => m.version === 5)?.statements[0] ?? '').split(' WHERE ')[1]

it('a database at schema version 4 upgrades to the unlistable-rows index with every row kept', () => {
  const path = join(scratch('schema'), 'v4.db')
  const db = new DatabaseSync(path)
  for (const m of MIGRATIONS.filter((m) => m.version <= 4)) {
    for (const sql of m.statements) db.exec(sql)
    db.prepare('INSERT INTO reaper_schema (version, description) VALUES (?, ?)').run(m.version, m.description)
  }
  db.exec(
    "INSERT INTO runs (run_id, thread_id, status, started_at, detached_since) VALUES ('run-ok', 't', 'running', 1, 5), ('run-far', 't', 'running', 1, 9007199254740993)",
  )
  db.close()
  const s = ReaperSqlite.open(path)
  const versions = s.db.prepare('SELECT version FROM reaper_schema ORDER BY version').all().map((r) => r.version)
  assert.deepEqual(versions, MIGRATIONS.map((m) => m.version))
  const runs = s.db.prepare('SELECT run_id FROM reaper_runs ORDER BY run_id').all().map((r) => r.run_id)
  assert.deepEqual(runs, ['run-far', 'run-ok'])
  const indexed = s.db
    .prepare('SELECT run_id FROM reaper_runs INDEXED BY reaper_runs_unlistable WHERE ' + UNLISTABLE_WHERE)
    .all()
  assert.deepEqual(indexed.map((r) => r.run_id), ['run-far'], 'the new index holds the rows already there')
  s.close()
})
