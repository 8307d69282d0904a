// The two-language corpus (odd ids, every field, large usage, many chunks) and this package's
// side of writing and reading it; corpus.test.ts (Node) and d1-worker.ts (workerd) use it.
import assert from 'node:assert/strict'
import type { RunRecord, StreamChunk } from '@tanstack/ai'
import type { SandboxInstanceRecord, Transcript } from '../src/types.js'
import type { ReaperSqlite } from '../src/sqlite.js'
import type { ReaperDynamo } from '../src/dynamodb.js'
import type { ReaperPostgres } from '../src/postgres.js'
import type { ReaperD1 } from '../src/d1.js'

type Store = ReaperSqlite | ReaperDynamo | ReaperPostgres | ReaperD1

export interface Entry {
  run: RunRecord
  chunks: Array<StreamChunk>
  closed: boolean
  transcript?: Transcript
  instance?: SandboxInstanceRecord
}

const ODD_IDS = [
  'ünïcödé-线程-🧵-\u0301',
  `long-${'x'.repeat(1100)}`,
  `long-unicode-${'é'.repeat(700)}`,
  `$(rm -rf /); \`touch pwned\` 'q' "dq" \\ ; | & > < * ? ~ #`,
  'line\nbreak\ttab\r',
  'run:with/slashes/../and %2F',
  '-starts-with-dash',
  ' padded ',
]

function bigUsage(seed: number): Record<string, unknown> {
  const usage: Record<string, unknown> = {
    promptTokens: 1_000_000 + seed,
    completionTokens: 2 ** 53 - 1 - seed,
    totalTokens: 123_456_789,
    cost: 0.000123 + seed,
    cached: true,
    note: null,
    providerUsageDetails: { tiers: [1, 2.5, -3, 'four', false, null, { deep: [[[]]] }] },
  }
  for (let i = 0; i < 200; i++) usage[`k${i}-ü`] = { i, s: `v${i}`.repeat(i % 7) }
  return usage
}

export function corpus(tag: string): Array<Entry> {
  const out: Array<Entry> = []
  const statuses = ['running', 'interrupted', 'completed', 'failed', 'aborted'] as const
  ODD_IDS.forEach((odd, i) => {
    const runId = `${tag}-${odd}`
    const threadId = `${tag}-thread-${odd}`
    const status = statuses[i % statuses.length]
    const run: RunRecord = {
      runId,
      threadId,
      status,
      startedAt: 1_700_000_000_000 + i,
      usage: bigUsage(i) as unknown as RunRecord['usage'],
      sandboxKey: `local:${odd}`,
      detachedSince: 1_700_000_100_000 + i,
      cancelRequested: i % 2 === 0,
      driverEpoch: i * 3,
    }
    if (status !== 'running' && status !== 'interrupted') run.finishedAt = 1_700_000_200_000 + i
    if (status === 'failed') run.error = { message: `boom ${odd}`, code: `E_${i}` }
    if (i === 4) run.error = { message: 'message without a code' }
    const many = i === 0 ? 600 : 3 + i
    const chunks = Array.from({ length: many }, (_, k) => ({
      type: 'TEXT_MESSAGE_CONTENT',
      messageId: `m-${odd}`,
      delta: `${k}:${odd}`,
      timestamp: 1_700_000_000_000 + k,
      nested: { k, list: [k, `${k}`, null, true], ü: 'ß' },
    })) as unknown as Array<StreamChunk>
    const entry: Entry = {
      run,
      chunks,
      closed: i % 2 === 1,
      transcript: {
        runId,
        threadId,
        messages: [
          { role: 'user', content: `prompt ${odd}` },
          { role: 'assistant', content: `reply ${odd}\n${'🙂'.repeat(i * 50)}` },
        ],
        savedAt: 1_700_000_300_000 + i,
        ...(i % 3 === 0 ? {} : { exitCode: i - 3 }),
      },
    }
    if (i !== 2) {
      entry.instance = {
        key: `local:${odd}`,
        provider: 'local',
        providerSandboxId: `sb-${i}`,
        threadId,
        updatedAt: 1_700_000_400_000 + i,
        ...(i % 2 === 0 ? { latestSnapshotId: `snap-${odd}`, latestRunId: runId } : {}),
      }
    }
    out.push(entry)
  })
  // A run with nothing optional at all.
  out.push({ run: { runId: `${tag}-bare`, threadId: `${tag}-bare-thread`, status: 'running', startedAt: 0 }, chunks: [], closed: false })
  return out
}

/** JSON's view of a value, without nulls the Rust side prints for absent optionals. */
function plain(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(plain)
  if (v && typeof v === 'object') {
    return Object.fromEntries(Object.entries(v).filter(([, x]) => x !== undefined).map(([k, x]) => [k, plain(x)]))
  }
  return v
}

export function stripAbsent(e: Entry): unknown {
  const o = JSON.parse(JSON.stringify(e)) as Record<string, unknown>
  for (const k of ['transcript', 'instance']) if (o[k] === null) delete o[k]
  const inst = o.instance as Record<string, unknown> | undefined
  if (inst) for (const k of Object.keys(inst)) if (inst[k] === null) delete inst[k]
  return plain(o)
}

export async function writeTs(b: { store: Store }, entries: Array<Entry>) {
  for (const e of entries) {
    await b.store.runs.createOrResume({ runId: e.run.runId, threadId: e.run.threadId, startedAt: e.run.startedAt, status: e.run.status })
    const { runId, threadId, startedAt, status, ...rest } = e.run
    void threadId, startedAt, status
    await b.store.runs.update(runId, rest)
    const log = b.store.durability(runId)
    if (e.chunks.length) await log.append(e.chunks)
    if (e.closed) await log.close()
    if (e.transcript) await b.store.transcripts.save(e.transcript)
    if (e.instance) await b.store.sandboxInstances.upsert(e.instance)
  }
}

export async function readTs(b: { store: Store }, entries: Array<Entry>): Promise<Array<Entry>> {
  const out: Array<Entry> = []
  for (const e of entries) {
    const run = (await b.store.runs.get(e.run.runId))!
    const log = b.store.durability(e.run.runId)
    const snap = await log.snapshot()
    snap.forEach((x, i) => assert.equal(x.offset, String(i)))
    const closed = e.closed
      ? await (async () => {
          // A closed log ends a tail; an open one would wait, so only closed ones are tailed.
          const seen: Array<unknown> = []
          for await (const x of log.read('-1')) seen.push(x)
          return seen.length === snap.length
        })()
      : false
    const transcript = await b.store.transcripts.get(e.run.runId)
    const instance = e.run.sandboxKey ? await b.store.sandboxInstances.get(e.run.sandboxKey) : null
    out.push({
      run,
      chunks: snap.map((x) => x.chunk),
      closed,
      ...(transcript ? { transcript } : {}),
      ...(instance ? { instance } : {}),
    })
  }
  return out
}

export const ids = (entries: Array<Entry>) => ({
  runIds: entries.map((e) => e.run.runId),
  instanceKeys: entries.map((e) => e.run.sandboxKey ?? null),
})

