// Shapes shared by every backend. The run, log and lock shapes come from the published
// `@tanstack/ai`; the message and sandbox-instance stores are documented in the framework's
// persistence docs but not exported by a released package, so they are typed here.
import type { ModelMessage, RunRecord, RunStore, StreamChunk } from '@tanstack/ai'
import type { LockStore } from '@tanstack/ai/locks'

export type { RunRecord, RunStore, StreamChunk, LockStore }

/** The SQLite schema version (`reaper_schema`) this package reads and writes. */
export const SCHEMA_VERSION = 8

/** The lease key of a run's driver claim: the same key the Rust reaper's claim takes. */
export function runDriverLockKey(runId: string): string {
  return `run-driver:${runId}`
}

/**
 * Where a sandbox lives, keyed by the compound `sandboxKey` a run records at detach. The shape of
 * the framework's sandbox adapter guide (`docs/persistence/build-a-sandbox-adapter.md`).
 */
export interface SandboxInstanceRecord {
  key: string
  provider: string
  providerSandboxId: string
  latestSnapshotId?: string
  threadId: string
  latestRunId?: string
  updatedAt: number
}

/** `get` / `upsert` (a full replace: omitted optionals are cleared) / `delete`. */
export interface SandboxInstanceStore {
  get: (key: string) => Promise<SandboxInstanceRecord | null>
  upsert: (record: SandboxInstanceRecord) => Promise<void>
  delete: (key: string) => Promise<void>
}

/**
 * The framework's message store (`docs/persistence/store-reference.md`). `loadThread` returns
 * `[]` for a thread never saved; `saveThread` replaces the thread's messages.
 */
export interface MessageStore {
  loadThread: (threadId: string) => Promise<Array<ModelMessage>>
  saveThread: (threadId: string, messages: Array<ModelMessage>) => Promise<void>
}

/** One run's saved messages, as the reaper keeps them (`transcripts` / the TRANSCRIPT item). */
export interface Transcript {
  runId: string
  threadId: string
  messages: Array<{ role: string; content: string }>
  exitCode?: number
  savedAt: number
}

/** The terminal write a driver lands only while no later claim exists. */
export interface TerminalWrite {
  status: 'completed' | 'failed' | 'aborted'
  finishedAt: number
  error?: { message: string; code?: string }
}

/** What a claim's epoch bump answered. */
export type EpochBump =
  | { claimed: true; epoch: number; record: RunRecord }
  | { claimed: false; reason: 'unknown' | 'terminal' }

/** The reaper-specific operations beside the framework's `RunStore`. */
export interface FencedRunOps {
  /** `driverEpoch = (old ?? 0) + 1` for a `running`/`interrupted` run, atomically. */
  bumpEpoch: (runId: string) => Promise<EpochBump>
  /** Lands only while `driverEpoch` is absent or `<= heldEpoch`; `false` when superseded or unknown. */
  writeTerminal: (runId: string, heldEpoch: number, write: TerminalWrite) => Promise<boolean>
  /**
   * The claim holder's own patch (a cancel, a returning viewer's attach), conditional on the
   * held epoch in the same atomic step, as `RunStore::update_fenced` in the Rust core.
   */
  updateFenced: (runId: string, heldEpoch: number, patch: RunPatch) => Promise<'written' | 'unknown' | 'superseded'>
}

export type RunPatch = Parameters<RunStore['update']>[1]

export type ReaperRunStore = Required<RunStore> & FencedRunOps

/** Transcripts by run, so a thread renders from every run's saved messages. */
export interface TranscriptStore {
  get: (runId: string) => Promise<Transcript | null>
  /** With `fence`, writes nothing (answers `false`) once a later claim exists. */
  save: (transcript: Transcript, options?: { fence?: number }) => Promise<boolean>
  listByThread: (threadId: string) => Promise<Array<Transcript>>
}

/** A lease as both languages keep it: `expiresAt <= now` means free. */
export interface LeaseBackend {
  acquire: (
    key: string,
    owner: string,
    now: number,
    ttlMs: number,
  ) => Promise<{ token: string; expiresAt: number } | null>
  renew: (key: string, owner: string, token: string, now: number, ttlMs: number) => Promise<boolean>
  release: (key: string, owner: string, token: string) => Promise<void>
}

/** Thrown by an append whose fence a later claim passed: nothing was written. */
export class SupersededError extends Error {
  constructor(
    readonly runId: string,
    readonly heldEpoch: number,
  ) {
    super(
      `run ${JSON.stringify(runId)} was claimed by a later driver (held epoch ${heldEpoch}); ` +
        'nothing was written. Stop driving it: another host owns it now.',
    )
    this.name = 'SupersededError'
  }
}

/** Thrown when a database's schema is not one this package can write. */
export class SchemaError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'SchemaError'
  }
}

/** Messages the reaper keeps as `{role, content}` strings; anything richer is refused, not cut. */
export function toTranscriptMessages(
  messages: Array<ModelMessage>,
): Array<{ role: string; content: string }> {
  return messages.map((m, i) => {
    if (m.content !== null && typeof m.content !== 'string') {
      throw new TypeError(
        `message ${i} (${m.role}) has structured content; the reaper's transcript keeps text only. ` +
          'Save text messages here and keep multimodal parts in your own store.',
      )
    }
    if (m.toolCalls?.length || m.toolCallId !== undefined) {
      throw new TypeError(
        `message ${i} (${m.role}) carries tool calls; the reaper's transcript keeps {role, content} ` +
          'only. Save the text messages here and keep tool calls in your own store.',
      )
    }
    return { role: m.role, content: m.content ?? '' }
  })
}

export function fromTranscriptMessages(
  messages: Array<{ role: string; content: string }>,
): Array<ModelMessage> {
  return messages.map((m) => ({ role: m.role as ModelMessage['role'], content: m.content }))
}

/**
 * The framework's `MessageStore` over per-run transcripts: a thread is every run's messages in
 * order, and `saveThread` writes the messages past what earlier runs hold into the transcript of
 * the run `runFor(threadId)` names (the run being streamed), which is where the reaper adds the
 * agent's reply when it finishes a detached run.
 */
export function messageStoreOver(
  transcripts: TranscriptStore,
  runFor: (threadId: string) => string | Promise<string>,
  now: () => number = Date.now,
): MessageStore {
  return {
    async loadThread(threadId) {
      const all = await transcripts.listByThread(threadId)
      return fromTranscriptMessages(all.flatMap((t) => t.messages))
    },
    async saveThread(threadId, messages) {
      const runId = await runFor(threadId)
      const text = toTranscriptMessages(messages)
      const earlier = (await transcripts.listByThread(threadId)).filter((t) => t.runId !== runId)
      const before = earlier.reduce((n, t) => n + t.messages.length, 0)
      const existing = await transcripts.get(runId)
      await transcripts.save({
        runId,
        threadId,
        messages: text.slice(Math.min(before, text.length)),
        exitCode: existing?.exitCode,
        savedAt: existing?.savedAt ?? now(),
      })
    },
  }
}

export function isJsonObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

export interface DurabilityOptions {
  /** The offset a returning viewer resumes after (the SSE `Last-Event-ID`), or null. */
  offset?: string | null
  /** Held epoch: appends (and close) write nothing once a later claim exists. */
  fence?: number
}
