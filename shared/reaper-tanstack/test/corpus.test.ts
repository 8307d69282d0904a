// One database, two languages: a corpus written by this package is read back by the Rust stores
// (the interop binary), and one written by the Rust stores is read back here, on every backend
// (D1: d1.test.ts).
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { BACKENDS, interop, openBackend, type Backend } from './backends.js'
import { corpus, ids, readTs, stripAbsent, writeTs, type Entry } from './corpus-cases.js'

for (const name of BACKENDS) {
  describe(`corpus on ${name}`, () => {
    let b: Backend
    before(async () => {
      b = await openBackend(name)
    })
    after(() => b.close())

    it('what TypeScript writes, Rust reads back with no field lost or changed', async () => {
      const entries = corpus('ts')
      await writeTs(b, entries)
      const read = JSON.parse(interop(['read', b.spec], ids(entries))) as Array<Entry>
      assert.equal(read.length, entries.length)
      read.forEach((r, i) => assert.deepEqual(stripAbsent(r), stripAbsent(entries[i]), `entry ${i}`))
      const chunks = entries.reduce((n, e) => n + e.chunks.length, 0)
      console.log(`corpus ${name} TS->Rust: ${entries.length} runs, ${chunks} chunks`)
    })

    it('what Rust writes, TypeScript reads back with no field lost or changed', async () => {
      const entries = corpus('rs')
      interop(['write', b.spec], entries)
      const read = await readTs(b, entries)
      read.forEach((r, i) => assert.deepEqual(stripAbsent(r), stripAbsent(entries[i]), `entry ${i}`))
      const chunks = entries.reduce((n, e) => n + e.chunks.length, 0)
      console.log(`corpus ${name} Rust->TS: ${entries.length} runs, ${chunks} chunks`)
    })
  })
}
