// End to end on D1, swept by the reaper's own Worker in workerd: the app (the published
// `chat()`, this package's D1 backend over the Worker's `DB` binding, reached from Node through
// Miniflare) streams three runs whose agents write their journals in real local sandboxes served
// by `reaper-sandboxd`; each viewer leaves mid-run and the host goes away; one viewer comes back;
// then the Worker's Durable Object alarm sweeps (armed by its admin bootstrap route, as a first
// deploy does) against the same sandboxd; the app re-opens the threads.
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync, existsSync } from 'node:fs'
import { join } from 'node:path'
import { wasCancelRequested } from '@tanstack/ai'
import { ReaperD1, type D1Database } from '../../src/d1.js'
import { scratch } from '../backends.js'
import { reattach } from '../../src/middleware.js'
import { AGENT, FULL_OUTPUT, LIVE_OUTPUT, MINUTE, replay, stageDetachedRun, tail, type Staged } from './chat-route.js'
import { Sandboxd, agentExited } from './services.js'
import { ReaperWorker } from './worker.js'

describe('end to end on D1, swept by the reaper Worker in workerd', () => {
  let store: ReaperD1
  let sandboxd: Sandboxd
  let worker: ReaperWorker
  const staged: Record<'finished' | 'expired' | 'returned', Staged> = {} as never
  let report: Record<string, unknown>

  before(async () => {
    const tmp = scratch('worker')
    const journals = join(tmp, 'journals')
    sandboxd = await Sandboxd.start(tmp)
    worker = await ReaperWorker.start(
      {
        REAPER_DETACHED_TTL: '30m',
        REAPER_RUN_BUDGET: '5s',
        REAPER_QUIET_WINDOW: '0s',
        // One sweep in this test: the next alarm is an interval away.
        REAPER_EVERY: '10m',
        REAPER_WALL_LIMIT: '1m',
        REAPER_SANDBOXD_URL: sandboxd.url,
        REAPER_JOURNAL_DIR: journals,
      },
      { REAPER_SANDBOXD_TOKEN: sandboxd.token },
    )
    store = await ReaperD1.open((await worker.db()) as D1Database, { pollMs: 20 })
    const now = Date.now()
    const run = async (label: string, detachAt: number): Promise<Staged> => {
      const runId = `run-${label}-worker`
      const sbx = await sandboxd.create(journals)
      await sandboxd.startAgent(sbx.id, runId, AGENT)
      const agent = { provider: 'sandboxd', sandboxId: sbx.id, journal: join(sbx.journalDir, `${runId}.ndjson`) }
      return stageDetachedRun(store, runId, agent, detachAt)
    }
    staged.finished = await run('finished', now - 2 * MINUTE)
    staged.expired = await run('expired', now - 2 * 60 * MINUTE)
    staged.returned = await run('returned', now - 2 * MINUTE)
    await sandboxd.exec(staged.finished.agent.sandboxId, 'touch go')
    await agentExited(staged.finished.agent.journal)
    await reattach(store.runs, staged.returned.runId)
    report = await worker.sweep()
  })

  after(async () => {
    if (staged.returned) await sandboxd.destroy(staged.returned.agent.sandboxId)
    await worker?.stop()
    await sandboxd?.stop()
  })

  it('the viewer saw the first three deltas live, and the detach stamped detachedSince and sandboxKey', async () => {
    for (const s of Object.values(staged)) assert.equal(s.seen, LIVE_OUTPUT)
    const r = (await store.runs.get(staged.expired.runId))!
    assert.equal(r.sandboxKey, `sandboxd:${staged.expired.threadId}`)
    assert.ok(r.detachedSince !== undefined)
  })

  it("the Worker's alarm swept: one run finalized, one expired, the returned one not considered", () => {
    const outcomes = report.outcomes as Record<string, number>
    assert.equal((report.sweep as { state: string }).state, 'swept', JSON.stringify(report))
    assert.equal(report.considered, 2, JSON.stringify(report))
    assert.deepEqual([outcomes.finalized, outcomes.expired, outcomes.failed], [1, 1, 0], JSON.stringify(report))
  })

  it('a run whose agent finished while detached is finalized: the app re-reads exactly its output and transcript', async () => {
    const s = staged.finished
    const run = (await store.runs.get(s.runId))!
    assert.equal(run.status, 'completed', JSON.stringify(report))
    const { text, chunks } = await replay(store, s.runId)
    assert.equal(text, FULL_OUTPUT, 'every delta exactly once, live part and replayed part')
    assert.ok(chunks.every((c) => c.type !== 'RUN_ERROR'))
    assert.deepEqual(await store.messages(() => s.runId).loadThread(s.threadId), [
      { role: 'user', content: `Say hello (${s.runId})` },
      { role: 'assistant', content: FULL_OUTPUT },
    ])
    assert.equal(await tail(store, s.runId), FULL_OUTPUT)
    assert.equal(await store.sandboxInstances.get(s.sandboxKey), null, 'its instance record was removed')
    assert.equal(await sandboxd.status(s.agent.sandboxId), null, 'its sandbox was destroyed through sandboxd')
  })

  it('a run past its TTL is expired and the viewer sees why', async () => {
    const s = staged.expired
    const run = (await store.runs.get(s.runId))!
    assert.equal(run.status, 'aborted', JSON.stringify(report))
    assert.equal(await wasCancelRequested(store.runs, s.runId), true)
    assert.ok(run.detachedSince! <= Date.now() - 30 * MINUTE)
    assert.ok(run.finishedAt !== undefined)
    assert.equal(await tail(store, s.runId), LIVE_OUTPUT, 'what was delivered stays; nothing is invented')
    assert.equal(await store.sandboxInstances.get(s.sandboxKey), null)
    assert.equal(await sandboxd.status(s.agent.sandboxId), null, 'its sandbox (and the waiting agent) was destroyed')
  })

  it('a viewer who returned before the sweep is left alone', async () => {
    const s = staged.returned
    const run = (await store.runs.get(s.runId))!
    assert.equal(run.status, 'running')
    assert.equal(run.detachedSince, undefined)
    assert.equal(run.driverEpoch, undefined, 'never claimed')
    assert.equal((await replay(store, s.runId)).text, LIVE_OUTPUT)
    assert.ok(await store.sandboxInstances.get(s.sandboxKey))
    assert.deepEqual((await sandboxd.status(s.agent.sandboxId))?.agents.map((a) => a.runId), [s.runId])
  })
})
