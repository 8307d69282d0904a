// A live route that streams an agent's journal must leave, on each chunk, the journal byte offset
// just past its line (`journalEnd`): the reaper's replay resumes after the greatest one in the
// log, so a detached run's output is never appended twice.
import type { StreamChunk, StreamDurability } from '@tanstack/ai'

/** The field the reaper's replay resumes after (`reaper_core::replay::JOURNAL_END_FIELD`). */
export const JOURNAL_END_FIELD = 'journalEnd'

/**
 * `chat()` moves fields an adapter adds to an event under `metadata.tanstack`; the reaper reads
 * `journalEnd` at the top level. This wrapper lifts it there as each batch is stored, and
 * changes nothing else.
 */
export function withJournalOffsets<T extends string>(durability: StreamDurability<T>): StreamDurability<T> {
  return {
    ...durability,
    append: (chunks) => durability.append(chunks.map(lift)),
  }
}

function lift(chunk: StreamChunk): StreamChunk {
  const meta = (chunk as { metadata?: { tanstack?: Record<string, unknown> } }).metadata
  const end = meta?.tanstack?.[JOURNAL_END_FIELD]
  if (typeof end !== 'number') return chunk
  const { [JOURNAL_END_FIELD]: _moved, ...tanstack } = meta!.tanstack!
  const { tanstack: _old, ...rest } = meta!
  const metadata = Object.keys(tanstack).length > 0 ? { ...rest, tanstack } : rest
  return {
    ...chunk,
    ...(Object.keys(metadata).length > 0 ? { metadata } : { metadata: undefined }),
    [JOURNAL_END_FIELD]: end,
  } as StreamChunk
}
