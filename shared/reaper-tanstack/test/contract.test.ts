// The framework's published contracts on SQLite, DynamoDB Local and PostgreSQL (the cases are
// in contract-cases.ts; d1.test.ts runs them inside workerd on D1).
import { describe, it, before, after } from 'node:test'
import { BACKENDS, openBackend, type Backend } from './backends.js'
import { contractCases } from './contract-cases.js'

for (const name of BACKENDS) {
  describe(`contract on ${name}`, () => {
    let b: Backend
    let clock = 1_000_000
    before(async () => {
      b = await openBackend(name, () => clock)
    })
    after(() => b.close())
    const cases = contractCases({
      get store() {
        return b.store
      },
      tick: (ms) => {
        clock += ms
      },
    })
    for (const c of cases) it(c.name, c.run)
  })
}
