// The test build's entry: the bridge, plus the stand-in Sandbox class in the same script and
// three test hooks under /__standin/ that do what the team's own app does (create a sandbox by
// running a command in it) and inject a failing teardown. Never deployed.

import bridge, { type Env } from "../src/index";
import { getSandbox } from "@cloudflare/sandbox";

export { Sandbox } from "./sandbox-standin";

export default {
  async fetch(request: Request, env: Env): Promise<Response> {
    const url = new URL(request.url);
    const hook = /^\/__standin\/(create|break|heal)\/([A-Za-z0-9-]{1,64})$/.exec(url.pathname);
    if (!hook) return bridge.fetch(request, env);
    const stub = getSandbox(env.Sandbox, hook[2]) as any;
    if (hook[1] === "create") await stub.exec("true");
    else await stub.setBreakDestroy(hook[1] === "break");
    return new Response(null, { status: 204 });
  },
};
