// Backend-neutral parts. Backends are their own entry points (`@reaper/tanstack/sqlite`,
// `@reaper/tanstack/dynamodb`) so an app loads only the driver it uses.
export * from './types.js'
export * from './locks.js'
export * from './middleware.js'
export * from './journal.js'
