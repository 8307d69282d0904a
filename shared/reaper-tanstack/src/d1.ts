// Every store on a Cloudflare D1 binding, in the reaper's SQLite schema (the one the Rust
// `reaper-d1` store, running in the reaper's Worker, reads). D1 has no BEGIN: as in the Rust
// store, every read-modify-write is one statement or one batch (D1's only transaction) with its
// conditions (the epoch fence, a closed log, an unexpired lease) in the SQL itself.
import type { StreamChunk, StreamDurability } from '@tanstack/ai'
import { pendingMigrations, REAPER_TABLES } from './sql-schema.js'
import {
  SCHEMA_VERSION,
  SchemaError,
  SupersededError,
  isJsonObject,
  messageStoreOver,
  type DurabilityOptions,
  type EpochBump,
  type LeaseBackend,
  type MessageStore,
  type ReaperRunStore,
  type SandboxInstanceRecord,
  type SandboxInstanceStore,
  type TerminalWrite,
  type Transcript,
  type TranscriptStore,
} from './types.js'
import { LeaseLockStore, type LeaseLockOptions } from './locks.js'
import { patchColumns, toRecord, type SqlValue } from './sqlite-rows.js'

/** The part of Cloudflare's `D1Database` binding this package uses (typed here, no workers-types needed). */
export interface D1Database {
  prepare: (query: string) => D1PreparedStatement
  batch: <T = unknown>(statements: Array<D1PreparedStatement>) => Promise<Array<D1Result<T>>>
}
export interface D1PreparedStatement {
  bind: (...values: Array<unknown>) => D1PreparedStatement
  first: <T = unknown>() => Promise<T | null>
  all: <T = unknown>() => Promise<D1Result<T>>
  run: <T = unknown>() => Promise<D1Result<T>>
}
export interface D1Result<T = unknown> {
  results: Array<T>
  meta: { changes?: number } & Record<string, unknown>
}

type Row = Record<string, unknown>

const RUN_COLUMNS =
  'run_id, thread_id, status, started_at, finished_at, error_message, error_code, usage, ' +
  'sandbox_key, detached_since, cancel_requested, driver_epoch'

/** The Rust store's fence for a statement whose `?1` is the run and `?2` the held epoch. */
const FENCE_OK = '(?2 IS NULL OR NOT EXISTS (SELECT 1 FROM reaper_runs WHERE run_id = ?1 AND driver_epoch > ?2))'

export interface D1Options {
  /** Clock for log `last_append_at` stamps and transcript times. Default `Date.now`. */
  now?: () => number
  /** How often a tailing `read` looks for new chunks. Default 100 ms. */
  pollMs?: number
}

/** The reaper's D1 database opened for a TanStack AI app running in a Worker. */
export class ReaperD1 {
  readonly db: D1Database
  readonly runs: ReaperRunStore
  readonly transcripts: TranscriptStore
  readonly sandboxInstances: SandboxInstanceStore
  readonly leases: LeaseBackend
  private readonly now: () => number
  private readonly pollMs: number

  private constructor(db: D1Database, options: D1Options) {
    this.db = db
    this.now = options.now ?? Date.now
    this.pollMs = options.pollMs ?? 100
    this.runs = this.runStore()
    this.transcripts = this.transcriptStore()
    this.sandboxInstances = this.instanceStore()
    this.leases = this.leaseBackend()
  }

  /**
   * Opens the binding, creating or migrating the reaper's tables with the reaper's own
   * statements (one batch per open). A database holding other tables, a damaged one or one at a
   * schema version this package does not know is refused with nothing written.
   */
  static async open(db: D1Database, options: D1Options = {}): Promise<ReaperD1> {
    const store = new ReaperD1(db, options)
    await store.migrate()
    return store
  }

  close(): void {}

  /** The framework's `LockStore` on the reaper's `reaper_leases` table. */
  locks(options: LeaseLockOptions = {}): LeaseLockStore {
    return new LeaseLockStore(this.leases, { now: this.now, ...options })
  }

  /** The framework's `MessageStore`; `saveThread` writes into the transcript of `runFor(threadId)`. */
  messages(runFor: (threadId: string) => string | Promise<string>): MessageStore {
    return messageStoreOver(this.transcripts, runFor, this.now)
  }

  private st(sql: string, ...values: Array<SqlValue>): D1PreparedStatement {
    const s = this.db.prepare(sql)
    return values.length > 0 ? s.bind(...values) : s
  }

  private async all(sql: string, ...values: Array<SqlValue>): Promise<Array<Row>> {
    return (await this.st(sql, ...values).all<Row>()).results
  }

  private runStore(): ReaperRunStore {
    const get = async (runId: string) => {
      const r = await this.st(`SELECT ${RUN_COLUMNS} FROM reaper_runs WHERE run_id = ?1`, runId).first<Row>()
      return r ? toRecord(r) : null
    }
    return {
      createOrResume: async (input) => {
        // Insert-if-absent and the read in one batch: the row read is the one that is stored.
        const [, read] = await this.db.batch<Row>([
          this.st(
            'INSERT INTO reaper_runs (run_id, thread_id, status, started_at) VALUES (?1, ?2, ?3, ?4) ON CONFLICT (run_id) DO NOTHING',
            input.runId,
            input.threadId,
            input.status ?? 'running',
            input.startedAt,
          ),
          this.st(`SELECT ${RUN_COLUMNS} FROM reaper_runs WHERE run_id = ?1`, input.runId),
        ])
        return toRecord(read.results[0])
      },
      update: async (runId, patch) => {
        const { set, values } = patchColumns(patch)
        if (set.length === 0) return
        // An unknown run matches no row: a no-op, as the contract says.
        await this.st(`UPDATE reaper_runs SET ${set.join(', ')} WHERE run_id = ?`, ...values, runId).run()
      },
      updateFenced: async (runId, held, patch) => {
        const { set, values } = patchColumns(patch)
        if (set.length === 0) set.push('run_id = run_id')
        const landed = await this.st(
          `UPDATE reaper_runs SET ${set.join(', ')} WHERE run_id = ? AND (driver_epoch IS NULL OR driver_epoch <= ?) RETURNING run_id`,
          ...values,
          runId,
          held,
        ).first()
        if (landed) return 'written'
        return (await get(runId)) ? 'superseded' : 'unknown'
      },
      get,
      findActiveRun: async (threadId) => {
        const r = await this.st(
          `SELECT ${RUN_COLUMNS} FROM reaper_runs WHERE thread_id = ?1 AND status = 'running' ORDER BY started_at DESC, rowid DESC LIMIT 1`,
          threadId,
        ).first<Row>()
        return r ? toRecord(r) : null
      },
      listByThread: async (threadId) =>
        (await this.all(`SELECT ${RUN_COLUMNS} FROM reaper_runs WHERE thread_id = ?1 ORDER BY started_at, rowid`, threadId)).map(toRecord),
      listReclaimable: async ({ now, ttlMs }) =>
        (
          await this.all(
            `SELECT ${RUN_COLUMNS} FROM reaper_runs WHERE status = 'running' AND detached_since IS NOT NULL ` +
              'AND detached_since <= ?1 ORDER BY detached_since, run_id',
            now - ttlMs,
          )
        ).map(toRecord),
      bumpEpoch: async (runId): Promise<EpochBump> => {
        // The reaper's claim statement: refuses unknown and terminal runs by matching no row.
        const r = await this.st(
          'UPDATE reaper_runs SET driver_epoch = COALESCE(driver_epoch, 0) + 1 ' +
            `WHERE run_id = ?1 AND status IN ('running', 'interrupted') RETURNING ${RUN_COLUMNS}`,
          runId,
        ).first<Row>()
        if (r) {
          const record = toRecord(r)
          return { claimed: true, epoch: record.driverEpoch!, record }
        }
        return { claimed: false, reason: (await get(runId)) ? 'terminal' : 'unknown' }
      },
      writeTerminal: async (runId, heldEpoch, write: TerminalWrite) =>
        (await this.st(
          'UPDATE reaper_runs SET status = ?3, finished_at = ?4, error_message = ?5, error_code = ?6 ' +
            'WHERE run_id = ?1 AND (driver_epoch IS NULL OR driver_epoch <= ?2) RETURNING run_id',
          runId,
          heldEpoch,
          write.status,
          write.finishedAt,
          write.error?.message ?? null,
          write.error?.code ?? null,
        ).first()) !== null,
    }
  }

  /** The run's delivery log as the framework's `StreamDurability`; offsets are `seq` as text. */
  durability(runId: string, options: DurabilityOptions = {}): StreamDurability {
    const offset = options.offset ?? null
    const held = options.fence ?? null
    const entries = async (from: number, limit: number) =>
      (await this.all('SELECT seq, chunk FROM reaper_log_entries WHERE run_id = ?1 AND seq >= ?2 ORDER BY seq LIMIT ?3', runId, from, limit)).map(
        (r) => ({ offset: String(r.seq), chunk: JSON.parse(r.chunk as string) as StreamChunk }),
      )
    const meta = () =>
      this.st('SELECT closed, next_seq, events_pruned_at FROM reaper_logs WHERE run_id = ?1', runId).first<Row>()
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
        // One batch, one transaction, as the Rust store's append: the state read first is what
        // every conditional write after it sees, so the outcome decided from it is what landed.
        const statements = [
          this.st(
            'SELECT (SELECT driver_epoch FROM reaper_runs WHERE run_id = ?1) AS epoch, ' +
              '(SELECT closed FROM reaper_logs WHERE run_id = ?1) AS closed, (SELECT next_seq FROM reaper_logs WHERE run_id = ?1) AS next_seq',
            runId,
          ),
          this.st(`INSERT INTO reaper_logs (run_id) SELECT ?1 WHERE ${FENCE_OK} ON CONFLICT (run_id) DO NOTHING`, runId, held),
        ]
        if (encoded.length > 0) {
          statements.push(
            this.st(
              'INSERT INTO reaper_log_entries (run_id, seq, chunk) SELECT ?1, reaper_logs.next_seq + j.key, j.value ' +
                `FROM reaper_logs, json_each(?3) AS j WHERE reaper_logs.run_id = ?1 AND reaper_logs.closed = 0 AND ${FENCE_OK}`,
              runId,
              held,
              JSON.stringify(encoded),
            ),
            this.st(
              `UPDATE reaper_logs SET next_seq = next_seq + ?3, last_append_at = ?4 WHERE run_id = ?1 AND closed = 0 AND ${FENCE_OK}`,
              runId,
              held,
              encoded.length,
              this.now(),
            ),
          )
        }
        const out = await this.db.batch<Row>(statements)
        const before = out[0].results[0]
        if (held !== null && typeof before.epoch === 'number' && before.epoch > held) throw new SupersededError(runId, held)
        if (before.closed === 1) {
          throw new Error(`the delivery log of run ${JSON.stringify(runId)} is closed; nothing was appended`)
        }
        const first = (before.next_seq as number | null) ?? 0
        return encoded.map((_, i) => String(first + i))
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
            if (m && (m.closed === 1 || m.events_pruned_at !== null)) {
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
        // The reaper's fenced close (reaper_sql::logs::CLOSE_FENCED): the fence in the statement.
        const r = await this.st(
          `INSERT INTO reaper_logs (run_id, closed) SELECT ?1, 1 WHERE ${FENCE_OK} ON CONFLICT (run_id) DO UPDATE SET closed = 1`,
          runId,
          held,
        ).run()
        if (held !== null && (r.meta.changes ?? 0) === 0) throw new SupersededError(runId, held)
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
        savedAt: r.saved_at as number,
      }
      if (r.exit_code !== null) t.exitCode = r.exit_code as number
      return t
    }
    return {
      get: async (runId) => {
        const r = await this.st('SELECT run_id, thread_id, body, exit_code, saved_at FROM reaper_transcripts WHERE run_id = ?1', runId).first<Row>()
        return r ? toTranscript(r) : null
      },
      save: async (t, options = {}) => {
        const held = options.fence ?? null
        // The reaper's fenced save (reaper_sql::transcripts::SAVE_FENCED), the fence in the statement.
        const r = await this.st(
          'INSERT INTO reaper_transcripts (run_id, thread_id, body, exit_code, saved_at) SELECT ?1, ?3, ?4, ?5, ?6 ' +
            `WHERE ${FENCE_OK} ON CONFLICT (run_id) DO UPDATE SET thread_id = excluded.thread_id, body = excluded.body, ` +
            'exit_code = excluded.exit_code, saved_at = excluded.saved_at',
          t.runId,
          held,
          t.threadId,
          JSON.stringify(t.messages.map((m) => ({ role: m.role, content: m.content }))),
          t.exitCode ?? null,
          t.savedAt,
        ).run()
        return held === null || (r.meta.changes ?? 0) > 0
      },
      listByThread: async (threadId) =>
        (
          await this.all(
            'SELECT run_id, thread_id, body, exit_code, saved_at FROM reaper_transcripts WHERE thread_id = ?1 ORDER BY saved_at, run_id',
            threadId,
          )
        ).map(toTranscript),
    }
  }

  private instanceStore(): SandboxInstanceStore {
    return {
      get: async (key) => {
        const r = await this.st(
          'SELECT key, provider, provider_sandbox_id, latest_snapshot_id, thread_id, latest_run_id, updated_at ' +
            'FROM reaper_sandbox_instances WHERE key = ?1',
          key,
        ).first<Row>()
        if (!r) return null
        const rec: SandboxInstanceRecord = {
          key: r.key as string,
          provider: r.provider as string,
          providerSandboxId: r.provider_sandbox_id as string,
          threadId: r.thread_id as string,
          updatedAt: r.updated_at as number,
        }
        if (r.latest_snapshot_id !== null) rec.latestSnapshotId = r.latest_snapshot_id as string
        if (r.latest_run_id !== null) rec.latestRunId = r.latest_run_id as string
        return rec
      },
      upsert: async (rec) => {
        // A full replace: an omitted optional is written NULL, never kept from the old row.
        await this.st(
          'INSERT INTO reaper_sandbox_instances (key, provider, provider_sandbox_id, latest_snapshot_id, thread_id, latest_run_id, ' +
            'updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (key) DO UPDATE SET provider = excluded.provider, ' +
            'provider_sandbox_id = excluded.provider_sandbox_id, latest_snapshot_id = excluded.latest_snapshot_id, ' +
            'thread_id = excluded.thread_id, latest_run_id = excluded.latest_run_id, updated_at = excluded.updated_at',
          rec.key,
          rec.provider,
          rec.providerSandboxId,
          rec.latestSnapshotId ?? null,
          rec.threadId,
          rec.latestRunId ?? null,
          rec.updatedAt,
        ).run()
      },
      delete: async (key) => {
        await this.st('DELETE FROM reaper_sandbox_instances WHERE key = ?1', key).run()
      },
    }
  }

  private leaseBackend(): LeaseBackend {
    return {
      // The Rust grant: one conditional upsert with 128 random bits from SQLite as the token.
      acquire: async (key, owner, now, ttlMs) => {
        const expiresAt = now + ttlMs
        const r = await this.st(
          'INSERT INTO reaper_leases (key, owner, token, expires_at) VALUES (?1, ?2, lower(hex(randomblob(16))), ?3) ' +
            'ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, token = excluded.token, ' +
            'expires_at = excluded.expires_at WHERE reaper_leases.expires_at <= ?4 RETURNING token',
          key,
          owner,
          expiresAt,
          now,
        ).first<Row>()
        return r ? { token: r.token as string, expiresAt } : null
      },
      renew: async (key, owner, token, now, ttlMs) =>
        (await this.st(
          'UPDATE reaper_leases SET expires_at = ?4 WHERE key = ?1 AND owner = ?2 AND token = ?3 RETURNING key',
          key,
          owner,
          token,
          now + ttlMs,
        ).first()) !== null,
      release: async (key, owner, token) => {
        await this.st('DELETE FROM reaper_leases WHERE key = ?1 AND owner = ?2 AND token = ?3', key, owner, token).run()
      },
    }
  }

  /** Applies the reaper's own migrations (reaper_sql::schema::pending) in one batch, or refuses. */
  private async migrate(): Promise<void> {
    // D1 and wrangler keep tables of their own in every database (as reaper_d1::schema skips).
    const ours = (name: string) => !(name.startsWith('sqlite_') || name.startsWith('_cf_') || name === 'd1_migrations')
    const inspect = async () => {
      const tables = (await this.all("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"))
        .map((r) => r.name as string)
        .filter(ours)
      if (tables.length === 0) return { tables, version: 0 }
      if (!tables.includes('reaper_schema')) {
        // A D1 binding is chosen on purpose in wrangler.toml: the reaper's tables go beside an
        // application's own, unless one of its tables has a reaper table's name.
        const clashing = tables.filter((t) => REAPER_TABLES.has(t))
        if (clashing.length === 0) return { tables, version: 0 }
        throw new SchemaError(
          `the D1 database holds tables named like the reaper's (${clashing.join(', ')}) and no reaper_schema: ` +
            "they belong to another application; nothing was written. Bind the database the reaper Worker uses, or one without those tables.",
        )
      }
      const v = (await this.st('SELECT MAX(version) AS v FROM reaper_schema').first<Row>())?.v as number | null
      if (v === null) {
        throw new SchemaError('the D1 database is damaged: reaper_schema holds no version row. Nothing was written; restore it.')
      }
      if (v > SCHEMA_VERSION) {
        throw new SchemaError(
          `the D1 database has reaper schema version ${v}, but this package writes version ${SCHEMA_VERSION}; ` +
            'nothing was written. Upgrade @reaper/tanstack to the release that matches your reaper.',
        )
      }
      return { tables, version: v }
    }
    const { version } = await inspect()
    if (version === SCHEMA_VERSION) return
    const statements = pendingMigrations(version).flatMap((m) => [
      ...m.statements.map((s) => this.st(s)),
      this.st('INSERT INTO reaper_schema (version, description) VALUES (?1, ?2)', m.version, m.description),
    ])
    try {
      await this.db.batch(statements)
    } catch (e) {
      // Another Worker (or the reaper) migrated meanwhile: its batch won and ours changed nothing.
      if ((await inspect()).version !== SCHEMA_VERSION) throw e
    }
  }
}

