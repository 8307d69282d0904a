import { BASELINE, MIGRATIONS } from './schema.generated.js'

type Migration = (typeof MIGRATIONS)[number]

/**
 * The migrations a SQLite or D1 database at `version` still needs, in order
 * (reaper_sql::schema::pending): a new database (version 0) is created at the baseline and then
 * takes the migrations after it, never every migration from version 1, whose unprefixed tables
 * (`runs`, …) an application may have.
 */
export function pendingMigrations(version: number): Migration[] {
  if (version === 0) return [BASELINE, ...MIGRATIONS.filter((m) => m.version > BASELINE.version)]
  return MIGRATIONS.filter((m) => m.version > version)
}

/** Every table a new database gets: an application's table by one of these names clashes. */
export const REAPER_TABLES: ReadonlySet<string> = new Set(
  pendingMigrations(0).flatMap((m) =>
    m.statements.map((s) => /^CREATE TABLE (\w+)/.exec(s)?.[1]).filter((t) => t !== undefined),
  ),
)
