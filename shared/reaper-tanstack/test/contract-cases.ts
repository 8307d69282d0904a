// The framework's published contracts (the `.d.ts` docs of `@tanstack/ai` 0.58, the store
// reference and the sandbox adapter guide) as backend-neutral cases: contract.test.ts runs them
// in Node on SQLite, DynamoDB Local and PostgreSQL, and the D1 test Worker (d1-worker.ts) runs
// the very same cases inside workerd against a real D1 binding.
import assert from 'node:assert/strict'
import type { RunStore, StreamChunk } from '@tanstack/ai'
import { runDriverLockKey } from '../src/types.js'
import { withRunClaim } from '../src/locks.js'
import type { ReaperSqlite } from '../src/sqlite.js'
import type { ReaperDynamo } from '../src/dynamodb.js'
import type { ReaperPostgres } from '../src/postgres.js'
import type { ReaperD1 } from '../src/d1.js'

export interface CaseContext {
  /** The backend, opened with a clock `tick` moves. */
  store: ReaperSqlite | ReaperDynamo | ReaperPostgres | ReaperD1
  tick: (ms: number) => void
}

export interface Case {
  name: string
  run: () => Promise<void>
}

const text = (delta: string): StreamChunk =>
  ({ type: 'TEXT_MESSAGE_CONTENT', messageId: 'm', delta, timestamp: 1 }) as StreamChunk

/** Every case, in order; they share one database and use distinct run ids. */
export function contractCases(ctx: CaseContext): Array<Case> {
  const cases: Array<Case> = []
  const it = (name: string, run: () => Promise<void>) => cases.push({ name, run })
  const runs = (): RunStore => ctx.store.runs

  it('createOrResume is insert-if-absent and never resurrects a finished run', async () => {
    const first = await runs().createOrResume({ runId: 'r-idem', threadId: 't', startedAt: 10 })
    assert.deepEqual(first, { runId: 'r-idem', threadId: 't', status: 'running', startedAt: 10 })
    await runs().update('r-idem', { status: 'completed', finishedAt: 20, usage: { promptTokens: 1, completionTokens: 2, totalTokens: 3 } })
    const again = await runs().createOrResume({ runId: 'r-idem', threadId: 'other', startedAt: 99, status: 'running' })
    assert.deepEqual(again, {
      runId: 'r-idem', threadId: 't', status: 'completed', startedAt: 10, finishedAt: 20, usage: { promptTokens: 1, completionTokens: 2, totalTokens: 3 },
    })
  })

  it('update of an unknown run is a no-op that creates nothing', async () => {
    await runs().update('r-unknown', { status: 'failed', detachedSince: 5, sandboxKey: 'k' })
    assert.equal(await runs().get('r-unknown'), null)
  })

  it('the four durable fields round-trip, read back absent when never set, and clear on explicit undefined', async () => {
    await runs().createOrResume({ runId: 'r-four', threadId: 't4', startedAt: 1 })
    const fresh = (await runs().get('r-four'))!
    for (const k of ['sandboxKey', 'detachedSince', 'cancelRequested', 'driverEpoch'] as const) {
      assert.equal(k in fresh, false, `${k} is absent (not null/false/0) when never set`)
    }
    await runs().update('r-four', { sandboxKey: 'local:t4', detachedSince: 0, cancelRequested: false, driverEpoch: 0 })
    const set = (await runs().get('r-four'))!
    assert.equal(set.sandboxKey, 'local:t4')
    assert.equal(set.detachedSince, 0)
    assert.equal(set.cancelRequested, false)
    assert.equal(set.driverEpoch, 0)
    await runs().update('r-four', { cancelRequested: true, driverEpoch: 7 })
    assert.equal((await runs().get('r-four'))!.cancelRequested, true)
    await runs().update('r-four', {
      sandboxKey: undefined, detachedSince: undefined, cancelRequested: undefined, driverEpoch: undefined,
    })
    const cleared = (await runs().get('r-four'))!
    for (const k of ['sandboxKey', 'detachedSince', 'cancelRequested', 'driverEpoch'] as const) {
      assert.equal(k in cleared, false, `${k} cleared by an explicit undefined`)
    }
  })

  it('a patch touches only the keys it names', async () => {
    await runs().createOrResume({ runId: 'r-keys', threadId: 't', startedAt: 1 })
    await runs().update('r-keys', { sandboxKey: 'k', error: { message: 'boom', code: 'E1' } })
    await runs().update('r-keys', { detachedSince: 3 })
    const r = (await runs().get('r-keys'))!
    assert.equal(r.sandboxKey, 'k')
    assert.deepEqual(r.error, { message: 'boom', code: 'E1' })
    await runs().update('r-keys', { error: undefined })
    assert.equal('error' in (await runs().get('r-keys'))!, false)
  })

  it('findActiveRun returns the running run with the greatest startedAt', async () => {
    await runs().createOrResume({ runId: 'a-old', threadId: 'ta', startedAt: 100 })
    await runs().createOrResume({ runId: 'a-new', threadId: 'ta', startedAt: 300 })
    await runs().createOrResume({ runId: 'a-mid', threadId: 'ta', startedAt: 200 })
    await runs().createOrResume({ runId: 'a-done', threadId: 'ta', startedAt: 400 })
    await runs().update('a-done', { status: 'completed', finishedAt: 401 })
    assert.equal((await runs().findActiveRun('ta'))!.runId, 'a-new')
    assert.equal(await runs().findActiveRun('t-idle'), null)
    const listed = await runs().listByThread!('ta')
    assert.deepEqual(listed.map((r) => r.runId), ['a-old', 'a-mid', 'a-new', 'a-done'])
  })

  it('listReclaimable is inclusive at the cutoff and lists only running runs with detachedSince', async () => {
    const mk = async (runId: string, patch: Parameters<RunStore['update']>[1]) => {
      await runs().createOrResume({ runId, threadId: 'tr', startedAt: 1 })
      await runs().update(runId, patch)
    }
    await mk('rc-at', { detachedSince: 5_000 })
    await mk('rc-before', { detachedSince: 4_999 })
    await mk('rc-after', { detachedSince: 5_001 })
    await mk('rc-attached', {})
    await mk('rc-done', { detachedSince: 1_000, status: 'completed', finishedAt: 2 })
    await mk('rc-paused', { detachedSince: 1_000, status: 'interrupted' })
    await mk('rc-back', { detachedSince: 1_000 })
    await runs().update('rc-back', { detachedSince: undefined })
    const listed = await runs().listReclaimable!({ now: 10_000, ttlMs: 5_000 })
    assert.deepEqual(listed.map((r) => r.runId).filter((id) => id.startsWith('rc-')).sort(), ['rc-at', 'rc-before'])
    // Back to running after a pause: the index follows the status.
    await runs().update('rc-paused', { status: 'running' })
    const again = await runs().listReclaimable!({ now: 10_000, ttlMs: 5_000 })
    assert.ok(again.some((r) => r.runId === 'rc-paused'))
  })

  it('log offsets strictly increase and read never repeats or skips', async () => {
    const log = ctx.store.durability('r-log')
    assert.deepEqual(await log.snapshot(), [], 'an empty log snapshots to []')
    const offsets: Array<string> = []
    for (let i = 0; i < 5; i++) offsets.push(...(await log.append([text(`a${i}`), text(`b${i}`)])))
    assert.equal(new Set(offsets).size, 10)
    for (let i = 1; i < offsets.length; i++) assert.ok(Number(offsets[i]) > Number(offsets[i - 1]))
    await log.close()
    for (let k = -1; k < offsets.length; k++) {
      const from = k < 0 ? '-1' : offsets[k]
      const seen: Array<string> = []
      for await (const e of log.read(from)) seen.push(e.offset)
      assert.deepEqual(seen, offsets.slice(k + 1), `read after ${from}`)
    }
    const snap = await log.snapshot()
    assert.deepEqual(snap.map((e) => (e.chunk as { delta: string }).delta), ['a0', 'b0', 'a1', 'b1', 'a2', 'b2', 'a3', 'b3', 'a4', 'b4'])
    snap.pop()
    assert.equal((await log.snapshot()).length, 10, 'snapshot returns a fresh array')
    await assert.rejects(log.append([text('late')]), /closed/)
  })

  it('a tailing read delivers chunks appended after it started and ends at close', async () => {
    const log = ctx.store.durability('r-tail')
    await log.append([text('one')])
    const got: Array<string> = []
    const reader = (async () => {
      for await (const e of log.read('-1')) {
        got.push((e.chunk as { delta: string }).delta)
        if (got.length === 1) {
          await log.append([text('two'), text('three')])
          await log.close()
        }
      }
    })()
    await reader
    assert.deepEqual(got, ['one', 'two', 'three'])
  })

  it('the sandbox instance store upserts a full replace that clears omitted optionals', async () => {
    const s = ctx.store.sandboxInstances
    assert.equal(await s.get('local:none'), null)
    await s.upsert({ key: 'local:t', provider: 'local', providerSandboxId: 'sb1', latestSnapshotId: 'snap', threadId: 't', latestRunId: 'r1', updatedAt: 5 })
    assert.deepEqual(await s.get('local:t'), { key: 'local:t', provider: 'local', providerSandboxId: 'sb1', latestSnapshotId: 'snap', threadId: 't', latestRunId: 'r1', updatedAt: 5 })
    await s.upsert({ key: 'local:t', provider: 'local', providerSandboxId: 'sb2', threadId: 't', updatedAt: 6 })
    assert.deepEqual(await s.get('local:t'), { key: 'local:t', provider: 'local', providerSandboxId: 'sb2', threadId: 't', updatedAt: 6 })
    await s.delete('local:t')
    assert.equal(await s.get('local:t'), null)
    await s.delete('local:t')
  })

  it('the message store loads [] for a new thread and saves each run its own messages', async () => {
    let current = 'm-run1'
    await runs().createOrResume({ runId: 'm-run1', threadId: 'tm', startedAt: 1 })
    const m = ctx.store.messages(() => current)
    assert.deepEqual(await m.loadThread('tm'), [])
    await m.saveThread('tm', [{ role: 'user', content: 'hi' }, { role: 'assistant', content: 'hello' }])
    ctx.tick(1)
    current = 'm-run2'
    await runs().createOrResume({ runId: 'm-run2', threadId: 'tm', startedAt: 2 })
    const thread = [...(await m.loadThread('tm')), { role: 'user' as const, content: 'again' }]
    await m.saveThread('tm', thread)
    assert.deepEqual(await m.loadThread('tm'), [
      { role: 'user', content: 'hi' }, { role: 'assistant', content: 'hello' }, { role: 'user', content: 'again' },
    ])
    assert.deepEqual((await ctx.store.transcripts.get('m-run2'))!.messages, [{ role: 'user', content: 'again' }])
    await assert.rejects(
      m.saveThread('tm', [{ role: 'assistant', content: null, toolCalls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{}' } }] }]),
      /tool calls/,
    )
  })

  it('a lock holder’s signal aborts when its lease is taken over', async () => {
    const a = ctx.store.locks({ owner: 'host-a', ttlMs: 300 })
    const c = ctx.store.locks({ owner: 'host-b', ttlMs: 300 })
    const key = runDriverLockKey('r-lock')
    let taken = false
    await a.withLock(key, async (signal) => {
      // The lease expires (virtual time), another owner takes it over; the holder's next
      // renewal finds a newer grant and aborts.
      ctx.tick(1_000)
      const r = await c.tryWithLock(key, async () => {
        taken = true
      })
      assert.equal(r.acquired, true)
      // Taken again by b so a's renewal meets a live grant of another owner.
      await c.tryWithLock(key, async () => {
        // a's renewal (every 100 ms of real time) may already have found its grant gone while
        // b's slower store took and released the lease: then the abort has fired, and waiting
        // for it would hang (seen on DynamoDB Local under load).
        await new Promise<void>((resolve) => {
          if (signal.aborted) resolve()
          else signal.addEventListener('abort', () => resolve(), { once: true })
        })
      })
      assert.equal(signal.aborted, true)
    })
    assert.equal(taken, true)
  })

  it('a busy lease is refused at once to a second owner, and free again after release', async () => {
    const a = ctx.store.locks({ owner: 'host-a' })
    const c = ctx.store.locks({ owner: 'host-b' })
    const key = runDriverLockKey('r-busy')
    await a.withLock(key, async () => {
      assert.equal((await c.tryWithLock(key, async () => 1)).acquired, false)
    })
    assert.deepEqual(await c.tryWithLock(key, async () => 1), { acquired: true, value: 1 })
  })

  it('a claim bumps driverEpoch, refuses terminal and unknown runs, and fences the superseded driver', async () => {
    await runs().createOrResume({ runId: 'r-fence', threadId: 't', startedAt: 1 })
    const locks = ctx.store.locks({ owner: 'host-a' })
    const r = await withRunClaim(ctx.store.runs, locks, 'r-fence', async (claim) => {
      assert.equal(claim.epoch, 1)
      const log = ctx.store.durability('r-fence', { fence: claim.epoch })
      await log.append([text('mine')])
      // A later claim (another host, or the reaper) supersedes this one.
      const later = await ctx.store.runs.bumpEpoch('r-fence')
      assert.deepEqual(later.claimed && later.epoch, 2)
      await assert.rejects(log.append([text('stale')]), /claimed by a later driver/)
      assert.equal(await ctx.store.runs.writeTerminal('r-fence', claim.epoch, { status: 'completed', finishedAt: 9 }), false)
      return 'done'
    })
    assert.deepEqual(r, { claimed: true, value: 'done' })
    assert.deepEqual((await ctx.store.durability('r-fence').snapshot()).map((e) => (e.chunk as { delta: string }).delta), ['mine'])
    assert.equal(await ctx.store.runs.writeTerminal('r-fence', 2, { status: 'failed', finishedAt: 9, error: { message: 'x', code: 'c' } }), true)
    const done = (await runs().get('r-fence'))!
    assert.equal(done.status, 'failed')
    assert.deepEqual(done.error, { message: 'x', code: 'c' })
    assert.deepEqual(await withRunClaim(ctx.store.runs, locks, 'r-fence', async () => 0), { claimed: false, reason: 'terminal' })
    assert.deepEqual(await withRunClaim(ctx.store.runs, locks, 'r-nobody', async () => 0), { claimed: false, reason: 'unknown' })
    assert.equal((await runs().get('r-fence'))!.driverEpoch, 2, 'a refused claim never moves the epoch')
  })

  it('a superseded holder’s fenced close, transcript save and update land nothing, as the Rust ports', async () => {
    await runs().createOrResume({ runId: 'r-fw', threadId: 'tfw', startedAt: 1 })
    await runs().update('r-fw', { detachedSince: 5 })
    const first = await ctx.store.runs.bumpEpoch('r-fw')
    const second = await ctx.store.runs.bumpEpoch('r-fw')
    assert.ok(first.claimed && second.claimed)
    const stale = first.claimed ? first.epoch : -1
    const current = second.claimed ? second.epoch : -1
    const t = { runId: 'r-fw', threadId: 'tfw', messages: [{ role: 'user', content: 'x' }], savedAt: 3 }
    assert.equal(await ctx.store.transcripts.save(t, { fence: stale }), false)
    assert.equal(await ctx.store.transcripts.get('r-fw'), null)
    assert.equal(await ctx.store.transcripts.save(t, { fence: current }), true)
    assert.equal(await ctx.store.runs.updateFenced('r-fw', stale, { detachedSince: undefined }), 'superseded')
    assert.equal((await runs().get('r-fw'))!.detachedSince, 5)
    assert.equal(await ctx.store.runs.updateFenced('r-fw', current, { detachedSince: undefined, cancelRequested: true }), 'written')
    const after = (await runs().get('r-fw'))!
    assert.equal(after.detachedSince, undefined)
    assert.equal(after.cancelRequested, true)
    assert.equal(await ctx.store.runs.updateFenced('r-none', current, {}), 'unknown')
    await assert.rejects(ctx.store.durability('r-fw', { fence: stale }).close(), /claimed by a later driver/)
    await ctx.store.durability('r-fw').append([text('still open')])
    await ctx.store.durability('r-fw', { fence: current }).close()
    await assert.rejects(ctx.store.durability('r-fw').append([text('late')]), /closed/)
  })
  return cases
}
