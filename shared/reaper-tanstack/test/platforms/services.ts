// The real processes the platform end-to-end tests run against: `reaper-sandboxd` (local
// sandboxes over HTTP, what a serverless reaper reaches), cargo-lambda's Lambda runtime emulator
// and the Lambda handler's own binary polling it. Binaries come from `test-platforms.sh`
// (REAPER_SANDBOXD_BIN, REAPER_LAMBDA_BIN, REAPER_CARGO_LAMBDA); every child is stopped by `stop`.
import { spawn, type ChildProcess } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { createWriteStream, existsSync, readFileSync } from 'node:fs'
import { createServer, connect } from 'node:net'
import { dirname, join } from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'

/** The repository root (this file runs from `dist-test/test/platforms/`). */
export const REPO = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', '..', '..')

function required(name: string): string {
  const v = process.env[name]
  if (!v) throw new Error(`${name} is not set: run the platform tests through shared/reaper-tanstack/test-platforms.sh`)
  return v
}

/** Sends SIGTERM and waits for the exit (SIGKILL after a generous guard). */
export async function stop(child: ChildProcess | undefined): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return
  const exited = new Promise<void>((r) => child.once('exit', () => r()))
  child.kill('SIGTERM')
  const guard = setTimeout(() => child.kill('SIGKILL'), 30_000)
  await exited
  clearTimeout(guard)
}

/** A free loopback port (the OS picks it; the listener is closed before the port is used). */
export async function freePort(): Promise<number> {
  const server = createServer()
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  const port = (server.address() as { port: number }).port
  await new Promise<void>((r) => server.close(() => r()))
  return port
}

/** Resolves once something accepts connections on `port`; a hang guard of minutes only. */
async function listening(port: number, what: string, log: string): Promise<void> {
  const deadline = Date.now() + 120_000
  for (;;) {
    const ok = await new Promise<boolean>((r) => {
      const s = connect(port, '127.0.0.1')
      s.once('connect', () => (s.destroy(), r(true)))
      s.once('error', () => r(false))
    })
    if (ok) return
    if (Date.now() > deadline) throw new Error(`${what} never listened on ${port}: ${readFileSync(log, 'utf8')}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}

/** Resolves once the agent's journal holds its exit sentinel (the wrapper writes it last). */
export async function agentExited(journal: string): Promise<void> {
  // A hang guard only: the agent has nothing left to do but print three lines and exit.
  const deadline = Date.now() + 120_000
  while (!(existsSync(journal) && readFileSync(journal, 'utf8').includes('"__exit":0'))) {
    if (Date.now() > deadline) throw new Error(`the agent never wrote its exit sentinel: ${existsSync(journal) ? readFileSync(journal, 'utf8') : '(no journal)'}`)
    await new Promise((r) => setTimeout(r, 20))
  }
}

export interface SandboxInfo {
  id: string
  journalDir: string
  agents: Array<{ runId: string; pid: number }>
}

/** A running `reaper-sandboxd --backend local` with its own root and a random token. */
export class Sandboxd {
  private constructor(
    private readonly child: ChildProcess,
    readonly url: string,
    readonly token: string,
    readonly root: string,
  ) {}

  static async start(dir: string): Promise<Sandboxd> {
    const token = randomBytes(24).toString('hex')
    const root = join(dir, 'sandboxes')
    const log = join(dir, 'sandboxd.log')
    const child = spawn(required('REAPER_SANDBOXD_BIN'), ['--root', root, '--listen', '127.0.0.1:0'], {
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', REAPER_SANDBOXD_TOKEN: token, RUST_LOG: 'info' },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    child.stderr!.pipe(createWriteStream(log))
    const line = await new Promise<string | undefined>((r) => {
      createInterface({ input: child.stdout! }).once('line', r)
      child.once('exit', () => r(undefined))
    })
    if (!line?.startsWith('listening on ')) throw new Error(`reaper-sandboxd did not start (${line}): ${readFileSync(log, 'utf8')}`)
    return new Sandboxd(child, line.slice('listening on '.length), token, root)
  }

  private async call(method: string, path: string, body?: unknown): Promise<Response> {
    return fetch(`${this.url}/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${this.token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    })
  }

  private async expect<T>(r: Response, status: number, what: string): Promise<T> {
    if (r.status !== status) throw new Error(`sandboxd ${what}: HTTP ${r.status}: ${await r.text()}`)
    return (status === 204 ? undefined : await r.json()) as T
  }

  async create(journalDir: string): Promise<SandboxInfo> {
    return this.expect(await this.call('POST', '/sandboxes', { journalDir }), 201, 'create')
  }

  /** Starts `command` under the journaled wrapper (the reference's journal format). */
  async startAgent(id: string, runId: string, command: string): Promise<void> {
    await this.expect(await this.call('POST', `/sandboxes/${id}/agents`, { runId, command }), 201, 'start agent')
  }

  async exec(id: string, command: string): Promise<{ stdout: string; exitCode: number }> {
    return this.expect(await this.call('POST', `/sandboxes/${id}/exec`, { command }), 200, 'exec')
  }

  /** The sandbox, or null once the daemon says it is gone. */
  async status(id: string): Promise<SandboxInfo | null> {
    const r = await this.call('GET', `/sandboxes/${id}`)
    return r.status === 404 ? null : this.expect(r, 200, 'status')
  }

  /** Destroys the sandbox (its agents are killed); idempotent. */
  async destroy(id: string): Promise<void> {
    const r = await this.call('DELETE', `/sandboxes/${id}`)
    if (r.status !== 204 && r.status !== 404) throw new Error(`sandboxd destroy: HTTP ${r.status}: ${await r.text()}`)
  }

  async stop(): Promise<void> {
    await stop(this.child)
  }
}

/**
 * cargo-lambda's runtime emulator (`cargo lambda watch --only-lambda-apis`) and the Lambda
 * handler's binary polling its runtime API as Lambda's bootstrap does; invoked through the
 * emulator's invoke API, as `cargo lambda invoke` does.
 */
export class LambdaEmulator {
  private fn?: ChildProcess
  private constructor(
    private readonly child: ChildProcess,
    readonly port: number,
    private readonly dir: string,
  ) {}

  static async start(dir: string): Promise<LambdaEmulator> {
    const port = await freePort()
    const log = join(dir, 'cargo-lambda.log')
    const child = spawn(
      required('REAPER_CARGO_LAMBDA'),
      ['lambda', 'watch', '--only-lambda-apis', '--invoke-address', '127.0.0.1', '--invoke-port', String(port)],
      { cwd: join(REPO, 'handlers', 'reaper-lambda'), stdio: ['ignore', 'pipe', 'pipe'] },
    )
    const out = createWriteStream(log)
    child.stdout!.pipe(out)
    child.stderr!.pipe(out)
    await listening(port, 'cargo lambda watch', log)
    return new LambdaEmulator(child, port, dir)
  }

  /** Starts the handler with exactly `env` plus what the Lambda service sets. */
  startFunction(env: Record<string, string>): void {
    const out = createWriteStream(join(this.dir, 'function.log'))
    this.fn = spawn(required('REAPER_LAMBDA_BIN'), [], {
      env: {
        AWS_LAMBDA_RUNTIME_API: `http://127.0.0.1:${this.port}/.rt`,
        AWS_LAMBDA_FUNCTION_NAME: 'reaper-lambda',
        AWS_LAMBDA_FUNCTION_MEMORY_SIZE: '256',
        AWS_LAMBDA_FUNCTION_VERSION: '$LATEST',
        AWS_LAMBDA_LOG_FORMAT: 'JSON',
        AWS_LAMBDA_LOG_LEVEL: 'INFO',
        ...env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    this.fn.stdout!.pipe(out)
    this.fn.stderr!.pipe(out)
  }

  /** The function's log so far (JSON lines). */
  functionLog(): string {
    return readFileSync(join(this.dir, 'function.log'), 'utf8')
  }

  /** One invocation; the handler's answer (its sweep report). */
  async invoke(payload: unknown): Promise<Record<string, unknown>> {
    const r = await fetch(`http://127.0.0.1:${this.port}/2015-03-31/functions/_/invocations`, {
      method: 'POST',
      body: JSON.stringify(payload),
    })
    const text = await r.text()
    if (r.status !== 200) throw new Error(`the invocation failed (HTTP ${r.status}): ${text}\n${this.functionLog()}`)
    return JSON.parse(text) as Record<string, unknown>
  }

  async stop(): Promise<void> {
    await stop(this.fn)
    await stop(this.child)
  }
}
