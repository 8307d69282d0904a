// Every store on the reaper's SQLite file (shared/reaper-sqlite/SCHEMA.md), through Node's
// built-in `node:sqlite` (Node >= 22.13): no native module to download, and the same file the
// `reaper` CLI sweeps.
import { DatabaseSync, type SQLInputValue } from 'node:sqlite'
import type { StreamChunk, StreamDurability } from '@tanstack/ai'
import { pendingMigrations, REAPER_TABLES } from './sql-schema.js'
import {
  SCHEMA_VERSION,
  SchemaError,
  SupersededError,
  isJsonObject,
  messageStoreOver,
  type EpochBump,
  type LeaseBackend,
  type MessageStore,
  type ReaperRunStore,
  type SandboxInstanceRecord,
  type SandboxInstanceStore,
  type TerminalWrite,
  type DurabilityOptions,
  type RunPatch,
  type Transcript,
  type TranscriptStore,
} from './types.js'
import { LeaseLockStore, type LeaseLockOptions } from './locks.js'
import { patchColumns, toRecord } from './sqlite-rows.js'

type Row = Record<string, SQLInputValue>

const RUN_COLUMNS =
  'run_id, thread_id, status, started_at, finished_at, error_message, error_code, usage, ' +
  'sandbox_key, detached_since, cancel_requested, driver_epoch'

export interface SqliteOptions {
  /** Clock for log `last_append_at` stamps and transcript times. Default `Date.now`. */
  now?: () => number
  /** Busy timeout; the reaper uses 5 s. */
  busyTimeoutMs?: number
  /** How often a tailing `read` looks for new chunks. Default 50 ms. */
  pollMs?: number
  /**
   * Add the reaper's tables to a database that holds only the application's own tables (as
   * `reaper init --db PATH` does). Default false: such a file is refused untouched, so a wrong
   * path never writes into someone else's database.
   */
  besideAppTables?: boolean
}

/** The reaper's SQLite file opened for a TanStack AI app. */
export class ReaperSqlite {
  readonly db: DatabaseSync
  readonly runs: ReaperRunStore
  readonly transcripts: TranscriptStore
  readonly sandboxInstances: SandboxInstanceStore
  readonly leases: LeaseBackend
  private readonly now: () => number
  private readonly pollMs: number

  private constructor(path: string, options: SqliteOptions) {
    this.now = options.now ?? Date.now
    this.pollMs = options.pollMs ?? 50
    this.db = new DatabaseSync(path)
    this.db.exec(`PRAGMA busy_timeout = ${options.busyTimeoutMs ?? 5000}`)
    migrate(this.db, path, options.besideAppTables ?? false)
    this.db.exec('PRAGMA journal_mode = WAL')
    this.runs = this.runStore()
    this.transcripts = this.transcriptStore()
    this.sandboxInstances = this.instanceStore()
    this.leases = this.leaseBackend()
  }

  /** Opens (creating or migrating) a reaper database. A newer schema or a foreign file is refused. */
  static open(path: string, options: SqliteOptions = {}): ReaperSqlite {
    return new ReaperSqlite(path, options)
  }

  close(): void {
    this.db.close()
  }

  /** The framework's `LockStore` on the reaper's `reaper_leases` table. */
  locks(options: LeaseLockOptions = {}): LeaseLockStore {
    return new LeaseLockStore(this.leases, { now: this.now, ...options })
  }

  /** The framework's `MessageStore`; `saveThread` writes into the transcript of `runFor(threadId)`. */
  messages(runFor: (threadId: string) => string | Promise<string>): MessageStore {
    return messageStoreOver(this.transcripts, runFor, this.now)
  }

  private tx<T>(fn: () => T): T {
    this.db.exec('BEGIN IMMEDIATE')
    try {
      const out = fn()
      this.db.exec('COMMIT')
      return out
    } catch (e) {
      this.db.exec('ROLLBACK')
      throw e
    }
  }

  private runStore(): ReaperRunStore {
    const db = this.db
    const get = (runId: string) => {
      const row = db.prepare(`SELECT ${RUN_COLUMNS} FROM reaper_runs WHERE run_id = ?`).get(runId)
      return row ? toRecord(row as Row) : null
    }
    return {
      createOrResume: async (input) => {
        db.prepare(
          'INSERT INTO reaper_runs (run_id, thread_id, status, started_at) VALUES (?, ?, ?, ?) ' +
            'ON CONFLICT (run_id) DO NOTHING',
        ).run(input.runId, input.threadId, input.status ?? 'running', input.startedAt)
        return get(input.runId)!
      },
      update: async (runId, patch) => {
        const { set, values } = patchColumns(patch)
        if (set.length === 0) return
        // An unknown run matches no row: a no-op, as the contract says.
        db.prepare(`UPDATE reaper_runs SET ${set.join(', ')} WHERE run_id = ?`).run(...values, runId)
      },
      updateFenced: async (runId, held, patch) => {
        const { set, values } = patchColumns(patch)
        if (set.length === 0) set.push('run_id = run_id')
        return this.tx(() => {
          const landed = db
            .prepare(
              `UPDATE reaper_runs SET ${set.join(', ')} WHERE run_id = ? ` +
                'AND (driver_epoch IS NULL OR driver_epoch <= ?) RETURNING run_id',
            )
            .get(...values, runId, held)
          if (landed) return 'written' as const
          return get(runId) ? ('superseded' as const) : ('unknown' as const)
        })
      },
      get: async (runId) => get(runId),
      findActiveRun: async (threadId) => {
        const row = db
          .prepare(
            `SELECT ${RUN_COLUMNS} FROM reaper_runs WHERE thread_id = ? AND status = 'running' ` +
              'ORDER BY started_at DESC, rowid DESC LIMIT 1',
          )
          .get(threadId)
        return row ? toRecord(row as Row) : null
      },
      listByThread: async (threadId) =>
        db
          .prepare(`SELECT ${RUN_COLUMNS} FROM reaper_runs WHERE thread_id = ? ORDER BY started_at, rowid`)
          .all(threadId)
          .map((r) => toRecord(r as Row)),
      listReclaimable: async ({ now, ttlMs }) =>
        db
          .prepare(
            `SELECT ${RUN_COLUMNS} FROM reaper_runs WHERE status = 'running' AND detached_since IS NOT NULL ` +
              'AND detached_since <= ? ORDER BY detached_since, run_id',
          )
          .all(now - ttlMs)
          .map((r) => toRecord(r as Row)),
      bumpEpoch: async (runId): Promise<EpochBump> => {
        // The reaper's claim statement, verbatim in effect: refuses unknown and terminal runs by
        // matching no row.
        const row = db
          .prepare(
            'UPDATE reaper_runs SET driver_epoch = COALESCE(driver_epoch, 0) + 1 ' +
              `WHERE run_id = ? AND status IN ('running', 'interrupted') RETURNING ${RUN_COLUMNS}`,
          )
          .get(runId)
        if (row) {
          const record = toRecord(row as Row)
          return { claimed: true, epoch: record.driverEpoch!, record }
        }
        return { claimed: false, reason: get(runId) ? 'terminal' : 'unknown' }
      },
      writeTerminal: async (runId, heldEpoch, write: TerminalWrite) => {
        const row = db
          .prepare(
            'UPDATE reaper_runs SET status = ?, finished_at = ?, error_message = ?, error_code = ? ' +
              'WHERE run_id = ? AND (driver_epoch IS NULL OR driver_epoch <= ?) RETURNING run_id',
          )
          .get(
            write.status,
            write.finishedAt,
            write.error?.message ?? null,
            write.error?.code ?? null,
            runId,
            heldEpoch,
          )
        return row !== undefined
      },
    }
  }

  /** The run's delivery log as the framework's `StreamDurability`; offsets are `seq` as text. */
  durability(runId: string, options: DurabilityOptions = {}): StreamDurability {
    const db = this.db
    const offset = options.offset ?? null
    const fence = options.fence
    const fenced = () => {
      if (fence === undefined) return
      const row = db.prepare('SELECT driver_epoch FROM reaper_runs WHERE run_id = ?').get(runId) as
        | Row
        | undefined
      const observed = row?.driver_epoch
      if (typeof observed === 'number' && observed > fence) throw new SupersededError(runId, fence)
    }
    const entries = (from: number, limit: number) =>
      db
        .prepare('SELECT seq, chunk FROM reaper_log_entries WHERE run_id = ? AND seq >= ? ORDER BY seq LIMIT ?')
        .all(runId, from, limit)
        .map((r) => {
          const row = r as Row
          return { offset: String(row.seq), chunk: JSON.parse(row.chunk as string) as StreamChunk }
        })
    const meta = () =>
      db
        .prepare('SELECT closed, next_seq, events_pruned_at FROM reaper_logs WHERE run_id = ?')
        .get(runId) as Row | undefined
    return {
      resumeFrom: () => offset,
      append: async (chunks) => {
        for (const c of chunks) {
          if (!isJsonObject(c) || typeof (c as { type?: unknown }).type !== 'string') {
            throw new TypeError('a delivery-log chunk must be an object with a string `type`')
          }
        }
        const encoded = chunks.map((c) => JSON.stringify(c))
        return this.tx(() => {
          fenced()
          db.prepare('INSERT INTO reaper_logs (run_id) VALUES (?) ON CONFLICT DO NOTHING').run(runId)
          const m = meta()!
          if (m.closed === 1) {
            throw new Error(`the delivery log of run ${JSON.stringify(runId)} is closed; nothing was appended`)
          }
          const first = m.next_seq as number
          const ins = db.prepare('INSERT INTO reaper_log_entries (run_id, seq, chunk) VALUES (?, ?, ?)')
          encoded.forEach((text, i) => ins.run(runId, first + i, text))
          if (encoded.length > 0) {
            db.prepare('UPDATE reaper_logs SET next_seq = ?, last_append_at = ? WHERE run_id = ?').run(
              first + encoded.length,
              this.now(),
              runId,
            )
          }
          return encoded.map((_, i) => String(first + i))
        })
      },
      read: (after, signal) => {
        const pollMs = this.pollMs
        return (async function* () {
          let next = Number(after) + 1
          if (!Number.isInteger(next) || next < 0) {
            throw new TypeError(`offset ${JSON.stringify(after)} was not minted by this log`)
          }
          for (;;) {
            const page = entries(next, 500)
            for (const e of page) {
              next = Number(e.offset) + 1
              yield e
            }
            if (page.length > 0) continue
            const m = meta()
            if (m && (m.closed === 1 || m.events_pruned_at !== null)) {
              // A last look: chunks appended just before the close are not missed.
              const tail = entries(next, 500)
              if (tail.length === 0) return
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
        })()
      },
      close: async () => {
        if (fence === undefined) {
          db.prepare(
            'INSERT INTO reaper_logs (run_id, closed) VALUES (?, 1) ON CONFLICT (run_id) DO UPDATE SET closed = 1',
          ).run(runId)
          return
        }
        // The reaper's fenced close (reaper_sql::logs::CLOSE_FENCED): the fence in the statement.
        const r = db
          .prepare(
            'INSERT INTO reaper_logs (run_id, closed) SELECT ?, 1 WHERE NOT EXISTS ' +
              '(SELECT 1 FROM reaper_runs WHERE run_id = ? AND driver_epoch > ?) ' +
              'ON CONFLICT (run_id) DO UPDATE SET closed = 1',
          )
          .run(runId, runId, fence)
        if (r.changes === 0) throw new SupersededError(runId, fence)
      },
      snapshot: async () => {
        const m = meta()
        if (!m || m.events_pruned_at !== null) return []
        return entries(0, Number.MAX_SAFE_INTEGER)
      },
    }
  }

  private transcriptStore(): TranscriptStore {
    const db = this.db
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
        const r = db
          .prepare('SELECT run_id, thread_id, body, exit_code, saved_at FROM reaper_transcripts WHERE run_id = ?')
          .get(runId)
        return r ? toTranscript(r as Row) : null
      },
      save: async (t, options = {}) => {
        const upsert =
          'ON CONFLICT (run_id) DO UPDATE SET thread_id = excluded.thread_id, body = excluded.body, ' +
          'exit_code = excluded.exit_code, saved_at = excluded.saved_at'
        const row = [
          t.runId,
          t.threadId,
          JSON.stringify(t.messages.map((m) => ({ role: m.role, content: m.content }))),
          t.exitCode ?? null,
          t.savedAt,
        ] as const
        if (options.fence === undefined) {
          db.prepare(
            `INSERT INTO reaper_transcripts (run_id, thread_id, body, exit_code, saved_at) VALUES (?, ?, ?, ?, ?) ${upsert}`,
          ).run(...row)
          return true
        }
        // The reaper's fenced save (reaper_sql::transcripts::SAVE_FENCED).
        const r = db
          .prepare(
            'INSERT INTO reaper_transcripts (run_id, thread_id, body, exit_code, saved_at) SELECT ?, ?, ?, ?, ? ' +
              `WHERE NOT EXISTS (SELECT 1 FROM reaper_runs WHERE run_id = ? AND driver_epoch > ?) ${upsert}`,
          )
          .run(...row, t.runId, options.fence)
        return r.changes > 0
      },
      listByThread: async (threadId) =>
        db
          .prepare(
            'SELECT run_id, thread_id, body, exit_code, saved_at FROM reaper_transcripts WHERE thread_id = ? ' +
              'ORDER BY saved_at, run_id',
          )
          .all(threadId)
          .map((r) => toTranscript(r as Row)),
    }
  }

  private instanceStore(): SandboxInstanceStore {
    const db = this.db
    return {
      get: async (key) => {
        const r = db
          .prepare(
            'SELECT key, provider, provider_sandbox_id, latest_snapshot_id, thread_id, latest_run_id, ' +
              'updated_at FROM reaper_sandbox_instances WHERE key = ?',
          )
          .get(key) as Row | undefined
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
        db.prepare(
          'INSERT INTO reaper_sandbox_instances (key, provider, provider_sandbox_id, latest_snapshot_id, ' +
            'thread_id, latest_run_id, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?) ' +
            'ON CONFLICT (key) DO UPDATE SET provider = excluded.provider, ' +
            'provider_sandbox_id = excluded.provider_sandbox_id, latest_snapshot_id = excluded.latest_snapshot_id, ' +
            'thread_id = excluded.thread_id, latest_run_id = excluded.latest_run_id, updated_at = excluded.updated_at',
        ).run(
          rec.key,
          rec.provider,
          rec.providerSandboxId,
          rec.latestSnapshotId ?? null,
          rec.threadId,
          rec.latestRunId ?? null,
          rec.updatedAt,
        )
      },
      delete: async (key) => {
        db.prepare('DELETE FROM reaper_sandbox_instances WHERE key = ?').run(key)
      },
    }
  }

  private leaseBackend(): LeaseBackend {
    const db = this.db
    return {
      acquire: async (key, owner, now, ttlMs) => {
        const expiresAt = now + ttlMs
        const row = db
          .prepare(
            'INSERT INTO reaper_leases (key, owner, token, expires_at) VALUES (?, ?, lower(hex(randomblob(16))), ?) ' +
              'ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, token = excluded.token, ' +
              'expires_at = excluded.expires_at WHERE reaper_leases.expires_at <= ? RETURNING token',
          )
          .get(key, owner, expiresAt, now) as Row | undefined
        return row ? { token: row.token as string, expiresAt } : null
      },
      renew: async (key, owner, token, now, ttlMs) =>
        db
          .prepare('UPDATE reaper_leases SET expires_at = ? WHERE key = ? AND owner = ? AND token = ? RETURNING key')
          .get(now + ttlMs, key, owner, token) !== undefined,
      release: async (key, owner, token) => {
        db.prepare('DELETE FROM reaper_leases WHERE key = ? AND owner = ? AND token = ?').run(key, owner, token)
      },
    }
  }
}


/** Applies the reaper's own migrations (the statements of `reaper_sql::schema::pending`), or refuses. */
function migrate(db: DatabaseSync, path: string, besideAppTables: boolean): void {
  const tables = () =>
    db
      .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
      .all()
      .map((r) => (r as Row).name as string)
  const version = (): number => {
    const row = db.prepare('SELECT MAX(version) AS v FROM reaper_schema').get() as Row
    return (row.v as number | null) ?? 0
  }
  // Checked before any write, so a refused file is left as it was.
  const found = tables()
  if (found.length > 0 && !found.includes('reaper_schema')) {
    const clashing = found.filter((t) => REAPER_TABLES.has(t))
    if (clashing.length > 0) {
      throw new SchemaError(
        `${path} holds tables named like the reaper's (${clashing.join(', ')}) but no reaper_schema: ` +
          'they belong to another application; nothing was written. Use a separate file for the reaper.',
      )
    }
    if (!besideAppTables) {
      throw new SchemaError(
        `${path} is another application's SQLite database (tables: ${found.join(', ')}) with no reaper ` +
          'tables yet; nothing was written. Pass { besideAppTables: true } (or run `reaper init --db ' +
          `${path}\`) to add the reaper's tables beside the application's, or point this package at the ` +
          'file `reaper sweep --db` uses.',
      )
    }
  }
  if (found.includes('reaper_schema') && version() > SCHEMA_VERSION) {
    throw new SchemaError(
      `${path} has reaper schema version ${version()}, but this package writes version ` +
        `${SCHEMA_VERSION}; nothing was written. Upgrade @reaper/tanstack to the release that ` +
        'matches your reaper.',
    )
  }
  db.exec('BEGIN IMMEDIATE')
  try {
    // Re-read under the write lock: another process may have migrated meanwhile.
    const at = tables().includes('reaper_schema') ? version() : 0
    if (at > SCHEMA_VERSION) throw new SchemaError(`${path} was upgraded past version ${SCHEMA_VERSION} meanwhile`)
    for (const m of pendingMigrations(at)) {
      for (const s of m.statements) db.exec(s)
      db.prepare('INSERT INTO reaper_schema (version, description) VALUES (?, ?)').run(m.version, m.description)
    }
    db.exec('COMMIT')
  } catch (e) {
    db.exec('ROLLBACK')
    throw e
  }
}
