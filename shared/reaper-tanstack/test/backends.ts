// The backends every suite runs on: a fresh SQLite file, and a fresh table on DynamoDB Local
// (REAPER_DYNAMODB_ENDPOINT, started by test.sh).
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { randomUUID } from 'node:crypto'
import { execFileSync, spawnSync } from 'node:child_process'
import { DynamoDBClient } from '@aws-sdk/client-dynamodb'
import { ReaperSqlite } from '../src/sqlite.js'
import { ReaperDynamo } from '../src/dynamodb.js'

export type Opened = ReaperSqlite | ReaperDynamo

export interface Backend {
  name: 'sqlite' | 'dynamodb'
  store: Opened
  /** The interop binary's backend argument for the same database. */
  spec: string
  close: () => void
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
  })
}

export async function openBackend(name: Backend['name'], now?: () => number): Promise<Backend> {
  if (name === 'sqlite') {
    const path = join(scratch('db'), 'reaper.db')
    const store = ReaperSqlite.open(path, now ? { now } : {})
    return { name, store, spec: `sqlite:${path}`, close: () => store.close() }
  }
  const table = `t-${randomUUID()}`
  const store = new ReaperDynamo({ table, client: dynamoClient(), pollMs: 20, ...(now ? { now } : {}) })
  await store.createTable()
  return { name, store, spec: `dynamodb:${table}`, close: () => undefined }
}

export const BACKENDS: Array<Backend['name']> = ['sqlite', 'dynamodb']

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
