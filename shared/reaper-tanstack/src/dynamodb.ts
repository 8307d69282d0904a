// Every store on the reaper's DynamoDB table (shared/reaper-dynamodb/LAYOUT.md): the same keys,
// attributes, sparse-index rules and conditions as `reaper-dynamodb`, so the Lambda/Vercel
// reaper sweeps what this package writes.
import { createHash, randomBytes } from 'node:crypto'
import {
  ConditionalCheckFailedException,
  DynamoDBClient,
  TransactionCanceledException,
  type AttributeValue,
} from '@aws-sdk/client-dynamodb'
import {
  BatchGetItemCommand,
  CreateTableCommand,
  DeleteItemCommand,
  GetItemCommand,
  PutItemCommand,
  QueryCommand,
  TransactWriteItemsCommand,
  UpdateItemCommand,
  type QueryCommandInput,
  type TransactWriteItem,
} from '@aws-sdk/client-dynamodb'
import type { RunRecord, StreamChunk, StreamDurability } from '@tanstack/ai'
import { isRunStatus } from '@tanstack/ai'
import {
  SupersededError,
  isJsonObject,
  messageStoreOver,
  type EpochBump,
  type LeaseBackend,
  type MessageStore,
  type ReaperRunStore,
  type SandboxInstanceRecord,
  type SandboxInstanceStore,
  type DurabilityOptions,
  type RunPatch,
  type Transcript,
  type TranscriptStore,
} from './types.js'
import { LeaseLockStore, type LeaseLockOptions } from './locks.js'

type Item = Record<string, AttributeValue>

/** Default event retention, as the reaper's (`log_retention`, 30 days). */
export const DEFAULT_LOG_RETENTION_MS = 30 * 24 * 60 * 60 * 1000
const DAY_MS = 24 * 60 * 60 * 1000
const MAX_RAW_KEY_ID_BYTES = 1024
/** 25 items per transaction: the fence check, the log meta and 23 chunks. */
const CHUNKS_PER_TX = 23

/** An id inside a key: itself, or `~sha256:<hex>` past 1,024 bytes (LAYOUT.md). */
export function keyId(id: string): string {
  if (Buffer.byteLength(id, 'utf8') <= MAX_RAW_KEY_ID_BYTES) return id
  return `~sha256:${createHash('sha256').update(id, 'utf8').digest('hex')}`
}
const runPk = (runId: string) => `RUN#${keyId(runId)}`
const leasePk = (key: string) => `LEASE#${keyId(key)}`
const sandboxPk = (key: string) => `SANDBOX#${keyId(key)}`
const threadPk = (threadId: string) => `THREAD#${keyId(threadId)}`
const entrySk = (seq: number) => `LOG#${String(seq).padStart(20, '0')}`

/**
 * Statuses that keep a detached run item out of the `reclaimable` index: every run status but
 * `running`. Membership follows detachment, not a valid status, so an item whose status is no
 * run status (`RUNNING`) stays where the sweep reads it and reports it corrupt (LAYOUT.md).
 */
const LEAVES_RECLAIMABLE: ReadonlyArray<string> = ['interrupted', 'completed', 'failed', 'aborted']
/** Statuses that keep a run item out of the `by-sandbox` index: the terminal ones. */
const LEAVES_SANDBOX_INDEX: ReadonlyArray<string> = ['completed', 'failed', 'aborted']

const S = (v: string): AttributeValue => ({ S: v })
const N = (v: number): AttributeValue => ({ N: String(v) })

/** JSON as native DynamoDB values, as `reaper_dynamodb::layout::json_to_attr` writes `usage`. */
export function toAttr(v: unknown): AttributeValue {
  if (v === null) return { NULL: true }
  if (typeof v === 'boolean') return { BOOL: v }
  if (typeof v === 'number') {
    if (!Number.isFinite(v)) throw new TypeError(`usage holds ${v}, which JSON cannot carry`)
    return { N: String(v) }
  }
  if (typeof v === 'string') return { S: v }
  if (Array.isArray(v)) return { L: v.map(toAttr) }
  if (isJsonObject(v)) {
    const M: Item = {}
    for (const [k, x] of Object.entries(v)) if (x !== undefined) M[k] = toAttr(x)
    return { M }
  }
  throw new TypeError(`usage holds a ${typeof v}, which JSON cannot carry`)
}

export function fromAttr(a: AttributeValue): unknown {
  if (a.NULL) return null
  if (a.BOOL !== undefined) return a.BOOL
  if (a.N !== undefined) return Number(a.N)
  if (a.S !== undefined) return a.S
  if (a.L) return a.L.map(fromAttr)
  if (a.M) return Object.fromEntries(Object.entries(a.M).map(([k, x]) => [k, fromAttr(x)]))
  if (a.SS) return [...a.SS]
  if (a.NS) return a.NS.map(Number)
  throw new Error(`an attribute of a type JSON cannot carry: ${Object.keys(a).join(',')}`)
}

const str = (item: Item, name: string): string | undefined => item[name]?.S
const num = (item: Item, name: string): number | undefined =>
  item[name]?.N !== undefined ? Number(item[name].N) : undefined

function toRecord(item: Item): RunRecord {
  const status = str(item, 'status')
  if (!isRunStatus(status)) {
    throw new Error(
      `run item ${item.pk?.S} has status ${JSON.stringify(status)}, which is no run status; repair it`,
    )
  }
  const rec: RunRecord = {
    runId: str(item, 'runId')!,
    threadId: str(item, 'threadId')!,
    status,
    startedAt: num(item, 'startedAt')!,
  }
  const finishedAt = num(item, 'finishedAt')
  if (finishedAt !== undefined) rec.finishedAt = finishedAt
  const err = item.error?.M
  if (err?.message?.S !== undefined) {
    rec.error = { message: err.message.S }
    if (err.code?.S !== undefined) rec.error.code = err.code.S
  }
  if (item.usage && !item.usage.NULL) rec.usage = fromAttr(item.usage) as RunRecord['usage']
  const sandboxKey = str(item, 'sandboxKey')
  if (sandboxKey !== undefined) rec.sandboxKey = sandboxKey
  const detachedSince = num(item, 'detachedSince')
  if (detachedSince !== undefined) rec.detachedSince = detachedSince
  if (item.cancelRequested?.BOOL !== undefined) rec.cancelRequested = item.cancelRequested.BOOL
  const driverEpoch = num(item, 'driverEpoch')
  if (driverEpoch !== undefined) rec.driverEpoch = driverEpoch
  return rec
}

/** Why a status the caller passed is refused (JavaScript callers are not type-checked). */
function noRunStatus(runId: string, status: unknown): string {
  return (
    `run ${runId}: status ${JSON.stringify(status)} is no run status (one of running, interrupted, ` +
    'completed, failed, aborted); nothing was written'
  )
}

function isConditionFailure(e: unknown): boolean {
  return (
    e instanceof ConditionalCheckFailedException ||
    (e as { name?: string })?.name === 'ConditionalCheckFailedException'
  )
}

export interface DynamoOptions {
  /** The table (`REAPER_TABLE`). */
  table: string
  /** A client of your own; default one from the environment. */
  client?: DynamoDBClient
  /** Clock for log stamps and lease times. Default `Date.now`. */
  now?: () => number
  /** Log retention (DynamoDB TTL); must exceed your longest run. Default 30 days. */
  logRetentionMs?: number
  /** How often a tailing `read` looks for new chunks. Default 100 ms. */
  pollMs?: number
}

/** The reaper's DynamoDB table opened for a TanStack AI app. */
export class ReaperDynamo {
  readonly client: DynamoDBClient
  readonly table: string
  readonly runs: ReaperRunStore
  readonly transcripts: TranscriptStore
  readonly sandboxInstances: SandboxInstanceStore
  readonly leases: LeaseBackend
  private readonly now: () => number
  private readonly retentionMs: number
  private readonly pollMs: number

  constructor(options: DynamoOptions) {
    this.client = options.client ?? new DynamoDBClient({})
    this.table = options.table
    this.now = options.now ?? Date.now
    this.retentionMs = options.logRetentionMs ?? DEFAULT_LOG_RETENTION_MS
    this.pollMs = options.pollMs ?? 100
    this.runs = this.runStore()
    this.transcripts = this.transcriptStore()
    this.sandboxInstances = this.instanceStore()
    this.leases = this.leaseBackend()
  }

  /** Creates the table with the documented layout. For tests and development; deploy with infra/. */
  async createTable(): Promise<void> {
    const attr = (AttributeName: string, AttributeType: 'S' | 'N') => ({ AttributeName, AttributeType })
    const keys = (h: string, r: string) => [
      { AttributeName: h, KeyType: 'HASH' as const },
      { AttributeName: r, KeyType: 'RANGE' as const },
    ]
    await this.client.send(
      new CreateTableCommand({
        TableName: this.table,
        BillingMode: 'PAY_PER_REQUEST',
        AttributeDefinitions: [
          attr('pk', 'S'),
          attr('sk', 'S'),
          attr('gsi1pk', 'S'),
          attr('gsi1sk', 'N'),
          attr('gsi2pk', 'S'),
          attr('gsi2sk', 'N'),
          attr('gsi3pk', 'S'),
        ],
        KeySchema: keys('pk', 'sk'),
        GlobalSecondaryIndexes: [
          { IndexName: 'reclaimable', KeySchema: keys('gsi1pk', 'gsi1sk'), Projection: { ProjectionType: 'ALL' } },
          { IndexName: 'by-thread', KeySchema: keys('gsi2pk', 'gsi2sk'), Projection: { ProjectionType: 'ALL' } },
          {
            IndexName: 'by-sandbox',
            KeySchema: [{ AttributeName: 'gsi3pk', KeyType: 'HASH' as const }],
            Projection: { ProjectionType: 'ALL' },
          },
        ],
      }),
    )
  }

  locks(options: LeaseLockOptions = {}): LeaseLockStore {
    return new LeaseLockStore(this.leases, { now: this.now, ...options })
  }

  messages(runFor: (threadId: string) => string | Promise<string>): MessageStore {
    return messageStoreOver(this.transcripts, runFor, this.now)
  }

  private ttlSeconds(): number {
    return Math.floor((Date.now() + this.retentionMs) / 1000)
  }

  private async getItem(pk: string, sk: string): Promise<Item | undefined> {
    const r = await this.client.send(
      new GetItemCommand({ TableName: this.table, Key: { pk: S(pk), sk: S(sk) }, ConsistentRead: true }),
    )
    return r.Item
  }

  private async queryAll(input: Omit<QueryCommandInput, 'TableName'>): Promise<Array<Item>> {
    const out: Array<Item> = []
    let start: Item | undefined
    do {
      const r = await this.client.send(
        new QueryCommand({ TableName: this.table, ...input, ExclusiveStartKey: start }),
      )
      out.push(...(r.Items ?? []))
      start = r.LastEvaluatedKey
    } while (start)
    return out
  }

  private runStore(): ReaperRunStore {
    const table = this.table
    const client = this.client
    const get = async (runId: string) => {
      const item = await this.getItem(runPk(runId), 'RUN')
      return item ? toRecord(item) : null
    }
    /**
     * Puts the sparse index attributes right when a patch could not decide them alone, from the
     * item's raw attributes (LAYOUT.md): `gsi1pk`/`gsi1sk` on a detached item unless its status
     * is a run status other than `running`, so an item whose status is no run status stays
     * where the sweep reads it and reports it corrupt; `gsi3pk` on an item naming a sandbox
     * key unless its status is terminal. Conditional on what it read, so it never undoes a
     * newer write.
     */
    const fixIndex = async (item: Item) => {
      const status = str(item, 'status')
      const detached = item.detachedSince?.N
      const sandboxKey = str(item, 'sandboxKey')
      const want1 = detached !== undefined && !(status !== undefined && LEAVES_RECLAIMABLE.includes(status))
      const has1 = item.gsi1pk?.S === 'DETACHED' && item.gsi1sk?.N === detached
      const ok1 = want1 === has1 && (want1 || (item.gsi1pk === undefined && item.gsi1sk === undefined))
      const want3 =
        sandboxKey !== undefined && !(status !== undefined && LEAVES_SANDBOX_INDEX.includes(status))
          ? sandboxPk(sandboxKey)
          : undefined
      const ok3 = item.gsi3pk?.S === want3 && (want3 !== undefined || item.gsi3pk === undefined)
      if (ok1 && ok3) return
      const set: Array<string> = []
      const remove: Array<string> = []
      const names: Record<string, string> = { '#st': 'status', '#ds': 'detachedSince', '#sk': 'sandboxKey' }
      const values: Item = {}
      if (!ok1) {
        if (want1) {
          set.push('gsi1pk = :p', 'gsi1sk = :d')
          values[':p'] = S('DETACHED')
        } else remove.push('gsi1pk', 'gsi1sk')
      }
      if (!ok3) {
        if (want3 !== undefined) {
          set.push('gsi3pk = :g')
          values[':g'] = S(want3)
        } else remove.push('gsi3pk')
      }
      // The attributes the decision read, exactly as seen (whatever their type).
      const seen = ([['#st', 'status', ':s'], ['#ds', 'detachedSince', ':d'], ['#sk', 'sandboxKey', ':k']] as const).map(
        ([name, attr, value]) => {
          const v = item[attr]
          if (v === undefined) return `attribute_not_exists(${name})`
          if (v.NULL) {
            values[`${value}t`] = S('NULL')
            return `attribute_type(${name}, ${value}t)`
          }
          values[value] = v
          return `${name} = ${value}`
        },
      )
      const expr = [set.length ? `SET ${set.join(', ')}` : '', remove.length ? `REMOVE ${remove.join(', ')}` : '']
        .filter(Boolean)
        .join(' ')
      try {
        await client.send(
          new UpdateItemCommand({
            TableName: table,
            Key: { pk: item.pk, sk: S('RUN') },
            UpdateExpression: expr,
            ConditionExpression: seen.join(' AND '),
            ExpressionAttributeNames: names,
            ExpressionAttributeValues: Object.keys(values).length ? values : undefined,
          }),
        )
      } catch (e) {
        // Someone changed the run meanwhile; their write fixed the index by the same rule.
        if (!isConditionFailure(e)) throw e
      }
    }
    /** One UpdateItem (plus an index fix); with `held`, conditional on the epoch fence too. */
    const patchRun = async (
      runId: string,
      patch: RunPatch,
      held: number | undefined,
    ): Promise<'written' | 'unknown' | 'superseded'> => {
        const set: Array<string> = []
        const remove: Array<string> = []
        const names: Record<string, string> = {}
        const values: Item = {}
        if (patch.status !== undefined && !isRunStatus(patch.status))
          throw new TypeError(noRunStatus(runId, patch.status))
        const has = (k: keyof typeof patch) => Object.hasOwn(patch, k)
        const put = (name: string, v: AttributeValue | undefined) => {
          names[`#${name}`] = name
          if (v === undefined) remove.push(`#${name}`)
          else {
            set.push(`#${name} = :${name}`)
            values[`:${name}`] = v
          }
        }
        if (has('status') && patch.status !== undefined) put('status', S(patch.status))
        if (has('finishedAt')) put('finishedAt', patch.finishedAt === undefined ? undefined : N(patch.finishedAt))
        if (has('error')) {
          const e = patch.error
          put('error', e === undefined ? undefined : { M: { message: S(e.message), ...(e.code !== undefined ? { code: S(e.code) } : {}) } })
        }
        if (has('usage')) put('usage', patch.usage === undefined ? undefined : toAttr(patch.usage))
        if (has('sandboxKey')) put('sandboxKey', patch.sandboxKey === undefined ? undefined : S(patch.sandboxKey))
        if (has('detachedSince'))
          put('detachedSince', patch.detachedSince === undefined ? undefined : N(patch.detachedSince))
        if (has('cancelRequested'))
          put('cancelRequested', patch.cancelRequested === undefined ? undefined : { BOOL: patch.cancelRequested })
        if (has('driverEpoch')) put('driverEpoch', patch.driverEpoch === undefined ? undefined : N(patch.driverEpoch))
        // The index in the same request where the patch decides it (LAYOUT.md).
        const detach = has('detachedSince') && patch.detachedSince !== undefined
        const leaves =
          (has('detachedSince') && patch.detachedSince === undefined) ||
          (patch.status !== undefined && LEAVES_RECLAIMABLE.includes(patch.status))
        if (leaves) remove.push('gsi1pk', 'gsi1sk')
        else if (detach) {
          set.push('gsi1pk = :gsi1pk', 'gsi1sk = :detachedSince')
          values[':gsi1pk'] = S('DETACHED')
        }
        // The sandbox index the same way: live runs naming a key.
        const ends = patch.status !== undefined && LEAVES_SANDBOX_INDEX.includes(patch.status)
        if (ends || (has('sandboxKey') && patch.sandboxKey === undefined)) remove.push('gsi3pk')
        else if (has('sandboxKey') && patch.sandboxKey !== undefined) {
          set.push('gsi3pk = :gsi3pk')
          values[':gsi3pk'] = S(sandboxPk(patch.sandboxKey))
        }
        if (held !== undefined) values[':held'] = N(held)
        if (set.length === 0 && remove.length === 0) {
          if (held === undefined) return 'written'
          // An empty fenced patch still answers whether the holder is current.
          set.push('#runId = #runId')
          names['#runId'] = 'runId'
        }
        const expr = [set.length ? `SET ${set.join(', ')}` : '', remove.length ? `REMOVE ${remove.join(', ')}` : '']
          .filter(Boolean)
          .join(' ')
        try {
          const r = await client.send(
            new UpdateItemCommand({
              TableName: table,
              Key: { pk: S(runPk(runId)), sk: S('RUN') },
              UpdateExpression: expr,
              ConditionExpression:
                held === undefined
                  ? 'attribute_exists(pk)'
                  : 'attribute_exists(pk) AND (attribute_not_exists(driverEpoch) OR driverEpoch <= :held)',
              ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
              ExpressionAttributeNames: Object.keys(names).length ? names : undefined,
              ExpressionAttributeValues: Object.keys(values).length ? values : undefined,
              ReturnValues: 'ALL_NEW',
            }),
          )
          if (r.Attributes) await fixIndex(r.Attributes)
          return 'written'
        } catch (e) {
          if (!isConditionFailure(e)) throw e
          // An unknown run: a no-op. A known one failed only the fence.
          return (e as ConditionalCheckFailedException).Item ? 'superseded' : 'unknown'
        }
    }
    return {
      createOrResume: async (input) => {
        const status = input.status ?? 'running'
        // Refused before anything is written: the reaper would read such an item as corrupt.
        if (!isRunStatus(status)) throw new TypeError(noRunStatus(input.runId, status))
        const item: Item = {
          pk: S(runPk(input.runId)),
          sk: S('RUN'),
          entity: S('run'),
          runId: S(input.runId),
          threadId: S(input.threadId),
          status: S(status),
          startedAt: N(input.startedAt),
          gsi2pk: S(threadPk(input.threadId)),
          gsi2sk: N(input.startedAt),
        }
        try {
          await client.send(
            new PutItemCommand({
              TableName: table,
              Item: item,
              ConditionExpression: 'attribute_not_exists(pk)',
              ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
            }),
          )
          return toRecord(item)
        } catch (e) {
          if (!isConditionFailure(e)) throw e
          const old = (e as ConditionalCheckFailedException).Item
          return old ? toRecord(old) : (await get(input.runId))!
        }
      },
      update: async (runId, patch) => {
        await patchRun(runId, patch, undefined)
      },
      updateFenced: async (runId, held, patch) => patchRun(runId, patch, held),
      get,
      findActiveRun: async (threadId) => {
        const items = await this.queryAll({
          IndexName: 'by-thread',
          KeyConditionExpression: 'gsi2pk = :p',
          ExpressionAttributeValues: { ':p': S(threadPk(threadId)) },
          ScanIndexForward: false,
        })
        const hit = items.find((i) => str(i, 'status') === 'running' && str(i, 'threadId') === threadId)
        // The index is eventually consistent: the record itself is read strongly.
        return hit ? get(str(hit, 'runId')!) : null
      },
      listByThread: async (threadId) =>
        (
          await this.queryAll({
            IndexName: 'by-thread',
            KeyConditionExpression: 'gsi2pk = :p',
            ExpressionAttributeValues: { ':p': S(threadPk(threadId)) },
          })
        )
          .filter((i) => str(i, 'threadId') === threadId)
          .map(toRecord),
      listReclaimable: async ({ now, ttlMs }) =>
        (
          await this.queryAll({
            IndexName: 'reclaimable',
            KeyConditionExpression: 'gsi1pk = :p AND gsi1sk <= :c',
            ExpressionAttributeValues: { ':p': S('DETACHED'), ':c': N(now - ttlMs) },
          })
        )
          .map(toRecord)
          .filter((r) => r.status === 'running' && r.detachedSince !== undefined && r.detachedSince <= now - ttlMs),
      bumpEpoch: async (runId): Promise<EpochBump> => {
        try {
          const r = await client.send(
            new UpdateItemCommand({
              TableName: table,
              Key: { pk: S(runPk(runId)), sk: S('RUN') },
              UpdateExpression: 'SET driverEpoch = if_not_exists(driverEpoch, :zero) + :one',
              ConditionExpression: 'attribute_exists(pk) AND #st IN (:r, :i)',
              ExpressionAttributeNames: { '#st': 'status' },
              ExpressionAttributeValues: { ':zero': N(0), ':one': N(1), ':r': S('running'), ':i': S('interrupted') },
              ReturnValues: 'ALL_NEW',
              ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
            }),
          )
          const record = toRecord(r.Attributes!)
          return { claimed: true, epoch: record.driverEpoch!, record }
        } catch (e) {
          if (!isConditionFailure(e)) throw e
          return { claimed: false, reason: (e as ConditionalCheckFailedException).Item ? 'terminal' : 'unknown' }
        }
      },
      writeTerminal: async (runId, heldEpoch, write) => {
        const values: Item = { ':s': S(write.status), ':f': N(write.finishedAt), ':h': N(heldEpoch) }
        let expr = 'SET #st = :s, finishedAt = :f'
        if (write.error) {
          expr += ', #err = :e'
          values[':e'] = {
            M: { message: S(write.error.message), ...(write.error.code !== undefined ? { code: S(write.error.code) } : {}) },
          }
        }
        expr += ' REMOVE gsi1pk, gsi1sk, gsi3pk'
        try {
          await client.send(
            new UpdateItemCommand({
              TableName: table,
              Key: { pk: S(runPk(runId)), sk: S('RUN') },
              UpdateExpression: expr,
              ConditionExpression: 'attribute_exists(pk) AND (attribute_not_exists(driverEpoch) OR driverEpoch <= :h)',
              ExpressionAttributeNames: { '#st': 'status', ...(write.error ? { '#err': 'error' } : {}) },
              ExpressionAttributeValues: values,
            }),
          )
          return true
        } catch (e) {
          if (!isConditionFailure(e)) throw e
          return false
        }
      },
    }
  }

  /** The run's delivery log as the framework's `StreamDurability`; offsets are `seq` as text. */
  durability(runId: string, options: DurabilityOptions = {}): StreamDurability {
    const table = this.table
    const client = this.client
    const offset = options.offset ?? null
    const fence = options.fence
    const pk = runPk(runId)
    const fenceCheck = (): TransactWriteItem | undefined =>
      fence === undefined
        ? undefined
        : {
            ConditionCheck: {
              TableName: table,
              Key: { pk: S(pk), sk: S('RUN') },
              ConditionExpression: 'attribute_not_exists(driverEpoch) OR driverEpoch <= :h',
              ExpressionAttributeValues: { ':h': N(fence) },
            },
          }
    const entries = async (from: number) =>
      (
        await this.queryAll({
          KeyConditionExpression: 'pk = :p AND sk BETWEEN :a AND :b',
          ExpressionAttributeValues: { ':p': S(pk), ':a': S(entrySk(from)), ':b': S('LOG#99999999999999999999') },
          ConsistentRead: true,
        })
      ).map((i) => ({ offset: String(num(i, 'seq')), chunk: JSON.parse(str(i, 'chunk')!) as StreamChunk }))
    const superseded = async (e: unknown): Promise<boolean> => {
      if (!(e instanceof TransactionCanceledException)) return false
      return fence !== undefined && e.CancellationReasons?.[0]?.Code === 'ConditionalCheckFailed'
    }
    return {
      resumeFrom: () => offset,
      append: async (chunks) => {
        for (const c of chunks) {
          if (!isJsonObject(c) || typeof (c as { type?: unknown }).type !== 'string') {
            throw new TypeError('a delivery-log chunk must be an object with a string `type`')
          }
        }
        const out: Array<string> = []
        for (let i = 0; i < chunks.length; i += CHUNKS_PER_TX) {
          const batch = chunks.slice(i, i + CHUNKS_PER_TX)
          for (;;) {
            const meta = await this.getItem(pk, 'LOG')
            if (meta?.closed?.BOOL) {
              throw new Error(`the delivery log of run ${JSON.stringify(runId)} is closed; nothing was appended`)
            }
            const first = meta ? num(meta, 'nextSeq')! : 0
            const ttl = N(this.ttlSeconds())
            const items: Array<TransactWriteItem> = []
            const check = fenceCheck()
            if (check) items.push(check)
            items.push({
              Update: {
                TableName: table,
                Key: { pk: S(pk), sk: S('LOG') },
                UpdateExpression: 'SET nextSeq = :n, lastAppendAt = :now, runId = :r, #ttl = :ttl, entity = :e',
                ConditionExpression: meta
                  ? 'nextSeq = :x AND (attribute_not_exists(#c) OR #c <> :t)'
                  : 'attribute_not_exists(pk)',
                ExpressionAttributeNames: { '#ttl': 'ttl', ...(meta ? { '#c': 'closed' } : {}) },
                ExpressionAttributeValues: {
                  ':n': N(first + batch.length),
                  ':now': N(this.now()),
                  ':r': S(runId),
                  ':ttl': ttl,
                  ':e': S('log'),
                  ...(meta ? { ':x': N(first), ':t': { BOOL: true } } : {}),
                },
              },
            })
            batch.forEach((c, j) =>
              items.push({
                Put: {
                  TableName: table,
                  Item: {
                    pk: S(pk),
                    sk: S(entrySk(first + j)),
                    entity: S('entry'),
                    seq: N(first + j),
                    chunk: S(JSON.stringify(c)),
                    ttl,
                  },
                },
              }),
            )
            try {
              await client.send(new TransactWriteItemsCommand({ TransactItems: items }))
              batch.forEach((_, j) => out.push(String(first + j)))
              break
            } catch (e) {
              if (await superseded(e)) throw new SupersededError(runId, fence!)
              // Another producer appended (or closed) meanwhile: read the meta again.
              if (e instanceof TransactionCanceledException) continue
              throw e
            }
          }
        }
        return out
      },
      read: (after, signal) => {
        const pollMs = this.pollMs
        const self = this
        return (async function* () {
          let next = Number(after) + 1
          if (!Number.isInteger(next) || next < 0) {
            throw new TypeError(`offset ${JSON.stringify(after)} was not minted by this log`)
          }
          for (;;) {
            const page = await entries(next)
            for (const e of page) {
              next = Number(e.offset) + 1
              yield e
            }
            if (page.length > 0) continue
            const meta = await self.getItem(pk, 'LOG')
            if (meta?.closed?.BOOL) {
              const tail = await entries(next)
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
        const update: TransactWriteItem = {
          Update: {
            TableName: table,
            Key: { pk: S(pk), sk: S('LOG') },
            UpdateExpression: 'SET #c = :t, runId = :r, #ttl = :ttl, entity = :e, nextSeq = if_not_exists(nextSeq, :z)',
            ExpressionAttributeNames: { '#ttl': 'ttl', '#c': 'closed' },
            ExpressionAttributeValues: {
              ':t': { BOOL: true },
              ':r': S(runId),
              ':ttl': N(this.ttlSeconds()),
              ':e': S('log'),
              ':z': N(0),
            },
          },
        }
        const check = fenceCheck()
        try {
          await client.send(new TransactWriteItemsCommand({ TransactItems: check ? [check, update] : [update] }))
        } catch (e) {
          if (await superseded(e)) throw new SupersededError(runId, fence!)
          throw e
        }
      },
      snapshot: async () => {
        const meta = await this.getItem(pk, 'LOG')
        if (!meta) return []
        return entries(0)
      },
    }
  }

  private transcriptStore(): TranscriptStore {
    const toTranscript = (i: Item): Transcript => {
      const t: Transcript = {
        runId: str(i, 'runId')!,
        threadId: str(i, 'threadId')!,
        messages: (i.messages?.L ?? []).map((m) => ({ role: m.M!.role.S!, content: m.M!.content.S! })),
        savedAt: num(i, 'savedAt')!,
      }
      const exitCode = num(i, 'exitCode')
      if (exitCode !== undefined) t.exitCode = exitCode
      return t
    }
    return {
      get: async (runId) => {
        const i = await this.getItem(runPk(runId), 'TRANSCRIPT')
        return i ? toTranscript(i) : null
      },
      save: async (t, options = {}) => {
        const put = {
            TableName: this.table,
            Item: {
              pk: S(runPk(t.runId)),
              sk: S('TRANSCRIPT'),
              entity: S('transcript'),
              runId: S(t.runId),
              threadId: S(t.threadId),
              messages: { L: t.messages.map((m) => ({ M: { role: S(m.role), content: S(m.content) } })) },
              ...(t.exitCode !== undefined ? { exitCode: N(t.exitCode) } : {}),
              savedAt: N(t.savedAt),
            },
        }
        if (options.fence === undefined) {
          await this.client.send(new PutItemCommand(put))
          return true
        }
        // As the reaper's fenced save: a ConditionCheck on the run in the same transaction.
        try {
          await this.client.send(
            new TransactWriteItemsCommand({
              TransactItems: [
                {
                  ConditionCheck: {
                    TableName: this.table,
                    Key: { pk: S(runPk(t.runId)), sk: S('RUN') },
                    ConditionExpression: 'attribute_not_exists(driverEpoch) OR driverEpoch <= :h',
                    ExpressionAttributeValues: { ':h': N(options.fence) },
                  },
                },
                { Put: put },
              ],
            }),
          )
          return true
        } catch (e) {
          if (e instanceof TransactionCanceledException && e.CancellationReasons?.[0]?.Code === 'ConditionalCheckFailed') {
            return false
          }
          throw e
        }
      },
      // Transcripts carry no thread index: the thread's runs (by-thread) name them.
      listByThread: async (threadId) => {
        const runs = await this.runs.listByThread(threadId)
        const out: Array<Transcript> = []
        for (let i = 0; i < runs.length; i += 100) {
          const keys = runs.slice(i, i + 100).map((r) => ({ pk: S(runPk(r.runId)), sk: S('TRANSCRIPT') }))
          let pending: Array<Item> | undefined = keys
          while (pending && pending.length) {
            const r = await this.client.send(
              new BatchGetItemCommand({ RequestItems: { [this.table]: { Keys: pending, ConsistentRead: true } } }),
            )
            out.push(...(r.Responses?.[this.table] ?? []).map(toTranscript))
            pending = r.UnprocessedKeys?.[this.table]?.Keys as Array<Item> | undefined
          }
        }
        const order = new Map(runs.map((r, i) => [r.runId, i]))
        return out
          .filter((t) => t.threadId === threadId)
          .sort((a, b) => order.get(a.runId)! - order.get(b.runId)!)
      },
    }
  }

  private instanceStore(): SandboxInstanceStore {
    return {
      get: async (key) => {
        const i = await this.getItem(sandboxPk(key), 'SANDBOX')
        if (!i) return null
        const rec: SandboxInstanceRecord = {
          key: str(i, 'key')!,
          provider: str(i, 'provider')!,
          providerSandboxId: str(i, 'providerSandboxId')!,
          threadId: str(i, 'threadId')!,
          updatedAt: num(i, 'updatedAt')!,
        }
        const snap = str(i, 'latestSnapshotId')
        if (snap !== undefined) rec.latestSnapshotId = snap
        const run = str(i, 'latestRunId')
        if (run !== undefined) rec.latestRunId = run
        return rec
      },
      // A PutItem replaces the whole item, so omitted optionals are cleared.
      upsert: async (rec) => {
        await this.client.send(
          new PutItemCommand({
            TableName: this.table,
            Item: {
              pk: S(sandboxPk(rec.key)),
              sk: S('SANDBOX'),
              entity: S('sandbox'),
              key: S(rec.key),
              provider: S(rec.provider),
              providerSandboxId: S(rec.providerSandboxId),
              threadId: S(rec.threadId),
              updatedAt: N(rec.updatedAt),
              ...(rec.latestSnapshotId !== undefined ? { latestSnapshotId: S(rec.latestSnapshotId) } : {}),
              ...(rec.latestRunId !== undefined ? { latestRunId: S(rec.latestRunId) } : {}),
            },
          }),
        )
      },
      delete: async (key) => {
        await this.client.send(
          new DeleteItemCommand({ TableName: this.table, Key: { pk: S(sandboxPk(key)), sk: S('SANDBOX') } }),
        )
      },
    }
  }

  private leaseBackend(): LeaseBackend {
    const table = this.table
    const client = this.client
    return {
      acquire: async (key, owner, now, ttlMs) => {
        const token = randomBytes(16).toString('hex')
        const expiresAt = now + ttlMs
        try {
          await client.send(
            new PutItemCommand({
              TableName: table,
              Item: {
                pk: S(leasePk(key)),
                sk: S('LEASE'),
                entity: S('lease'),
                leaseKey: S(key),
                owner: S(owner),
                token: S(token),
                expiresAt: N(expiresAt),
                ttl: N(Math.floor((expiresAt + DAY_MS) / 1000)),
              },
              ConditionExpression: 'attribute_not_exists(pk) OR expiresAt <= :now',
              ExpressionAttributeValues: { ':now': N(now) },
            }),
          )
          return { token, expiresAt }
        } catch (e) {
          if (isConditionFailure(e)) return null
          throw e
        }
      },
      renew: async (key, owner, token, now, ttlMs) => {
        try {
          await client.send(
            new UpdateItemCommand({
              TableName: table,
              Key: { pk: S(leasePk(key)), sk: S('LEASE') },
              UpdateExpression: 'SET expiresAt = :x, #ttl = :ttl',
              ConditionExpression: '#o = :o AND #tk = :t',
              ExpressionAttributeNames: { '#ttl': 'ttl', '#o': 'owner', '#tk': 'token' },
              ExpressionAttributeValues: {
                ':x': N(now + ttlMs),
                ':ttl': N(Math.floor((now + ttlMs + DAY_MS) / 1000)),
                ':o': S(owner),
                ':t': S(token),
              },
            }),
          )
          return true
        } catch (e) {
          if (isConditionFailure(e)) return false
          throw e
        }
      },
      release: async (key, owner, token) => {
        try {
          await client.send(
            new DeleteItemCommand({
              TableName: table,
              Key: { pk: S(leasePk(key)), sk: S('LEASE') },
              ConditionExpression: '#o = :o AND #tk = :t',
              ExpressionAttributeNames: { '#o': 'owner', '#tk': 'token' },
              ExpressionAttributeValues: { ':o': S(owner), ':t': S(token) },
            }),
          )
        } catch (e) {
          if (!isConditionFailure(e)) throw e
        }
      },
    }
  }
}
