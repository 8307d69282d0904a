// The README's "Use it from a TanStack AI app" wiring, compiled with the tests so it stays true.
// Not run: it needs a real model adapter.
import { chat, toServerSentEventsResponse, type AnyTextAdapter } from '@tanstack/ai'
import { withDetachOnDisconnect, withRunRecord, withJournalOffsets } from '../src/index.js'
import { ReaperSqlite } from '../src/sqlite.js'

declare const adapter: AnyTextAdapter

export function route(reaper: ReaperSqlite) {
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
