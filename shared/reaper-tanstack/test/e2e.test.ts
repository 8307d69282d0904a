// End to end with the published framework: a chat route (`chat()` with a scripted adapter that
// streams the agent's journal from a real local sandbox, this package's stores and durability,
// the run-record and detach middlewares) streams a run; the viewer leaves mid-run; the host
// goes away; the agent keeps writing its journal; the Rust reaper sweeps (the `reaper` CLI on
// SQLite and on PostgreSQL, the core's sweep on DynamoDB Local); the app re-opens the thread.
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { existsSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { chat, toServerSentEventsResponse, wasCancelRequested } from '@tanstack/ai'
import { interopBin, openBackend, scratch, interop, type Backend } from './backends.js'
import { withDetachOnDisconnect, withRunRecord, reattach } from '../src/middleware.js'
import { withJournalOffsets } from '../src/journal.js'
import { AGENT, FULL_OUTPUT, MINUTE, journalAdapter } from './platforms/chat-route.js'

function reaperBin(): string {
  return process.env.REAPER_CLI ?? join(process.env.CARGO_TARGET_DIR ?? 'target', 'debug', 'reaper')
}

interface Agent {
  sandboxId: string
  dir: string
  journal: string
  process: ChildProcess
  /** The agent driver's exit code (the driver exits once the agent does). */
  exited: Promise<number | null>
}

async function startAgent(root: string, runId: string): Promise<Agent> {
  const child = spawn(interopBin(), ['agent', root, runId, AGENT, journalsOf(root)], { stdio: ['ignore', 'pipe', 'inherit'] })
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)))
  const line = await new Promise<string>((resolve) => createInterface({ input: child.stdout! }).once('line', resolve))
  const info = JSON.parse(line) as { sandboxId: string; dir: string }
  return { ...info, journal: join(journalsOf(root), `${runId}.ndjson`), process: child, exited }
}

/** One journal directory for every sandbox of a test, named to the reaper as `--journal-dir`. */
const journalsOf = (root: string) => `${root}-journals`

interface Staged {
  runId: string
  threadId: string
  agent: Agent
  /** What the viewer saw before leaving. */
  seen: string
}

/**
 * The chat route, the viewer who leaves after three deltas, and the host going away; resolves
 * once the detach is stamped and the producer has stopped.
 */
async function stage(b: Backend, root: string, runId: string, detachAt: number): Promise<Staged> {
  const threadId = `thread-${runId}`
  const agent = await startAgent(root, runId)
  const store = b.store
  const sandboxKey = `local:${threadId}`
  await store.runs.createOrResume({ runId, threadId, startedAt: detachAt - MINUTE })
  await store.messages(() => runId).saveThread(threadId, [{ role: 'user', content: `Say hello (${runId})` }])
  await store.sandboxInstances.upsert({
    key: sandboxKey, provider: 'local', providerSandboxId: agent.sandboxId, threadId, latestRunId: runId, updatedAt: detachAt - MINUTE,
  })
  let detached!: () => void
  const isDetached = new Promise<void>((r) => (detached = r))
  let stopped!: () => void
  const producerStopped = new Promise<void>((r) => (stopped = r))
  const host = new AbortController()
  const adapter = journalAdapter(agent.journal, host.signal)
  const inner = adapter.chatStream.bind(adapter)
  adapter.chatStream = async function* (o: unknown) {
    try {
      yield* inner(o)
    } finally {
      stopped()
    }
  }
  const stream = chat({
    adapter: adapter as never,
    messages: [{ role: 'user', content: `Say hello (${runId})` }],
    runId,
    threadId,
    abortController: host,
    middleware: [
      withRunRecord({ runs: store.runs }),
      withDetachOnDisconnect({ runs: store.runs, sandboxKey: () => sandboxKey, now: () => detachAt, onDetached: () => detached() }),
    ],
  })
  const response = toServerSentEventsResponse(stream, {
    durability: { adapter: withJournalOffsets(store.durability(runId)), batch: 1 },
    abortController: host,
  })
  const reader = response.body!.getReader()
  const decoder = new TextDecoder()
  let sse = ''
  let seen = ''
  while ((seen.match(/"delta"/g) ?? []).length < 3) {
    const { value, done } = await reader.read()
    if (done) throw new Error(`the stream ended before three deltas: ${sse}`)
    sse += decoder.decode(value)
    seen = sse
  }
  // The viewer closes the tab: a disconnect, not a cancel.
  await reader.cancel()
  await isDetached
  // The host goes away (a deploy, a crash): nothing more is produced by the app.
  host.abort()
  await producerStopped
  const deltas = [...sse.matchAll(/"delta":"([^"]*)"/g)].map((m) => m[1]).join('')
  return { runId, threadId, agent, seen: deltas }
}

async function replay(b: Backend, runId: string): Promise<{ chunks: Array<Record<string, unknown>>; text: string }> {
  const chunks = (await b.store.durability(runId).snapshot()).map((e) => e.chunk as unknown as Record<string, unknown>)
  const text = chunks.filter((c) => c.type === 'TEXT_MESSAGE_CONTENT').map((c) => c.delta).join('')
  return { chunks, text }
}

/** The `reaper` CLI on the backend's SQLite file or PostgreSQL URL. */
function sweepCli(b: Backend, root: string): Record<string, unknown> {
  const db = b.name === 'sqlite' ? b.spec.slice('sqlite:'.length) : b.spec
  const r = spawnSync(
    reaperBin(),
    ['sweep', '--db', db, '--sandboxes', root, '--journal-dir', journalsOf(root), '--detached-ttl', '30m',
      '--quiet-window', '0s', '--run-budget', '5s', '--json'],
    { encoding: 'utf8' },
  )
  assert.ok(r.status === 0 || r.status === 1, `reaper sweep exited ${r.status}: ${r.stderr}`)
  return JSON.parse(r.stdout)
}

function sweepCore(b: Backend, root: string): Record<string, unknown> {
  return JSON.parse(interop(['sweep', b.spec, root, String(30 * MINUTE), journalsOf(root), '5000']))
}

for (const name of ['sqlite', 'dynamodb', 'postgres'] as const) {
  describe(`end to end on ${name}, swept by ${name !== 'dynamodb' ? 'the reaper CLI' : "the Rust core's sweep"}`, () => {
    let b: Backend
    let root: string
    const staged: Record<string, Staged> = {}
    let report: Record<string, unknown>
    before(async () => {
      b = await openBackend(name)
      root = join(scratch('sandboxes'), 'sandboxes')
      const now = Date.now()
      staged.finished = await stage(b, root, `run-finished-${name}`, now - 2 * MINUTE)
      staged.expired = await stage(b, root, `run-expired-${name}`, now - 2 * 60 * MINUTE)
      staged.returned = await stage(b, root, `run-returned-${name}`, now - 2 * MINUTE)
      // The agent of the first run finishes while nobody watches; the others keep waiting.
      writeFileSync(join(root, staged.finished.agent.sandboxId, 'work', 'go'), '')
      assert.equal(await staged.finished.agent.exited, 0)
      // The third viewer comes back before the sweep.
      await reattach(b.store.runs, staged.returned.runId)
      report = name !== 'dynamodb' ? sweepCli(b, root) : sweepCore(b, root)
    })
    after(async () => {
      // Agents still waiting (the returned viewer's) are let finish, so none outlives the test.
      for (const s of Object.values(staged)) {
        const work = join(root, s.agent.sandboxId, 'work')
        if (existsSync(work)) writeFileSync(join(work, 'go'), '')
      }
      await Promise.all(Object.values(staged).map((s) => s.agent.exited))
      await b.close()
    })

    it('the viewer saw the first three deltas live, and the detach stamped detachedSince and sandboxKey', async () => {
      for (const s of Object.values(staged)) assert.equal(s.seen, 'Hello, world')
      const r = (await b.store.runs.get(staged.expired.runId))!
      assert.equal(r.sandboxKey, `local:${staged.expired.threadId}`)
    })

    it('a run whose agent finished while detached is finalized: the app re-reads exactly its output and transcript', async () => {
      const s = staged.finished
      const run = (await b.store.runs.get(s.runId))!
      assert.equal(run.status, 'completed', JSON.stringify(report))
      const { text, chunks } = await replay(b, s.runId)
      assert.equal(text, FULL_OUTPUT, 'every delta exactly once, live part and replayed part')
      assert.ok(chunks.every((c) => c.type !== 'RUN_ERROR'))
      const thread = await b.store.messages(() => s.runId).loadThread(s.threadId)
      assert.deepEqual(thread, [
        { role: 'user', content: `Say hello (${s.runId})` },
        { role: 'assistant', content: FULL_OUTPUT },
      ])
      // A returning viewer's tail ends: the log is closed.
      let tailed = ''
      for await (const e of b.store.durability(s.runId).read('-1')) {
        const c = e.chunk as unknown as { type: string; delta?: string }
        if (c.type === 'TEXT_MESSAGE_CONTENT') tailed += c.delta
      }
      assert.equal(tailed, FULL_OUTPUT)
      assert.equal(await b.store.sandboxInstances.get(`local:${s.threadId}`), null, 'its sandbox was reclaimed')
      assert.equal(existsSync(join(root, s.agent.sandboxId)), false)
    })

    it('a run past its TTL is expired and the viewer sees why', async () => {
      const s = staged.expired
      const run = (await b.store.runs.get(s.runId))!
      // Why, in the framework's own words: an out-of-band cancel ended it (`wasCancelRequested`),
      // after it stayed detached past the TTL; the log is closed, so a tail ends.
      assert.equal(run.status, 'aborted', JSON.stringify(report))
      assert.equal(await wasCancelRequested(b.store.runs, s.runId), true)
      assert.ok(run.detachedSince! <= Date.now() - 30 * MINUTE)
      assert.ok(run.finishedAt !== undefined)
      let tailed = ''
      for await (const e of b.store.durability(s.runId).read('-1')) {
        const c = e.chunk as unknown as { type: string; delta?: string }
        if (c.type === 'TEXT_MESSAGE_CONTENT') tailed += c.delta
      }
      assert.equal(tailed, 'Hello, world', 'what was delivered stays; nothing is invented')
      assert.equal(await b.store.sandboxInstances.get(`local:${s.threadId}`), null)
      assert.equal(existsSync(join(root, s.agent.sandboxId)), false, 'its sandbox was destroyed')
    })

    it('a viewer who returned before the sweep is left alone', async () => {
      const s = staged.returned
      const run = (await b.store.runs.get(s.runId))!
      assert.equal(run.status, 'running')
      assert.equal(run.detachedSince, undefined)
      assert.equal(run.driverEpoch, undefined, 'never claimed')
      assert.equal((await replay(b, s.runId)).text, 'Hello, world')
      assert.ok(await b.store.sandboxInstances.get(`local:${s.threadId}`))
      assert.ok(existsSync(join(root, s.agent.sandboxId)))
    })
  })
}
