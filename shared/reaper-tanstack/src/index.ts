// Backend-neutral parts. Backends are their own entry points (`@reaper/tanstack/sqlite`,
// `/postgres`, `/d1`, `/dynamodb`) so an app loads only the driver it uses (`pg` only with
// `/postgres`, the AWS SDK only with `/dynamodb`).
export * from './types.js'
export * from './locks.js'
export * from './middleware.js'
export * from './journal.js'
