// End to end on DynamoDB Local, swept by the Lambda handler itself: the app (the published
// `chat()`, this package's DynamoDB stores and durability) streams three runs whose agents write
// their journals in real local sandboxes served by `reaper-sandboxd`; each viewer leaves mid-run
// and the host goes away; one viewer comes back; then the `reaper-lambda` binary, polling
// cargo-lambda's Lambda runtime emulator with the environment the SAM template gives it, is
// invoked once as EventBridge would; the app re-opens the threads.
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { wasCancelRequested } from '@tanstack/ai'
import { openBackend, scratch, type Backend } from '../backends.js'
import type { ReaperDynamo } from '../../src/dynamodb.js'
import { reattach } from '../../src/middleware.js'
import { AGENT, FULL_OUTPUT, LIVE_OUTPUT, MINUTE, replay, stageDetachedRun, tail, type Staged } from './chat-route.js'
import { LambdaEmulator, Sandboxd, agentExited } from './services.js'

/** An EventBridge rule's "Scheduled Event" envelope, the shape AWS documents. */
const SCHEDULED_EVENT = {
  version: '0',
  id: '5f1c0e43-0000-4000-8000-000000000000',
  'detail-type': 'Scheduled Event',
  source: 'aws.events',
  account: '123456789012',
  time: '2026-12-04T12:00:00Z',
  region: 'us-east-1',
  resources: ['arn:aws:events:us-east-1:123456789012:rule/reaper-sweep'],
  detail: {},
}

describe('end to end on DynamoDB Local, swept by the Lambda handler in the Lambda runtime emulator', () => {
  let b: Backend
  let store: ReaperDynamo
  let sandboxd: Sandboxd
  let lambda: LambdaEmulator
  const staged: Record<'finished' | 'expired' | 'returned', Staged> = {} as never
  let report: Record<string, unknown>

  before(async () => {
    b = await openBackend('dynamodb')
    store = b.store as ReaperDynamo
    const tmp = scratch('lambda')
    const journals = join(tmp, 'journals')
    sandboxd = await Sandboxd.start(tmp)
    lambda = await LambdaEmulator.start(tmp)
    const now = Date.now()
    const run = async (label: string, detachAt: number): Promise<Staged> => {
      const runId = `run-${label}-lambda`
      const sbx = await sandboxd.create(journals)
      await sandboxd.startAgent(sbx.id, runId, AGENT)
      const agent = { provider: 'sandboxd', sandboxId: sbx.id, journal: join(sbx.journalDir, `${runId}.ndjson`) }
      return stageDetachedRun(store, runId, agent, detachAt)
    }
    staged.finished = await run('finished', now - 2 * MINUTE)
    staged.expired = await run('expired', now - 2 * 60 * MINUTE)
    staged.returned = await run('returned', now - 2 * MINUTE)
    // The agent of the first run finishes while nobody watches; the others keep waiting.
    await sandboxd.exec(staged.finished.agent.sandboxId, 'touch go')
    await agentExited(staged.finished.agent.journal)
    // The third viewer comes back before the sweep.
    await reattach(store.runs, staged.returned.runId)

    // The function as infra/aws/template.yaml configures it, with the emulator's endpoint.
    lambda.startFunction({
      REAPER_TABLE: b.spec.slice('dynamodb:'.length),
      REAPER_SANDBOXD_URL: sandboxd.url,
      REAPER_SANDBOXD_TOKEN: sandboxd.token,
      REAPER_DETACHED_TTL: '30m',
      REAPER_RUN_BUDGET: '5s',
      REAPER_QUIET_WINDOW: '50ms',
      REAPER_STEP_TIMEOUT: '10s',
      REAPER_JOURNAL_DIR: journals,
      REAPER_BUDGET: '60s',
      REAPER_DEADLINE_MARGIN: '5s',
      AWS_ENDPOINT_URL_DYNAMODB: process.env.REAPER_DYNAMODB_ENDPOINT!,
      AWS_REGION: 'us-east-1',
      AWS_ACCESS_KEY_ID: 'local',
      AWS_SECRET_ACCESS_KEY: 'local',
      AWS_EC2_METADATA_DISABLED: 'true',
    })
    report = await lambda.invoke(SCHEDULED_EVENT)
  })

  after(async () => {
    // The returned viewer's agent is still waiting: its sandbox goes, so nothing outlives the test.
    if (staged.returned) await sandboxd.destroy(staged.returned.agent.sandboxId)
    await lambda?.stop()
    await sandboxd?.stop()
    await b?.close()
  })

  it('the viewer saw the first three deltas live, and the detach stamped detachedSince and sandboxKey', async () => {
    for (const s of Object.values(staged)) assert.equal(s.seen, LIVE_OUTPUT)
    const r = (await store.runs.get(staged.expired.runId))!
    assert.equal(r.sandboxKey, `sandboxd:${staged.expired.threadId}`)
    assert.ok(r.detachedSince !== undefined)
  })

  it('the Lambda answered the scheduled event with its report: one run finalized, one expired, the returned one not considered', () => {
    const outcomes = report.outcomes as Record<string, number>
    assert.equal((report.sweep as { state: string }).state, 'swept', JSON.stringify(report))
    assert.equal(report.considered, 2, JSON.stringify(report))
    assert.deepEqual([outcomes.finalized, outcomes.expired, outcomes.failed], [1, 1, 0], JSON.stringify(report))
    const runs = report.runs as Array<{ runId: string; outcome: string }>
    assert.deepEqual(
      Object.fromEntries(runs.map((r) => [r.runId, r.outcome])),
      { [staged.finished.runId]: 'finalized', [staged.expired.runId]: 'expired' },
    )
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
    // A returning viewer's tail ends: the log is closed.
    assert.equal(await tail(store, s.runId), FULL_OUTPUT)
    assert.equal(await store.sandboxInstances.get(s.sandboxKey), null, 'its instance record was removed')
    assert.equal(await sandboxd.status(s.agent.sandboxId), null, 'its sandbox was destroyed through sandboxd')
  })

  it('a run past its TTL is expired and the viewer sees why', async () => {
    const s = staged.expired
    const run = (await store.runs.get(s.runId))!
    // Why, in the framework's own words: an out-of-band cancel ended it (`wasCancelRequested`),
    // after it stayed detached past the TTL; the log is closed, so a tail ends.
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
