// Two small chat middlewares the published packages do not ship yet: the run record's lifecycle
// (create, finish, fail) and the detach stamp the reaper selects runs by.
import type { ChatMiddleware, RunStore } from '@tanstack/ai'
import { provideRunDetached } from '@tanstack/ai'
import { RunDisconnectCapability } from '@tanstack/ai/adapter-internals'

export interface DetachOptions {
  /** The run store the reaper reads. */
  runs: RunStore
  /** The compound sandbox key of this run's sandbox (what `sandbox_instances.key` holds). */
  sandboxKey: (ctx: { runId: string; threadId: string }) => string | undefined
  /** Clock for `detachedSince`. Default `Date.now`. */
  now?: () => number
  /** Called once the stamp is written (tests and logs). */
  onDetached?: (runId: string, at: number) => void
}

/**
 * Stamps `detachedSince` and `sandboxKey` in one write when the viewer's connection closes,
 * WITHOUT cancelling the run (the engine's `RunDisconnectCapability` is a notification, not an
 * abort), as `withSandbox` does on the framework's main branch. If the run is then aborted
 * because its host goes away, the abort is reported as a detach, so the durable delivery sink
 * leaves the log open for the reaper (or a takeover) to continue.
 */
export function withDetachOnDisconnect(options: DetachOptions): ChatMiddleware {
  const now = options.now ?? Date.now
  const detached = new Set<string>()
  return {
    name: 'reaper-detach-on-disconnect',
    setup: (ctx) => {
      const disconnect = RunDisconnectCapability[0](ctx, { optional: true })
      disconnect?.subscribe(async () => {
        const at = now()
        const sandboxKey = options.sandboxKey({ runId: ctx.runId, threadId: ctx.threadId })
        await options.runs.update(ctx.runId, {
          detachedSince: at,
          ...(sandboxKey !== undefined ? { sandboxKey } : {}),
        })
        detached.add(ctx.runId)
        options.onDetached?.(ctx.runId, at)
      })
    },
    onAbort: (ctx) => {
      if (detached.has(ctx.runId)) provideRunDetached(ctx, true)
    },
    onFinish: (ctx) => {
      detached.delete(ctx.runId)
    },
  }
}

/**
 * A viewer came back: clear the stamp (set it absent, not left), so the reaper leaves the run
 * alone, as the framework's resume driver does on re-attach.
 */
export async function reattach(runs: RunStore, runId: string): Promise<void> {
  await runs.update(runId, { detachedSince: undefined })
}

export interface RunRecordOptions {
  runs: RunStore
  now?: () => number
}

/**
 * The run record's lifecycle, as `withPersistence` writes it: created `running` at setup,
 * `completed` at finish, `failed` with the error at error. A detached abort writes nothing (the
 * run is still running somewhere); any other abort writes `aborted`.
 */
export function withRunRecord(options: RunRecordOptions): ChatMiddleware {
  const now = options.now ?? Date.now
  return {
    name: 'reaper-run-record',
    setup: async (ctx) => {
      await options.runs.createOrResume({ runId: ctx.runId, threadId: ctx.threadId, startedAt: now() })
    },
    onFinish: async (ctx) => {
      await options.runs.update(ctx.runId, { status: 'completed', finishedAt: now() })
    },
    onError: async (ctx, info) => {
      const error = info.error as { message?: unknown; code?: unknown } | undefined
      await options.runs.update(ctx.runId, {
        status: 'failed',
        finishedAt: now(),
        error: {
          message: typeof error?.message === 'string' ? error.message : String(info.error),
          ...(typeof error?.code === 'string' ? { code: error.code } : {}),
        },
      })
    },
    onAbort: async (ctx) => {
      const record = await options.runs.get(ctx.runId)
      if (record?.detachedSince !== undefined) return
      await options.runs.update(ctx.runId, { status: 'aborted', finishedAt: now() })
    },
  }
}
