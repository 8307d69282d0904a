// The DynamoDB backend keeps the layout's sparse indexes by LAYOUT.md's rules, so the reaper's
// sweep finds what it must: a detached run stays in `reclaimable` whatever its status says unless
// it is a run status other than `running` (so one whose status is no run status, written by
// another writer, is read and reported corrupt, not hidden), and a live run naming a sandbox key
// is in `by-sandbox` until its terminal write (so the reclaim keeps a sandbox any thread's live
// run may use). This package itself refuses to write a status that is no run status.
import { describe, it, before } from 'node:test'
import assert from 'node:assert/strict'
import { GetItemCommand, PutItemCommand, QueryCommand, UpdateItemCommand } from '@aws-sdk/client-dynamodb'
import type { RunStatus } from '@tanstack/ai'
import { openBackend } from './backends.js'
import type { ReaperDynamo } from '../src/dynamodb.js'

describe('dynamodb index attributes', () => {
  let store: ReaperDynamo
  before(async () => {
    store = (await openBackend('dynamodb')).store as ReaperDynamo
  })

  const itemOrNone = async (runId: string) =>
    (
      await store.client.send(
        new GetItemCommand({ TableName: store.table, Key: { pk: { S: `RUN#${runId}` }, sk: { S: 'RUN' } }, ConsistentRead: true }),
      )
    ).Item
  const item = async (runId: string) => (await itemOrNone(runId))!

  const detachedIndex = async () =>
    (
      await store.client.send(
        new QueryCommand({
          TableName: store.table,
          IndexName: 'reclaimable',
          KeyConditionExpression: 'gsi1pk = :p',
          ExpressionAttributeValues: { ':p': { S: 'DETACHED' } },
        }),
      )
    ).Items!.map((i) => i.runId.S)

  it('a status that is no run status is refused before anything is written', async () => {
    // An app passing a status the framework does not know (JavaScript checks no types).
    await assert.rejects(
      store.runs.createOrResume({ runId: 'shouting', threadId: 't1', startedAt: 1, status: 'RUNNING' as RunStatus }),
      /status "RUNNING" is no run status .*nothing was written/,
    )
    assert.equal(await itemOrNone('shouting'), undefined)
    await store.runs.createOrResume({ runId: 'quiet', threadId: 't1', startedAt: 1 })
    await assert.rejects(store.runs.update('quiet', { status: 'RUNNING' as RunStatus }), /no run status/)
    assert.equal((await item('quiet')).status?.S, 'running')
  })

  it('a detached run whose status a writer of its own made no run status stays in the reclaimable index', async () => {
    await store.runs.createOrResume({ runId: 'later', threadId: 't2', startedAt: 1 })
    await store.runs.update('later', { detachedSince: 200 })
    // Another writer (not this package) sets a status the reaper cannot read...
    await store.client.send(
      new UpdateItemCommand({
        TableName: store.table,
        Key: { pk: { S: 'RUN#later' }, sk: { S: 'RUN' } },
        UpdateExpression: 'SET #s = :s',
        ExpressionAttributeNames: { '#s': 'status' },
        ExpressionAttributeValues: { ':s': { S: 'RUNNING' } },
      }),
    )
    // ...and the app's next write keeps the item where the sweep reads it and reports it.
    await store.runs.update('later', { sandboxKey: 'k2' })
    const later = await item('later')
    assert.equal(later.gsi1pk?.S, 'DETACHED')
    assert.equal(later.gsi1sk?.N, '200')

    // A run status other than running takes a detached run out, as before.
    await store.runs.createOrResume({ runId: 'paused', threadId: 't3', startedAt: 1 })
    await store.runs.update('paused', { detachedSince: 300 })
    await store.runs.update('paused', { status: 'interrupted' })
    assert.equal((await item('paused')).gsi1pk, undefined)

    assert.deepEqual(await detachedIndex(), ['later'])
  })

  it('a live run naming a sandbox key is in the sandbox index until its terminal write', async () => {
    await store.runs.createOrResume({ runId: 'live', threadId: 't4', startedAt: 1 })
    await store.runs.update('live', { sandboxKey: 'local:box', detachedSince: 400 })
    assert.equal((await item('live')).gsi3pk?.S, 'SANDBOX#local:box')
    await store.runs.update('live', { status: 'interrupted' })
    assert.equal((await item('live')).gsi3pk?.S, 'SANDBOX#local:box', 'an interrupted run is still live')
    await store.runs.update('live', { sandboxKey: undefined })
    assert.equal((await item('live')).gsi3pk, undefined)
    await store.runs.update('live', { sandboxKey: 'local:box2', status: 'running' })
    assert.equal((await item('live')).gsi3pk?.S, 'SANDBOX#local:box2')
    const claim = await store.runs.bumpEpoch('live')
    assert.ok(claim.claimed)
    assert.equal(await store.runs.writeTerminal('live', claim.epoch, { status: 'completed', finishedAt: 9 }), true)
    const done = await item('live')
    assert.equal(done.gsi3pk, undefined)
    assert.equal(done.gsi1pk, undefined)
  })

  it('an item written before the rule changed is indexed by its next write', async () => {
    // Detached, status RUNNING, no index attributes: what the old rule told a writer to write.
    await store.client.send(
      new PutItemCommand({
        TableName: store.table,
        Item: {
          pk: { S: 'RUN#old' },
          sk: { S: 'RUN' },
          runId: { S: 'old' },
          threadId: { S: 't5' },
          status: { S: 'RUNNING' },
          startedAt: { N: '1' },
          detachedSince: { N: '500' },
          gsi2pk: { S: 'THREAD#t5' },
          gsi2sk: { N: '1' },
        },
      }),
    )
    await store.runs.update('old', { cancelRequested: true })
    const old = await item('old')
    assert.equal(old.gsi1pk?.S, 'DETACHED')
    assert.equal(old.gsi1sk?.N, '500')
  })
})
