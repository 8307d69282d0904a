// Every store on the reaper's PostgreSQL schema (shared/reaper-postgres/SCHEMA.md), through `pg`
// (pure JavaScript: installs from the registry alone). The same tables, statements and fences
// as the Rust `reaper-postgres` store, so the reaper (`reaper sweep --db postgres://…`) sweeps
// what the app writes here.
import pg from 'pg'
import type { StreamChunk, StreamDurability } from '@tanstack/ai'
import { isRunStatus, type RunRecord } from '@tanstack/ai'
import { MIGRATIONS, SHAPE } from './postgres-schema.generated.js'
import {
  SchemaError,
  SupersededError,
  isJsonObject,
  messageStoreOver,
  type DurabilityOptions,
  type EpochBump,
  type LeaseBackend,
  type MessageStore,
  type ReaperRunStore,
  type RunPatch,
  type SandboxInstanceRecord,
  type SandboxInstanceStore,
  type TerminalWrite,
  type Transcript,
  type TranscriptStore,
} from './types.js'
import { LeaseLockStore, type LeaseLockOptions } from './locks.js'

/** The PostgreSQL schema version (`schema_migrations`) this package reads and writes. */
export const POSTGRES_SCHEMA_VERSION = 3

/** The schema the Rust store keeps its tables in unless told otherwise. */
export const DEFAULT_POSTGRES_SCHEMA = 'reaper'

type Row = Record<string, unknown>
type Queryable = Pick<pg.Pool | pg.PoolClient, 'query'>

const RUN_COLUMNS =
  'run_id, thread_id, status, started_at, finished_at, error_message, error_code, usage::text AS usage, ' +
  'sandbox_key, detached_since, cancel_requested, driver_epoch'

/** The Rust store's fence: a write lands only while no later claim exists. */
const FENCE = '(driver_epoch IS NULL OR driver_epoch <= $2)'

export interface PostgresOptions {
  /** `postgres://user@host:port/db` (the URL `reaper sweep --db` takes). Ignored with `pool`. */
  connectionString?: string
  /** A pool of your own (its connection settings, TLS, size); not ended by `close()`. */
  pool?: pg.Pool
  /** The schema holding the reaper's tables. Default `reaper`, as the Rust store. */
  schema?: string
  /** Clock for log `last_append_at` stamps and transcript times. Default `Date.now`. */
  now?: () => number
  /** How often a tailing `read` looks for new chunks. Default 50 ms. */
  pollMs?: number
}

/** The reaper's PostgreSQL schema opened for a TanStack AI app. */
export class ReaperPostgres {
  readonly pool: pg.Pool
  readonly schema: string
  readonly runs: ReaperRunStore
  readonly transcripts: TranscriptStore
  readonly sandboxInstances: SandboxInstanceStore
  readonly leases: LeaseBackend
  private readonly prefix: string
  private readonly now: () => number
  private readonly pollMs: number
  private readonly ownsPool: boolean

  private constructor(pool: pg.Pool, ownsPool: boolean, schema: string, options: PostgresOptions) {
    this.pool = pool
    this.ownsPool = ownsPool
    this.schema = schema
    this.prefix = `"${schema}".`
    this.now = options.now ?? Date.now
    this.pollMs = options.pollMs ?? 50
    this.runs = this.runStore()
    this.transcripts = this.transcriptStore()
    this.sandboxInstances = this.instanceStore()
    this.leases = this.leaseBackend()
  }

  /**
   * Connects and creates or migrates the reaper's schema exactly as the Rust store does (the
   * same statements, under the same advisory lock). A schema that is another application's,
   * damaged, or at a version this package does not know is refused with nothing written.
   */
  static async open(options: PostgresOptions): Promise<ReaperPostgres> {
    const schema = options.schema ?? DEFAULT_POSTGRES_SCHEMA
    if (!/^[a-z_][a-z0-9_]{0,62}$/.test(schema)) {
      throw new SchemaError(
        `schema name ${JSON.stringify(schema)} is not a plain identifier: use lowercase letters, digits ` +
          'and underscores (at most 63), starting with a letter or underscore',
      )
    }
    if (!options.pool && !options.connectionString) {
      throw new TypeError('ReaperPostgres.open needs `connectionString` (postgres://…) or `pool`')
    }
    const pool = options.pool ?? new pg.Pool({ connectionString: options.connectionString, max: 4 })
    const store = new ReaperPostgres(pool, !options.pool, schema, options)
    try {
      await store.migrate()
    } catch (e) {
      if (!options.pool) await pool.end().catch(() => undefined)
      throw e
    }
    return store
  }

  /** Ends the pool this store made (a pool passed in is left to its owner). */
  async close(): Promise<void> {
    if (this.ownsPool) await this.pool.end()
  }

  /** The framework's `LockStore` on the reaper's `leases` table. */
  locks(options: LeaseLockOptions = {}): LeaseLockStore {
    return new LeaseLockStore(this.leases, { now: this.now, ...options })
  }

  /** The framework's `MessageStore`; `saveThread` writes into the transcript of `runFor(threadId)`. */
  messages(runFor: (threadId: string) => string | Promise<string>): MessageStore {
    return messageStoreOver(this.transcripts, runFor, this.now)
  }

  /** A statement with its tables in this store's schema (`@.runs` → `"reaper".runs`). */
  private sql(text: string): string {
    return text.replaceAll('@.', this.prefix)
  }

  private async q(text: string, values: Array<unknown> = [], on: Queryable = this.pool): Promise<Array<Row>> {
    return (await on.query(this.sql(text), values)).rows as Array<Row>
  }

  private async tx<T>(fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
    const c = await this.pool.connect()
    try {
      await c.query('BEGIN')
      const out = await fn(c)
      await c.query('COMMIT')
      return out
    } catch (e) {
      await c.query('ROLLBACK').catch(() => undefined)
      throw e
    } finally {
      c.release()
    }
  }

  /** Locks the run row against a claim until the transaction ends; throws when `fence` is passed. */
  private async fenceHolds(c: pg.PoolClient, runId: string, fence: number | undefined): Promise<void> {
    if (fence === undefined) return
    const row = (await this.q('SELECT driver_epoch FROM @.runs WHERE run_id = $1 FOR SHARE', [runId], c))[0]
    const observed = row ? int(row.driver_epoch) : undefined
    if (observed !== undefined && observed > fence) throw new SupersededError(runId, fence)
  }

  private runStore(): ReaperRunStore {
    const runs = async (text: string, values: Array<unknown>) => (await this.q(text, values)).map(toRecord)
    const get = async (runId: string) =>
      (await runs(`SELECT ${RUN_COLUMNS} FROM @.runs WHERE run_id = $1`, [runId]))[0] ?? null
    return {
      createOrResume: async (input) => {
        await this.q(
          'INSERT INTO @.runs (run_id, thread_id, status, started_at) VALUES ($1, $2, $3, $4) ' +
            'ON CONFLICT (run_id) DO NOTHING',
          [input.runId, input.threadId, input.status ?? 'running', input.startedAt],
        )
        return (await get(input.runId))!
      },
      update: async (runId, patch) => {
        const { set, values } = patchColumns(patch, 2)
        if (set.length === 0) return
        // An unknown run matches no row: a no-op, as the contract says.
        await this.q(`UPDATE @.runs SET ${set.join(', ')} WHERE run_id = $1`, [runId, ...values])
      },
      updateFenced: async (runId, held, patch) => {
        const { set, values } = patchColumns(patch, 3)
        const text =
          set.length === 0
            ? `SELECT run_id FROM @.runs WHERE run_id = $1 AND ${FENCE}`
            : `UPDATE @.runs SET ${set.join(', ')} WHERE run_id = $1 AND ${FENCE} RETURNING run_id`
        if ((await this.q(text, [runId, held, ...values])).length > 0) return 'written'
        return (await get(runId)) ? 'superseded' : 'unknown'
      },
      get,
      findActiveRun: async (threadId) =>
        (
          await runs(
            `SELECT ${RUN_COLUMNS} FROM @.runs WHERE thread_id = $1 AND status = 'running' ` +
              'ORDER BY started_at DESC, inserted_seq DESC LIMIT 1',
            [threadId],
          )
        )[0] ?? null,
      listByThread: async (threadId) =>
        runs(`SELECT ${RUN_COLUMNS} FROM @.runs WHERE thread_id = $1 ORDER BY started_at, inserted_seq`, [threadId]),
      listReclaimable: async ({ now, ttlMs }) =>
        runs(
          `SELECT ${RUN_COLUMNS} FROM @.runs WHERE status = 'running' AND detached_since IS NOT NULL ` +
            'AND detached_since <= $1 ORDER BY detached_since, run_id',
          [now - ttlMs],
        ),
      bumpEpoch: async (runId): Promise<EpochBump> => {
        // The reaper's claim statement: refuses unknown and terminal runs by matching no row.
        const row = (
          await runs(
            'UPDATE @.runs SET driver_epoch = COALESCE(driver_epoch, 0) + 1 ' +
              `WHERE run_id = $1 AND status IN ('running', 'interrupted') RETURNING ${RUN_COLUMNS}`,
            [runId],
          )
        )[0]
        if (row) return { claimed: true, epoch: row.driverEpoch!, record: row }
        return { claimed: false, reason: (await get(runId)) ? 'terminal' : 'unknown' }
      },
      writeTerminal: async (runId, heldEpoch, write: TerminalWrite) =>
        (
          await this.q(
            'UPDATE @.runs SET status = $3, finished_at = $4, error_message = $5, error_code = $6 ' +
              `WHERE run_id = $1 AND ${FENCE} RETURNING run_id`,
            [runId, heldEpoch, write.status, write.finishedAt, write.error?.message ?? null, write.error?.code ?? null],
          )
        ).length > 0,
    }
  }

  /** The run's delivery log as the framework's `StreamDurability`; offsets are `seq` as text. */
  durability(runId: string, options: DurabilityOptions = {}): StreamDurability {
    const offset = options.offset ?? null
    const fence = options.fence
    const entries = async (from: number, limit: number) =>
      (
        await this.q('SELECT seq, chunk::text AS chunk FROM @.log_entries WHERE run_id = $1 AND seq >= $2 ORDER BY seq LIMIT $3', [
          runId,
          from,
          limit,
        ])
      ).map((r) => ({ offset: String(int(r.seq)), chunk: JSON.parse(r.chunk as string) as StreamChunk }))
    const meta = async () =>
      (await this.q('SELECT closed, events_pruned_at FROM @.logs WHERE run_id = $1', [runId]))[0] as
        | { closed: boolean; events_pruned_at: unknown }
        | undefined
    const pollMs = this.pollMs
    return {
      resumeFrom: () => offset,
      append: async (chunks) => {
        for (const c of chunks) {
          if (!isJsonObject(c) || typeof (c as { type?: unknown }).type !== 'string') {
            throw new TypeError('a delivery-log chunk must be an object with a string `type`')
          }
        }
        const encoded = chunks.map((c) => JSON.stringify(c))
        return this.tx(async (c) => {
          // The run row stays locked against a claim until the chunks are in (the Rust append).
          await this.fenceHolds(c, runId, fence)
          const log = (
            await this.q(
              'INSERT INTO @.logs (run_id) VALUES ($1) ON CONFLICT (run_id) DO UPDATE SET run_id = excluded.run_id ' +
                'RETURNING closed, next_seq',
              [runId],
              c,
            )
          )[0]
          if (log.closed) {
            throw new Error(`the delivery log of run ${JSON.stringify(runId)} is closed; nothing was appended`)
          }
          const first = int(log.next_seq)!
          if (encoded.length > 0) {
            await this.q(
              'INSERT INTO @.log_entries (run_id, seq, chunk) SELECT $1, $2 + ord - 1, chunk::json ' +
                'FROM unnest($3::text[]) WITH ORDINALITY AS c(chunk, ord)',
              [runId, first, encoded],
              c,
            )
            await this.q('UPDATE @.logs SET next_seq = $2, last_append_at = $3 WHERE run_id = $1', [
              runId,
              first + encoded.length,
              this.now(),
            ], c)
          }
          return encoded.map((_, i) => String(first + i))
        })
      },
      read: (after, signal) =>
        (async function* () {
          let next = Number(after) + 1
          if (!Number.isInteger(next) || next < 0) {
            throw new TypeError(`offset ${JSON.stringify(after)} was not minted by this log`)
          }
          for (;;) {
            const page = await entries(next, 500)
            for (const e of page) {
              next = Number(e.offset) + 1
              yield e
            }
            if (page.length > 0) continue
            const m = await meta()
            if (m && (m.closed || m.events_pruned_at !== null)) {
              // A last look: chunks appended just before the close are not missed.
              if ((await entries(next, 1)).length === 0) return
              continue
            }
            if (signal?.aborted) return
            await new Promise<void>((resolve) => {
              const t = setTimeout(resolve, pollMs)
              signal?.addEventListener('abort', () => {
                clearTimeout(t)
                resolve()
              }, { once: true })
            })
          }
        })(),
      close: async () => {
        const close = 'INSERT INTO @.logs (run_id, closed) VALUES ($1, true) ON CONFLICT (run_id) DO UPDATE SET closed = true'
        if (fence === undefined) {
          await this.q(close, [runId])
          return
        }
        // The Rust fenced close: the epoch check and the close in one transaction.
        await this.tx(async (c) => {
          await this.fenceHolds(c, runId, fence)
          await this.q(close, [runId], c)
        })
      },
      snapshot: async () => {
        const m = await meta()
        if (!m || m.events_pruned_at !== null) return []
        return entries(0, Number.MAX_SAFE_INTEGER)
      },
    }
  }

  private transcriptStore(): TranscriptStore {
    const toTranscript = (r: Row): Transcript => {
      const t: Transcript = {
        runId: r.run_id as string,
        threadId: r.thread_id as string,
        messages: JSON.parse(r.body as string),
        savedAt: int(r.saved_at)!,
      }
      const exit = int(r.exit_code)
      if (exit !== undefined) t.exitCode = exit
      return t
    }
    const columns = 'run_id, thread_id, body::text AS body, exit_code, saved_at'
    const save =
      'INSERT INTO @.transcripts (run_id, thread_id, body, exit_code, saved_at) VALUES ($1, $2, $3::text::json, $4, $5) ' +
      'ON CONFLICT (run_id) DO UPDATE SET thread_id = excluded.thread_id, body = excluded.body, ' +
      'exit_code = excluded.exit_code, saved_at = excluded.saved_at'
    return {
      get: async (runId) => {
        const r = (await this.q(`SELECT ${columns} FROM @.transcripts WHERE run_id = $1`, [runId]))[0]
        return r ? toTranscript(r) : null
      },
      save: async (t, options = {}) => {
        const row = [
          t.runId,
          t.threadId,
          JSON.stringify(t.messages.map((m) => ({ role: m.role, content: m.content }))),
          t.exitCode ?? null,
          t.savedAt,
        ]
        if (options.fence === undefined) {
          await this.q(save, row)
          return true
        }
        // The Rust fenced save: the epoch check and the save in one transaction.
        try {
          await this.tx(async (c) => {
            await this.fenceHolds(c, t.runId, options.fence)
            await this.q(save, row, c)
          })
          return true
        } catch (e) {
          if (e instanceof SupersededError) return false
          throw e
        }
      },
      listByThread: async (threadId) =>
        (await this.q(`SELECT ${columns} FROM @.transcripts WHERE thread_id = $1 ORDER BY saved_at, run_id`, [threadId])).map(
          toTranscript,
        ),
    }
  }

  private instanceStore(): SandboxInstanceStore {
    return {
      get: async (key) => {
        const r = (
          await this.q(
            'SELECT key, provider, provider_sandbox_id, latest_snapshot_id, thread_id, latest_run_id, updated_at ' +
              'FROM @.sandbox_instances WHERE key = $1',
            [key],
          )
        )[0]
        if (!r) return null
        const rec: SandboxInstanceRecord = {
          key: r.key as string,
          provider: r.provider as string,
          providerSandboxId: r.provider_sandbox_id as string,
          threadId: r.thread_id as string,
          updatedAt: int(r.updated_at)!,
        }
        if (r.latest_snapshot_id !== null) rec.latestSnapshotId = r.latest_snapshot_id as string
        if (r.latest_run_id !== null) rec.latestRunId = r.latest_run_id as string
        return rec
      },
      upsert: async (rec) => {
        // A full replace: an omitted optional is written NULL, never kept from the old row.
        await this.q(
          'INSERT INTO @.sandbox_instances (key, provider, provider_sandbox_id, latest_snapshot_id, thread_id, ' +
            'latest_run_id, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7) ' +
            'ON CONFLICT (key) DO UPDATE SET provider = excluded.provider, ' +
            'provider_sandbox_id = excluded.provider_sandbox_id, latest_snapshot_id = excluded.latest_snapshot_id, ' +
            'thread_id = excluded.thread_id, latest_run_id = excluded.latest_run_id, updated_at = excluded.updated_at',
          [
            rec.key,
            rec.provider,
            rec.providerSandboxId,
            rec.latestSnapshotId ?? null,
            rec.threadId,
            rec.latestRunId ?? null,
            rec.updatedAt,
          ],
        )
      },
      delete: async (key) => {
        await this.q('DELETE FROM @.sandbox_instances WHERE key = $1', [key])
      },
    }
  }

  private leaseBackend(): LeaseBackend {
    return {
      // The Rust grant: one conditional upsert with a fresh server-side random token.
      acquire: async (key, owner, now, ttlMs) => {
        const expiresAt = now + ttlMs
        const row = (
          await this.q(
            'INSERT INTO @.leases AS l (key, owner, token, expires_at) VALUES ($1, $2, gen_random_uuid()::text, $3) ' +
              'ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, token = excluded.token, ' +
              'expires_at = excluded.expires_at WHERE l.expires_at <= $4 RETURNING token',
            [key, owner, expiresAt, now],
          )
        )[0]
        return row ? { token: row.token as string, expiresAt } : null
      },
      renew: async (key, owner, token, now, ttlMs) =>
        (
          await this.q('UPDATE @.leases SET expires_at = $4 WHERE key = $1 AND owner = $2 AND token = $3 RETURNING key', [
            key,
            owner,
            token,
            now + ttlMs,
          ])
        ).length > 0,
      release: async (key, owner, token) => {
        await this.q('DELETE FROM @.leases WHERE key = $1 AND owner = $2 AND token = $3', [key, owner, token])
      },
    }
  }

  /** The target without credentials, for messages. */
  private target(): string {
    const o = this.pool.options as { host?: string; database?: string; connectionString?: string }
    if (o.connectionString) {
      try {
        const u = new URL(o.connectionString)
        return `postgres://${decodeURIComponent(u.host)}${u.pathname}`
      } catch {
        return 'the database'
      }
    }
    return `postgres://${o.host ?? ''}/${o.database ?? ''}`
  }

  /** Whose schema this is, with reads only, as `reaper_postgres::PostgresStore::inspect`. */
  private async inspect(on: Queryable): Promise<
    { kind: 'empty' } | { kind: 'reaper'; version: number } | { kind: 'foreign'; tables: Array<string> } | { kind: 'damaged'; why: string }
  > {
    const rows = await this.q(
      'SELECT table_name::text AS t, column_name::text AS c FROM information_schema.columns ' +
        'WHERE table_schema = $1 ORDER BY table_name, ordinal_position',
      [this.schema],
      on,
    )
    const tables = new Map<string, Array<string>>()
    for (const r of rows) {
      const t = r.t as string
      if (!tables.has(t)) tables.set(t, [])
      tables.get(t)!.push(r.c as string)
    }
    if (tables.size === 0) return { kind: 'empty' }
    if (!tables.has('schema_migrations')) return { kind: 'foreign', tables: [...tables.keys()] }
    const v = (await this.q('SELECT MAX(version) AS v FROM @.schema_migrations', [], on))[0].v as number | null
    if (v === null) return { kind: 'damaged', why: 'schema_migrations holds no version row' }
    if (v < 1) return { kind: 'damaged', why: `schema_migrations records version ${v}, which no reaper wrote` }
    if (v > POSTGRES_SCHEMA_VERSION) return { kind: 'reaper', version: v }
    for (const [table, expected] of SHAPE) {
      const created = MIGRATIONS.some(
        (m) => m.version <= v && m.statements.some((s) => s.startsWith(`CREATE TABLE @.${table} (`)),
      )
      if (!created) continue
      const found = tables.get(table) ?? []
      if (found.length === 0) return { kind: 'damaged', why: `table ${table} is missing` }
      const missing = expected.filter((c) => !found.includes(c))
      if (missing.length > 0) {
        return { kind: 'damaged', why: `table ${table} lacks column${missing.length === 1 ? '' : 's'} ${missing.join(', ')}` }
      }
    }
    return { kind: 'reaper', version: v }
  }

  private refuse(found: Awaited<ReturnType<ReaperPostgres['inspect']>>): never {
    const where = `schema ${JSON.stringify(this.schema)} of ${this.target()}`
    switch (found.kind) {
      case 'foreign':
        throw new SchemaError(
          `${where} holds another application's tables (${found.tables.join(', ')}) and no schema_migrations; ` +
            'nothing was written. Give the reaper a schema of its own (option `schema`).',
        )
      case 'damaged':
        throw new SchemaError(
          `${where} is damaged: ${found.why}. Nothing was written; restore it from a backup or drop the schema ` +
            'and let the reaper recreate it.',
        )
      case 'reaper':
        throw new SchemaError(
          `${where} has reaper schema version ${found.version}, but this package writes version ` +
            `${POSTGRES_SCHEMA_VERSION}; nothing was written. Upgrade @reaper/tanstack to the release that ` +
            'matches your reaper.',
        )
      default:
        throw new SchemaError(`${where} cannot be used`)
    }
  }

  private async migrate(): Promise<void> {
    // Checked before any write, so a refused schema is left as it was.
    const found = await this.inspect(this.pool)
    if (found.kind === 'reaper' && found.version === POSTGRES_SCHEMA_VERSION) return
    if (found.kind !== 'empty' && !(found.kind === 'reaper' && found.version < POSTGRES_SCHEMA_VERSION)) {
      this.refuse(found)
    }
    await this.tx(async (c) => {
      // The Rust store's lock (hashtext of the quoted prefix): a reaper and this package opening a
      // new database together migrate it once.
      await c.query('SELECT pg_advisory_xact_lock(hashtext($1))', [this.prefix])
      await c.query(`CREATE SCHEMA IF NOT EXISTS "${this.schema}"`)
      const now = await this.inspect(c)
      let from = 0
      if (now.kind === 'reaper' && now.version <= POSTGRES_SCHEMA_VERSION) from = now.version
      else if (now.kind !== 'empty') this.refuse(now)
      for (const m of MIGRATIONS) {
        if (m.version <= from) continue
        for (const s of m.statements) await c.query(this.sql(s))
        await this.q('INSERT INTO @.schema_migrations (version, description) VALUES ($1, $2)', [m.version, m.description], c)
      }
    })
  }
}

/** A BIGINT (which `pg` hands over as text) as a number; `undefined` for NULL. */
function int(v: unknown): number | undefined {
  if (v === null || v === undefined) return undefined
  const n = Number(v)
  if (!Number.isSafeInteger(n)) {
    throw new Error(`${String(v)} is past 2^53 - 1, which JavaScript cannot read exactly; repair the row`)
  }
  return n
}

/** A patch's columns from `$first`: a key present with `undefined` clears its column, an absent key keeps it. */
function patchColumns(patch: RunPatch, first: number): { set: Array<string>; values: Array<unknown> } {
  const set: Array<string> = []
  const values: Array<unknown> = []
  const col = (name: string, v: unknown) => {
    values.push(v)
    set.push(`${name} = $${first + values.length - 1}`)
  }
  const has = (k: keyof RunPatch) => Object.hasOwn(patch, k)
  if (has('status') && patch.status !== undefined) col('status', patch.status)
  if (has('finishedAt')) col('finished_at', patch.finishedAt ?? null)
  if (has('error')) {
    col('error_message', patch.error?.message ?? null)
    col('error_code', patch.error?.code ?? null)
  }
  if (has('usage')) col('usage', patch.usage === undefined ? null : JSON.stringify(patch.usage))
  if (has('sandboxKey')) col('sandbox_key', patch.sandboxKey ?? null)
  if (has('detachedSince')) col('detached_since', patch.detachedSince ?? null)
  if (has('cancelRequested')) col('cancel_requested', patch.cancelRequested ?? null)
  if (has('driverEpoch')) col('driver_epoch', patch.driverEpoch ?? null)
  return { set, values }
}

function toRecord(r: Row): RunRecord {
  if (!isRunStatus(r.status)) {
    throw new Error(
      `run ${JSON.stringify(r.run_id)} has status ${JSON.stringify(r.status)}, which is no run status; ` +
        'repair the row (expected running, interrupted, completed, failed or aborted)',
    )
  }
  const rec: RunRecord = {
    runId: r.run_id as string,
    threadId: r.thread_id as string,
    status: r.status,
    startedAt: int(r.started_at)!,
  }
  // Absent, never null/false/0, for a field that was never set.
  const finished = int(r.finished_at)
  if (finished !== undefined) rec.finishedAt = finished
  if (r.error_message !== null) {
    rec.error = { message: r.error_message as string }
    if (r.error_code !== null) rec.error.code = r.error_code as string
  }
  if (r.usage !== null) rec.usage = JSON.parse(r.usage as string)
  if (r.sandbox_key !== null) rec.sandboxKey = r.sandbox_key as string
  const detached = int(r.detached_since)
  if (detached !== undefined) rec.detachedSince = detached
  if (r.cancel_requested !== null) rec.cancelRequested = r.cancel_requested as boolean
  const epoch = int(r.driver_epoch)
  if (epoch !== undefined) rec.driverEpoch = epoch
  return rec
}
