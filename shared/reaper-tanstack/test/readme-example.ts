// The README's "Use it from a TanStack AI app" wiring, compiled with the tests so it stays true.
// Not run: it needs a real model adapter.
import { chat, toServerSentEventsResponse, type AnyTextAdapter } from '@tanstack/ai'
import { withDetachOnDisconnect, withRunRecord, withJournalOffsets } from '../src/index.js'
import { ReaperSqlite } from '../src/sqlite.js'

declare const adapter: AnyTextAdapter

export function route(reaper: Pick<ReaperSqlite, 'runs' | 'messages' | 'durability'>) {
  return async function POST(request: Request) {
    const { runId, threadId, messages, sandboxKey } = await request.json()
    await reaper.messages(() => runId).saveThread(threadId, messages)
    const stream = chat({
      adapter, messages, runId, threadId,
      middleware: [
        withRunRecord({ runs: reaper.runs }),
        withDetachOnDisconnect({ runs: reaper.runs, sandboxKey: () => sandboxKey }),
      ],
    })
    const durability = withJournalOffsets(reaper.durability(runId, { offset: request.headers.get('last-event-id') }))
    return toServerSentEventsResponse(stream, { durability: { adapter: durability } })
  }
}

// The README's other backends, opened as it shows.
import { ReaperPostgres } from '../src/postgres.js'
import { ReaperD1, type D1Database } from '../src/d1.js'
import { ReaperDynamo } from '../src/dynamodb.js'

export async function otherBackends(env: { DB: D1Database }) {
  const pg = await ReaperPostgres.open({ connectionString: process.env.DATABASE_URL })
  const d1 = await ReaperD1.open(env.DB)
  const dynamo = new ReaperDynamo({ table: 'reaper' })
  return [route(pg), route(d1), route(dynamo)]
}
