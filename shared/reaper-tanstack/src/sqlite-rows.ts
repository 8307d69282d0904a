// Row mapping shared by the backends on the reaper's SQLite schema (the `node:sqlite` file and
// D1): no driver imported here, so a Worker bundle can use it.
import type { RunRecord } from '@tanstack/ai'
import { isRunStatus } from '@tanstack/ai'
import type { RunPatch } from './types.js'

export type SqlValue = string | number | null
type Row = Record<string, unknown>

/** A patch's columns: a key present with `undefined` clears its column, an absent key keeps it. */
export function patchColumns(patch: RunPatch): { set: Array<string>; values: Array<SqlValue> } {
  const set: Array<string> = []
  const values: Array<SqlValue> = []
  const col = (name: string, v: SqlValue) => {
    set.push(`${name} = ?`)
    values.push(v)
  }
  const has = (k: keyof RunPatch) => Object.hasOwn(patch, k)
  if (has('status') && patch.status !== undefined) col('status', patch.status)
  if (has('finishedAt')) col('finished_at', patch.finishedAt ?? null)
  if (has('error')) {
    col('error_message', patch.error?.message ?? null)
    col('error_code', patch.error?.code ?? null)
  }
  if (has('usage')) col('usage', patch.usage === undefined ? null : JSON.stringify(patch.usage))
  if (has('sandboxKey')) col('sandbox_key', patch.sandboxKey ?? null)
  if (has('detachedSince')) col('detached_since', patch.detachedSince ?? null)
  if (has('cancelRequested'))
    col('cancel_requested', patch.cancelRequested === undefined ? null : patch.cancelRequested ? 1 : 0)
  if (has('driverEpoch')) col('driver_epoch', patch.driverEpoch ?? null)
  return { set, values }
}

export function toRecord(r: Row): RunRecord {
  if (!isRunStatus(r.status)) {
    throw new Error(
      `run ${JSON.stringify(r.run_id)} has status ${JSON.stringify(r.status)}, which is no run status; ` +
        'repair the row (expected running, interrupted, completed, failed or aborted)',
    )
  }
  const rec: RunRecord = {
    runId: r.run_id as string,
    threadId: r.thread_id as string,
    status: r.status,
    startedAt: r.started_at as number,
  }
  // Absent, never null/false/0, for a field that was never set.
  if (r.finished_at !== null) rec.finishedAt = r.finished_at as number
  if (r.error_message !== null) {
    rec.error = { message: r.error_message as string }
    if (r.error_code !== null) rec.error.code = r.error_code as string
  }
  if (r.usage !== null) rec.usage = JSON.parse(r.usage as string)
  if (r.sandbox_key !== null) rec.sandboxKey = r.sandbox_key as string
  if (r.detached_since !== null) rec.detachedSince = r.detached_since as number
  if (r.cancel_requested !== null) rec.cancelRequested = r.cancel_requested === 1
  if (r.driver_epoch !== null) rec.driverEpoch = r.driver_epoch as number
  return rec
}

