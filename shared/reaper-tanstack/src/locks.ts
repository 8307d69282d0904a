// The framework's `LockStore` on the reaper's lease table: the same keys, expiry, renewal (every
// third of the TTL) and loss rule as the Rust claim, so a host and the reaper never both hold a
// run's driver lease.
import type { LockStore } from '@tanstack/ai/locks'
import type { EpochBump, FencedRunOps, LeaseBackend, RunRecord } from './types.js'
import { runDriverLockKey } from './types.js'

export interface LeaseLockOptions {
  /** Who holds the leases (shown by `reaper status`). Default: `tanstack:<pid>:<uuid>`. */
  owner?: string
  /** Lease lifetime; renewed every third of it. Default 30 s. */
  ttlMs?: number
  /** How long `withLock` waits for a busy key before throwing `LockBusyError`. Default 30 s. */
  waitMs?: number
  /** Pause between attempts at a busy key. Default 100 ms. */
  retryMs?: number
  /** The clock leases are stamped with. Default `Date.now`. */
  now?: () => number
}

export class LockBusyError extends Error {
  constructor(
    readonly key: string,
    readonly waitedMs: number,
  ) {
    super(
      `lock ${JSON.stringify(key)} stayed held by another owner for ${waitedMs} ms; ` +
        'another host (or the reaper) is driving this run. Retry later or attach as a viewer.',
    )
    this.name = 'LockBusyError'
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

export class LeaseLockStore implements LockStore {
  readonly owner: string
  private readonly ttlMs: number
  private readonly waitMs: number
  private readonly retryMs: number
  private readonly now: () => number

  constructor(
    private readonly leases: LeaseBackend,
    options: LeaseLockOptions = {},
  ) {
    // Web Crypto and no `process`: the same code runs in Node and in a Worker (D1).
    const pid = typeof process === 'undefined' ? 'worker' : process.pid
    this.owner = options.owner ?? `tanstack:${pid}:${globalThis.crypto.randomUUID()}`
    this.ttlMs = options.ttlMs ?? 30_000
    this.waitMs = options.waitMs ?? 30_000
    this.retryMs = options.retryMs ?? 100
    this.now = options.now ?? Date.now
  }

  /** One attempt: the lease, or `null` at once if another owner holds it (the Rust claim's rule). */
  async tryWithLock<T>(
    key: string,
    fn: (signal: AbortSignal) => Promise<T>,
  ): Promise<{ acquired: true; value: T } | { acquired: false }> {
    const grant = await this.leases.acquire(key, this.owner, this.now(), this.ttlMs)
    if (!grant) return { acquired: false }
    return { acquired: true, value: await this.hold(key, grant, fn) }
  }

  async withLock<T>(key: string, fn: (signal: AbortSignal) => Promise<T>): Promise<T> {
    const started = this.now()
    for (;;) {
      const grant = await this.leases.acquire(key, this.owner, this.now(), this.ttlMs)
      if (grant) return this.hold(key, grant, fn)
      const waited = this.now() - started
      if (waited >= this.waitMs) throw new LockBusyError(key, waited)
      await sleep(this.retryMs)
    }
  }

  private async hold<T>(
    key: string,
    grant: { token: string; expiresAt: number },
    fn: (signal: AbortSignal) => Promise<T>,
  ): Promise<T> {
    const controller = new AbortController()
    let expiresAt = grant.expiresAt
    const lose = (why: string) => {
      if (!controller.signal.aborted) {
        controller.abort(new Error(`lease ${JSON.stringify(key)} lost: ${why}`))
      }
    }
    if (expiresAt <= this.now()) lose('it expired before the first write')
    let stopped = false
    const interval = Math.max(1, Math.floor(this.ttlMs / 3))
    let timer: ReturnType<typeof setTimeout> | undefined
    const tick = async () => {
      if (stopped || controller.signal.aborted) return
      const now = this.now()
      try {
        if (await this.leases.renew(key, this.owner, grant.token, now, this.ttlMs)) {
          expiresAt = now + this.ttlMs
        } else {
          lose('another owner took it over')
        }
      } catch (e) {
        // A failed renewal is not a lost lease until it has expired: nobody can take it before.
        if (now >= expiresAt) lose(`it expired unrenewed (${String(e)})`)
      }
      if (!stopped && !controller.signal.aborted) timer = setTimeout(tick, interval)
    }
    timer = setTimeout(tick, interval)
    try {
      return await fn(controller.signal)
    } finally {
      stopped = true
      clearTimeout(timer)
      await this.leases.release(key, this.owner, grant.token).catch(() => undefined)
    }
  }
}

/** A held run claim: the epoch this host wrote and the lease's signal. */
export interface RunClaim {
  runId: string
  epoch: number
  record: RunRecord
  signal: AbortSignal
}

/**
 * Claims a run as the Rust reaper does (`reaper_core::claim::Claim::acquire`): the run's driver
 * lease (`run-driver:<runId>`, refused at once when held), then the atomic epoch bump (refused
 * without a write for an unknown or terminal run). `fn` drives the run while the lease is held;
 * every write it makes must be fenced on `claim.epoch`.
 */
export async function withRunClaim<T>(
  runs: FencedRunOps,
  locks: LeaseLockStore,
  runId: string,
  fn: (claim: RunClaim) => Promise<T>,
): Promise<{ claimed: true; value: T } | { claimed: false; reason: 'busy' | 'unknown' | 'terminal' }> {
  const r = await locks.tryWithLock(runDriverLockKey(runId), async (signal) => {
    const bump: EpochBump = await runs.bumpEpoch(runId)
    if (!bump.claimed) return { claimed: false as const, reason: bump.reason }
    return {
      claimed: true as const,
      value: await fn({ runId, epoch: bump.epoch, record: bump.record, signal }),
    }
  })
  if (!r.acquired) return { claimed: false, reason: 'busy' }
  return r.value
}
