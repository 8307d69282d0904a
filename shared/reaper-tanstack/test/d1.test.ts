// D1 inside workerd (Miniflare from npm): this package's D1 backend is bundled into a test Worker
// (d1-worker.ts) bound to a real D1 database, and
// - every contract case (the same code as on the other backends) runs inside that Worker;
// - the two-language corpus goes both ways with the Rust `reaper-d1` store (the crate the reaper's
//   Worker runs as wasm), here run natively by the interop binary (`d1-stdio`) with each of its
//   batches relayed to the same D1 binding through the Worker's /batch route.
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { build } from 'esbuild'
import { Miniflare } from 'miniflare'
import { interopBin } from './backends.js'
import { MIGRATIONS } from '../src/schema.generated.js'
import { corpus, stripAbsent, type Entry } from './corpus-cases.js'

const BASE = 'http://reaper-tanstack.test'
const bundled = await build({
  entryPoints: [fileURLToPath(new URL('./d1-worker.js', import.meta.url))],
  bundle: true,
  format: 'esm',
  platform: 'neutral',
  mainFields: ['module', 'main'],
  conditions: ['workerd', 'worker', 'import'],
  external: ['node:*'],
  write: false,
  logLevel: 'error',
})
const mf = new Miniflare({
  modules: true,
  script: bundled.outputFiles[0].text,
  compatibilityDate: '2025-09-01',
  compatibilityFlags: ['nodejs_compat'],
  d1Databases: { DB: `reaper-tanstack-${process.pid}`, FRESH: `reaper-tanstack-fresh-${process.pid}`, OLD: `reaper-tanstack-old-${process.pid}` },
})
await mf.ready
after(() => mf.dispose())

async function call(method: string, path: string, body?: unknown): Promise<unknown> {
  const res = await mf.dispatchFetch(`${BASE}${path}`, { method, body: body === undefined ? undefined : JSON.stringify(body) })
  const text = await res.text()
  assert.equal(res.status, 200, text)
  return JSON.parse(text)
}

/** The interop binary on `d1-stdio`: `input` as its first stdin line, each batch relayed to D1. */
async function interopD1(command: string, input: unknown): Promise<string> {
  const child = spawn(interopBin(), [command, 'd1-stdio'], { stdio: ['pipe', 'pipe', 'pipe'] })
  const exited = new Promise<number | null>((resolve) => child.on('exit', resolve))
  let err = ''
  child.stderr.on('data', (d) => (err += d))
  child.stdin.write(`${JSON.stringify(input)}\n`)
  let out = ''
  for await (const line of createInterface({ input: child.stdout })) {
    if (line.startsWith('@batch ')) {
      const res = await mf.dispatchFetch(`${BASE}/batch`, { method: 'POST', body: line.slice('@batch '.length) })
      child.stdin.write(`${await res.text()}\n`)
    } else {
      out += `${line}\n`
    }
  }
  child.stdin.end()
  const code = await exited
  assert.equal(code, 0, `interop ${command} d1-stdio failed: ${err}`)
  return out
}

const cases = (await call('GET', '/cases')) as Array<string>

describe('contract on d1 (inside workerd)', () => {
  it('runs the same cases as the other backends', () => {
    assert.ok(cases.length >= 14, `only ${cases.length} cases`)
  })
  for (const name of cases) {
    it(name, async () => {
      const r = (await call('POST', `/case?name=${encodeURIComponent(name)}`)) as { verdict: string; message?: string }
      assert.equal(r.verdict, 'passed', r.message)
    })
  }
})

it('a D1 database at a schema version this package does not know is refused with nothing written (in workerd)', async () => {
  const r = (await call('POST', '/schema/newer')) as { refusal: string; unchanged: boolean }
  assert.match(r.refusal, /reaper schema version 99, but this package writes version 8; nothing was written/)
  assert.equal(r.unchanged, true)
})

it('a D1 database at schema version 4 upgrades to the prefixed tables and indexes with every run kept (in workerd)', async () => {
  const r = (await call('POST', '/schema/upgrade')) as {
    versions: Array<number>
    runs: Array<string>
    indexes: Array<string>
    oldNames: Array<string>
  }
  assert.deepEqual(r.versions, MIGRATIONS.map((m) => m.version))
  assert.deepEqual(r.runs, ['run-done', 'run-far', 'run-ok'])
  assert.deepEqual(r.indexes, [
    'reaper_runs_by_thread',
    'reaper_runs_finished',
    'reaper_runs_reclaimable',
    'reaper_runs_unlistable',
  ])
  assert.deepEqual(r.oldNames, [], 'ALTER TABLE … RENAME in D1 left no unprefixed table or index')
})

describe('corpus on d1 (the Rust reaper-d1 store and the TypeScript backend on one D1 binding)', () => {
  it('what TypeScript writes in the Worker, the Rust D1 store reads back with no field lost or changed', async () => {
    const { entries, ids } = (await call('POST', '/corpus/write?tag=ts')) as { entries: Array<Entry>; ids: unknown }
    const read = JSON.parse(await interopD1('read', ids)) as Array<Entry>
    assert.equal(read.length, entries.length)
    read.forEach((r, i) => assert.deepEqual(stripAbsent(r), stripAbsent(entries[i]), `entry ${i}`))
    const chunks = entries.reduce((n, e) => n + e.chunks.length, 0)
    console.log(`corpus d1 TS->Rust: ${entries.length} runs, ${chunks} chunks`)
  })

  it('what the Rust D1 store writes, TypeScript reads back in the Worker with no field lost or changed', async () => {
    const entries = corpus('rs')
    await interopD1('write', entries)
    const read = (await call('POST', '/corpus/read', entries)) as Array<Entry>
    read.forEach((r, i) => assert.deepEqual(stripAbsent(r), stripAbsent(entries[i]), `entry ${i}`))
    const chunks = entries.reduce((n, e) => n + e.chunks.length, 0)
    console.log(`corpus d1 Rust->TS: ${entries.length} runs, ${chunks} chunks`)
  })
})
