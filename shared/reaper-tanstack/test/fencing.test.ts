// Fencing across languages: a TypeScript host taking over detached runs (the run's driver lease
// through this package's LockStore, then the `driverEpoch` bump, then fenced writes) while the
// Rust reaper sweeps the same runs at the same moment (the `reaper` CLI on SQLite and on
// PostgreSQL, the core's sweep on DynamoDB Local). Every run must be driven by exactly one of them, with every chunk of
// the agent's output in the log exactly once, and one terminal write.
import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import type { StreamChunk } from '@tanstack/ai'
import { interop, interopBin, openBackend, scratch, type Backend } from './backends.js'
import { withRunClaim } from '../src/locks.js'
import { SupersededError } from '../src/types.js'

const TRIALS = Number(process.env.REAPER_FENCING_TRIALS ?? 30)
const WORDS = ['Hello', ', ', 'world', ' and', ' goodbye', '!', ' More', ' words', ' to', ' race', ' over', '.']
const AGENT = `printf '${WORDS.map((w) => `{"delta":"${w}"}\\n`).join('')}'`
const FULL = WORDS.join('')
const PREFIX = 3 // what the live route delivered before the host went away

interface Line {
  delta: string
  end: number
}

function journalLines(path: string): Array<Line> {
  const bytes = readFileSync(path)
  const out: Array<Line> = []
  let start = 0
  for (let nl = bytes.indexOf(10); nl >= 0; nl = bytes.indexOf(10, start)) {
    const text = bytes.subarray(start, nl).toString('utf8')
    start = nl + 1
    try {
      const v = JSON.parse(text) as { delta?: unknown }
      if (typeof v.delta === 'string') out.push({ delta: v.delta, end: nl + 1 })
    } catch {
      // The exit sentinel and other non-JSON lines are not output.
    }
  }
  return out
}

type HostResult = 'drove' | 'busy' | 'terminal' | 'superseded'

/** The TypeScript host's takeover: what the framework's resume driver does, on this package. */
async function takeover(b: Backend, owner: string, runId: string, journal: string): Promise<HostResult> {
  const locks = b.store.locks({ owner, ttlMs: 30_000 })
  const r = await withRunClaim(b.store.runs, locks, runId, async (claim) => {
    const log = b.store.durability(runId, { fence: claim.epoch })
    const resume = Math.max(0, ...(await log.snapshot()).map((e) => Number((e.chunk as { journalEnd?: number }).journalEnd ?? 0)))
    try {
      for (const line of journalLines(journal).filter((l) => l.end > resume)) {
        if (claim.signal.aborted) return 'superseded' as const
        await log.append([
          { type: 'TEXT_MESSAGE_CONTENT', messageId: 'm1', delta: line.delta, journalEnd: line.end, origin: 'ts-host', timestamp: 0 } as unknown as StreamChunk,
        ])
      }
      const text = (await log.snapshot()).map((e) => (e.chunk as { delta?: string }).delta ?? '').join('')
      const old = await b.store.transcripts.get(runId)
      await b.store.transcripts.save({
        runId, threadId: claim.record.threadId, savedAt: Date.now(), exitCode: 0,
        messages: [...(old?.messages.filter((m) => m.role !== 'assistant') ?? []), { role: 'assistant', content: text }],
      })
      if (!(await b.store.runs.writeTerminal(runId, claim.epoch, { status: 'completed', finishedAt: Date.now() }))) {
        return 'superseded' as const
      }
      await log.close()
      return 'drove' as const
    } catch (e) {
      if (e instanceof SupersededError) return 'superseded' as const
      throw e
    }
  })
  return r.claimed ? r.value : r.reason === 'busy' ? 'busy' : 'terminal'
}

for (const name of ['sqlite', 'dynamodb', 'postgres'] as const) {
  describe(`fencing across languages on ${name}`, () => {
    it(`over ${TRIALS} runs raced by a TypeScript host and the Rust sweep: 0 double drives, 0 duplicate or lost chunks, one terminal write`, async () => {
      const b = await openBackend(name)
      const root = join(scratch('fence'), 'sandboxes')
      const journals = `${root}-journals`
      const runIds = Array.from({ length: TRIALS }, (_, i) => `fence-${name}-${String(i).padStart(3, '0')}`)
      const agents = JSON.parse(interop(['agents', root, journals, AGENT, ...runIds])) as Array<{ runId: string; sandboxId: string; exitCode: number }>
      const now = Date.now()
      for (const [i, a] of agents.entries()) {
        assert.equal(a.exitCode, 0)
        const threadId = `thread-${a.runId}`
        await b.store.runs.createOrResume({ runId: a.runId, threadId, startedAt: now - 120_000 })
        await b.store.transcripts.save({ runId: a.runId, threadId, messages: [{ role: 'user', content: 'go' }], savedAt: now - 120_000 })
        await b.store.sandboxInstances.upsert({ key: `local:${threadId}`, provider: 'local', providerSandboxId: a.sandboxId, threadId, latestRunId: a.runId, updatedAt: now })
        const lines = journalLines(join(journals, `${a.runId}.ndjson`))
        await b.store.durability(a.runId).append(
          lines.slice(0, PREFIX).map((l) => ({ type: 'TEXT_MESSAGE_CONTENT', messageId: 'm1', delta: l.delta, journalEnd: l.end, timestamp: 0 }) as unknown as StreamChunk),
        )
        // Detached in listing order, so the sweep walks the runs from the first and the host
        // from the last, and they meet in the middle.
        await b.store.runs.update(a.runId, { detachedSince: now - 60_000 + i, sandboxKey: `local:${threadId}` })
      }

      const sweepArgs =
        name !== 'dynamodb'
          ? { bin: process.env.REAPER_CLI ?? join(process.env.CARGO_TARGET_DIR ?? 'target', 'debug', 'reaper'),
              args: ['sweep', '--db', name === 'sqlite' ? b.spec.slice('sqlite:'.length) : b.spec, '--sandboxes', root, '--journal-dir', journals,
                '--detached-ttl', '30m', '--quiet-window', '0s', '--run-budget', '10s', '--max-runs', String(TRIALS), '--json'] }
          : { bin: interopBin(), args: ['sweep', b.spec, root, String(30 * 60_000), journals, '10000'] }
      const sweep = new Promise<Record<string, unknown>>((resolve, reject) => {
        const child = spawn(sweepArgs.bin, sweepArgs.args, {
          stdio: ['ignore', 'pipe', 'pipe'],
          env: { ...process.env, AWS_ENDPOINT_URL_DYNAMODB: process.env.REAPER_DYNAMODB_ENDPOINT ?? '', AWS_REGION: 'us-east-1', AWS_ACCESS_KEY_ID: 'local', AWS_SECRET_ACCESS_KEY: 'local' },
        })
        let out = ''
        let err = ''
        child.stdout.on('data', (d) => (out += d))
        child.stderr.on('data', (d) => (err += d))
        child.on('exit', (code) => (code === 0 || code === 1 ? resolve(JSON.parse(out)) : reject(new Error(`sweep exited ${code}: ${err}`))))
      })
      // The host starts once the sweep has claimed its first run (state, not time), so the two
      // meet on the runs the sweep is working on.
      const guard = Date.now() + 120_000
      while ((await b.store.runs.get(runIds[0]))!.driverEpoch === undefined) {
        assert.ok(Date.now() < guard, 'hang guard: the sweep never claimed a run')
        await new Promise((r) => setTimeout(r, 5))
      }
      // Two host workers: one walks the runs in the sweep's own order (head-on contention for
      // each run), the other from the last one back; each run is tried once by the host.
      const host: Record<string, HostResult> = {}
      const queue = [...runIds]
      await Promise.all(
        [0, 1].map(async (w) => {
          for (let id = w === 0 ? queue.shift() : queue.pop(); id !== undefined; id = w === 0 ? queue.shift() : queue.pop()) {
            host[id] = await takeover(b, `ts-host-${w}`, id, join(journals, `${id}.ndjson`))
          }
        }),
      )
      const report = await sweep
      const outcome = new Map((report.runs as Array<{ runId: string; outcome: string }>).map((r) => [r.runId, r.outcome]))

      let tsDrove = 0
      let rustDrove = 0
      const violations: Array<string> = []
      for (const runId of runIds) {
        const chunks = (await b.store.durability(runId).snapshot()).map((e) => e.chunk as unknown as Record<string, unknown>)
        const text = chunks.filter((c) => c.type === 'TEXT_MESSAGE_CONTENT').map((c) => c.delta).join('')
        const driven = chunks.slice(PREFIX).filter((c) => c.type === 'TEXT_MESSAGE_CONTENT')
        const byTs = driven.some((c) => c.origin === 'ts-host')
        const byRust = driven.some((c) => c.origin === undefined)
        const tsTerminal = host[runId] === 'drove'
        const rustTerminal = outcome.get(runId) === 'finalized'
        const run = (await b.store.runs.get(runId))!
        if (byTs && byRust) violations.push(`${runId}: driven by both`)
        if (text !== FULL) violations.push(`${runId}: text ${JSON.stringify(text)}`)
        if (Number(tsTerminal) + Number(rustTerminal) !== 1) violations.push(`${runId}: terminal writes ts=${tsTerminal} rust=${rustTerminal} (${outcome.get(runId)})`)
        if (run.status !== 'completed') violations.push(`${runId}: status ${run.status}`)
        if (tsTerminal) tsDrove++
        if (rustTerminal) rustDrove++
      }
      const refusals = {
        hostBusy: Object.values(host).filter((r) => r === 'busy').length,
        hostFoundTerminal: Object.values(host).filter((r) => r === 'terminal').length,
        hostSuperseded: Object.values(host).filter((r) => r === 'superseded').length,
        sweepNotClaimed: [...outcome.values()].filter((o) => o === 'not-claimed').length,
      }
      console.log(
        `fencing ${name}: ${TRIALS} runs; driven by the TS host ${tsDrove}, by the Rust sweep ${rustDrove}; ` +
          `refusals ${JSON.stringify(refusals)}; violations ${violations.length}`,
      )
      assert.deepEqual(violations, [])
      await b.close()
    })
  })
}
