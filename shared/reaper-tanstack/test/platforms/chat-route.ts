// The app side of the platform end-to-end tests: a chat route built with the published
// `@tanstack/ai` (`chat()` with a scripted model adapter that streams the agent's journal, this
// package's stores and durability, the run-record and detach middlewares), a viewer who leaves
// mid-run, and the host going away. The sweep under test is the platform's (the Lambda handler,
// the Worker); what the app re-reads afterwards is checked by the suites.
import { existsSync, openSync, readSync, closeSync, statSync } from 'node:fs'
import { chat, toServerSentEventsResponse, type RunStore, type StreamChunk, type StreamDurability } from '@tanstack/ai'
import { withDetachOnDisconnect, withRunRecord } from '../../src/middleware.js'
import { withJournalOffsets } from '../../src/journal.js'
import type { MessageStore, SandboxInstanceStore } from '../../src/types.js'

export const MINUTE = 60_000

/** The agent: three deltas, then it waits for `go` in its working directory, then three more. */
export const AGENT = [
  `printf '{"delta":"Hello"}\\n{"delta":", "}\\n{"delta":"world"}\\n'`,
  'while [ ! -f go ]; do sleep 0.05; done',
  `printf '{"delta":" and"}\\n{"delta":" goodbye"}\\n{"delta":"!"}\\n'`,
].join('; ')
export const FULL_OUTPUT = 'Hello, world and goodbye!'
/** What the viewer sees live before leaving. */
export const LIVE_OUTPUT = 'Hello, world'

/** The stores a chat route needs, whatever the backend. */
export interface AppStores {
  runs: RunStore
  durability: (runId: string) => StreamDurability
  messages: (runFor: (threadId: string) => string) => MessageStore
  sandboxInstances: SandboxInstanceStore
}

/** An agent running in a real sandbox, as the platform's provider names it. */
export interface SandboxedAgent {
  /** The instance record's provider (what the platform's reaper routes by). */
  provider: string
  sandboxId: string
  /** The journal file on this machine, which the scripted model adapter streams. */
  journal: string
}

/**
 * The scripted model adapter: streams the agent's journal as AG-UI events, one per line, each
 * carrying the byte offset just past its line, until the run is aborted.
 */
export function journalAdapter(journal: string, signal: AbortSignal) {
  return {
    kind: 'text' as const,
    name: 'journal-script',
    model: 'script-1',
    '~types': {} as never,
    // The engine does not hand adapters its abort signal: the route passes its own.
    async *chatStream(_options: unknown): AsyncGenerator<StreamChunk> {
      const ts = Date.now()
      yield { type: 'TEXT_MESSAGE_START', messageId: 'm1', role: 'assistant', timestamp: ts } as StreamChunk
      let offset = 0
      let pending = ''
      while (!signal.aborted) {
        const size = existsSync(journal) ? statSync(journal).size : 0
        if (size > offset) {
          const fd = openSync(journal, 'r')
          const buf = Buffer.alloc(size - offset)
          readSync(fd, buf, 0, buf.length, offset)
          closeSync(fd)
          const text = pending + buf.toString('utf8')
          let start = 0
          let end = offset - Buffer.byteLength(pending)
          for (let nl = text.indexOf('\n'); nl >= 0; nl = text.indexOf('\n', start)) {
            const line = text.slice(start, nl)
            end += Buffer.byteLength(line) + 1
            start = nl + 1
            const parsed = JSON.parse(line) as { delta?: string }
            if (typeof parsed.delta === 'string') {
              yield { type: 'TEXT_MESSAGE_CONTENT', messageId: 'm1', delta: parsed.delta, journalEnd: end, timestamp: ts } as unknown as StreamChunk
            }
          }
          pending = text.slice(start)
          offset = size
        }
        // Polling the journal is the adapter's job (an agent's output arrives when it arrives);
        // no verdict depends on this interval.
        await new Promise<void>((r) => {
          const t = setTimeout(r, 20)
          signal.addEventListener('abort', () => (clearTimeout(t), r()), { once: true })
        })
      }
    },
    async structuredOutput(): Promise<never> {
      throw new Error('not scripted')
    },
  }
}

export interface Staged {
  runId: string
  threadId: string
  sandboxKey: string
  agent: SandboxedAgent
  /** The deltas the viewer saw before leaving. */
  seen: string
}

/**
 * The chat route streams `runId` with `agent`'s journal; the viewer leaves after three deltas
 * (a disconnect, not a cancel), and the host goes away. Resolves once the detach is stamped (at
 * `detachAt`, the injected clock) and the producer has stopped.
 */
export async function stageDetachedRun(
  store: AppStores,
  runId: string,
  agent: SandboxedAgent,
  detachAt: number,
): Promise<Staged> {
  const threadId = `thread-${runId}`
  const sandboxKey = `${agent.provider}:${threadId}`
  await store.runs.createOrResume({ runId, threadId, startedAt: detachAt - MINUTE })
  await store.messages(() => runId).saveThread(threadId, [{ role: 'user', content: `Say hello (${runId})` }])
  await store.sandboxInstances.upsert({
    key: sandboxKey,
    provider: agent.provider,
    providerSandboxId: agent.sandboxId,
    threadId,
    latestRunId: runId,
    updatedAt: detachAt - MINUTE,
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
  while ((sse.match(/"delta"/g) ?? []).length < 3) {
    const { value, done } = await reader.read()
    if (done) throw new Error(`the stream ended before three deltas: ${sse}`)
    sse += decoder.decode(value)
  }
  // The viewer closes the tab: a disconnect, not a cancel.
  await reader.cancel()
  await isDetached
  // The host goes away (a deploy, a crash): nothing more is produced by the app.
  host.abort()
  await producerStopped
  const seen = [...sse.matchAll(/"delta":"([^"]*)"/g)].map((m) => m[1]).join('')
  return { runId, threadId, sandboxKey, agent, seen }
}

/** What a returning viewer replays: every chunk of the log, and its text. */
export async function replay(store: AppStores, runId: string): Promise<{ chunks: Array<Record<string, unknown>>; text: string }> {
  const chunks = (await store.durability(runId).snapshot()).map((e) => e.chunk as unknown as Record<string, unknown>)
  const text = chunks.filter((c) => c.type === 'TEXT_MESSAGE_CONTENT').map((c) => c.delta).join('')
  return { chunks, text }
}

/** What a viewer tailing the log from the start gets; resolves only if the log is closed. */
export async function tail(store: AppStores, runId: string): Promise<string> {
  let text = ''
  for await (const e of store.durability(runId).read('-1')) {
    const c = e.chunk as unknown as { type: string; delta?: string }
    if (c.type === 'TEXT_MESSAGE_CONTENT') text += c.delta
  }
  return text
}
