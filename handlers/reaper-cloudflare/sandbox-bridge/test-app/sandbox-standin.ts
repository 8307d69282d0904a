// A stand-in for `@cloudflare/sandbox` in workerd, for the bridge's tests only. It implements the
// documented surface the bridge uses (SOURCE.md): `getSandbox(namespace, id)` giving a Durable
// Object stub with `exec(command, { timeout })` -> `{ stdout, stderr, exitCode, success }`,
// `destroy()`, and the Container class's `getState()` -> `{ status, lastChange }`.
//
// Where Cloudflare runs a container behind each Sandbox, this runs a real reaper-sandboxd sandbox
// (real `sh`, real processes) on loopback: the Durable Object keeps that sandbox's id in its
// storage, `exec` on a stopped one starts a fresh, empty one (as a container boots from its
// image), `destroy` deletes it, and `getState` says `healthy` or `stopped`.

import { DurableObject } from "cloudflare:workers";

interface Env {
  STANDIN_SANDBOXD_URL: string;
  STANDIN_SANDBOXD_TOKEN: string;
}

export function getSandbox(namespace: DurableObjectNamespace, id: string) {
  return namespace.get(namespace.idFromName(id));
}

export class Sandbox extends DurableObject<Env> {
  private async sandboxd(method: string, path: string, body?: unknown): Promise<Response> {
    return fetch(`${this.env.STANDIN_SANDBOXD_URL}/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${this.env.STANDIN_SANDBOXD_TOKEN}`, "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  }

  private async running(): Promise<{ id: string; since: number } | undefined> {
    const id = await this.ctx.storage.get<string>("container");
    if (!id) return undefined;
    const res = await this.sandboxd("GET", `/sandboxes/${id}`);
    const info = res.ok ? await res.json<{ createdAt: number }>() : undefined;
    return info ? { id, since: info.createdAt } : undefined;
  }

  async getState(): Promise<{ status: string; lastChange: number }> {
    const running = await this.running();
    return running ? { status: "healthy", lastChange: running.since } : { status: "stopped", lastChange: 0 };
  }

  async exec(command: string, options: { timeout?: number } = {}) {
    let container = (await this.running())?.id;
    if (!container) {
      // Boot: a fresh container from the image, nothing of a previous one.
      const res = await this.sandboxd("POST", "/sandboxes", {});
      if (!res.ok) throw new Error(`container failed to start: ${res.status}`);
      container = (await res.json<{ id: string }>()).id;
      await this.ctx.storage.put("container", container);
    }
    const res = await this.sandboxd("POST", `/sandboxes/${container}/exec`, {
      command,
      timeoutMs: options.timeout ?? 300_000,
    });
    const body = await res.json<any>();
    if (res.ok) return { stdout: body.stdout, stderr: body.stderr, exitCode: body.exitCode, success: body.exitCode === 0 };
    if (body?.error?.code === "exec-timeout") throw new Error(`Command timed out after ${options.timeout}ms`);
    throw new Error(`exec failed: ${res.status} ${body?.error?.message ?? ""}`);
  }

  async destroy(): Promise<void> {
    if (await this.ctx.storage.get<boolean>("breakDestroy")) throw new Error("container teardown failed");
    const id = await this.ctx.storage.get<string>("container");
    if (id) {
      const res = await this.sandboxd("DELETE", `/sandboxes/${id}`);
      if (res.status !== 204) throw new Error(`container teardown failed: ${res.status}`);
    }
    await this.ctx.storage.deleteAll();
  }

  /** Test hook: make destroy fail (true) or work again (false). */
  async setBreakDestroy(on: boolean): Promise<void> {
    await this.ctx.storage.put("breakDestroy", on);
  }
}
