// The backends every suite runs on: a fresh SQLite file, a fresh table on DynamoDB Local
// (REAPER_DYNAMODB_ENDPOINT) and a fresh database on a real PostgreSQL
// (REAPER_TEST_POSTGRES_URL), both started by test.sh.
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { randomUUID } from 'node:crypto'
import { execFileSync, spawnSync } from 'node:child_process'
import { DynamoDBClient } from '@aws-sdk/client-dynamodb'
import { ReaperSqlite } from '../src/sqlite.js'
import { ReaperDynamo } from '../src/dynamodb.js'
import { ReaperPostgres } from '../src/postgres.js'
import pg from 'pg'

export type Opened = ReaperSqlite | ReaperDynamo | ReaperPostgres

export interface Backend {
  name: 'sqlite' | 'dynamodb' | 'postgres'
  store: Opened
  /** The interop binary's backend argument for the same database (for PostgreSQL, its URL). */
  spec: string
  close: () => void | Promise<void>
}

/**
 * A new database on the test server (REAPER_TEST_POSTGRES_URL), so the store's default schema
 * `reaper` (the one `reaper sweep --db postgres://…` uses) is fresh for each suite. Its URL.
 */
export async function freshPostgresDatabase(): Promise<string> {
  const admin = process.env.REAPER_TEST_POSTGRES_URL
  if (!admin) throw new Error('REAPER_TEST_POSTGRES_URL is not set: run the tests through test.sh')
  const name = `tsapp_${randomUUID().replaceAll('-', '')}`
  const c = new pg.Client({ connectionString: admin })
  await c.connect()
  try {
    await c.query(`CREATE DATABASE ${name}`)
  } finally {
    await c.end()
  }
  // The database is the URL's path: postgres://user@host/<db>?params
  const [base, query] = admin.split('?', 2)
  return `${base.replace(/\/[^/]*$/, `/${name}`)}${query === undefined ? '' : `?${query}`}`
}

export function scratch(prefix: string): string {
  return mkdtempSync(join(tmpdir(), `reaper-tanstack-${prefix}-`))
}

export function dynamoClient(): DynamoDBClient {
  const endpoint = process.env.REAPER_DYNAMODB_ENDPOINT
  if (!endpoint) throw new Error('REAPER_DYNAMODB_ENDPOINT is not set: run the tests through test.sh')
  return new DynamoDBClient({
    endpoint,
    region: 'us-east-1',
    credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
    // A request that stalls (seen once under heavy load) times out and is retried, so a suite
    // fails or passes instead of hanging the test command.
    requestHandler: { requestTimeout: 30_000, connectionTimeout: 5_000 },
    maxAttempts: 5,
  })
}

export async function openBackend(name: Backend['name'], now?: () => number): Promise<Backend> {
  if (name === 'sqlite') {
    const path = join(scratch('db'), 'reaper.db')
    const store = ReaperSqlite.open(path, now ? { now } : {})
    return { name, store, spec: `sqlite:${path}`, close: () => store.close() }
  }
  if (name === 'postgres') {
    const url = await freshPostgresDatabase()
    const store = await ReaperPostgres.open({ connectionString: url, pollMs: 20, ...(now ? { now } : {}) })
    return { name, store, spec: url, close: () => store.close() }
  }
  const table = `t-${randomUUID()}`
  const store = new ReaperDynamo({ table, client: dynamoClient(), pollMs: 20, ...(now ? { now } : {}) })
  await store.createTable()
  return { name, store, spec: `dynamodb:${table}`, close: () => undefined }
}

export const BACKENDS: Array<Backend['name']> = ['sqlite', 'dynamodb', 'postgres']

/** The Rust interop binary (built by test.sh; REAPER_INTEROP overrides). */
export function interopBin(): string {
  return process.env.REAPER_INTEROP ?? join(process.env.CARGO_TARGET_DIR ?? 'target', 'debug', 'reaper-tanstack-interop')
}

export function interop(args: Array<string>, input?: unknown): string {
  const r = spawnSync(interopBin(), args, {
    input: input === undefined ? '' : JSON.stringify(input),
    encoding: 'utf8',
    maxBuffer: 256 * 1024 * 1024,
    env: { ...process.env, AWS_ENDPOINT_URL_DYNAMODB: process.env.REAPER_DYNAMODB_ENDPOINT ?? '', AWS_REGION: 'us-east-1', AWS_ACCESS_KEY_ID: 'local', AWS_SECRET_ACCESS_KEY: 'local' },
  })
  if (r.status !== 0) throw new Error(`interop ${args[0]} failed (${r.status}): ${r.stderr}`)
  return r.stdout
}

export { execFileSync }
