// front.mjs runs the Go front worker (app.wasm, cmd/worker) as one Go
// runtime for every request of this isolate. syumai/workers' generated
// worker.mjs boots a new Go instance per request (its Serve returns after
// the first response); here main.go calls workers.ServeNonBlock and
// workers.Ready and never returns, and this module hands the running
// instance each request through the handler it registered.
//
// The runtime context the Go side reads (env, ctx) is one object whose
// fields are set before each request: the bindings are the same for every
// request of an isolate. If the Go program ever exits (a panic), the
// requests in flight answer 503 and the next request boots a new instance.
import "./wasm_exec.js";
import { connect } from "cloudflare:sockets";
import app from "./app.wasm";

// syumai/workers' Go side calls globalThis.tryCatch.
globalThis.tryCatch = (fn) => {
  try {
    return { result: fn() };
  } catch (e) {
    return { error: e };
  }
};

const context = { env: undefined, ctx: undefined, connect, binding: {} };
let running = null; // { ready: Promise, exited: Promise }
export const stats = { boots: 0 };

function boot() {
  const go = new Go();
  let ready;
  const readyP = new Promise((resolve) => (ready = resolve));
  const instance = new WebAssembly.Instance(app, { ...go.importObject, workers: { ready: () => ready() } });
  stats.boots++;
  const exited = go.run(instance, context).then(
    () => "the front's Go program exited",
    (err) => `the front's Go program failed: ${err && err.message}`,
  );
  const r = { ready: Promise.race([readyP, exited.then((m) => Promise.reject(new Error(m)))]), exited };
  exited.then(() => {
    if (running === r) running = null;
  });
  return r;
}

function unavailable(what) {
  const body = JSON.stringify({ ok: false, reason: "unavailable", error: `the lease plane cannot decide now; nothing was granted; retry (${what})` });
  return new Response(body, {
    status: 503,
    headers: { "Content-Type": "application/json", "Retry-After": "1", "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff" },
  });
}

async function fetch(req, env, ctx) {
  context.env = env;
  context.ctx = ctx;
  const r = (running ??= boot());
  try {
    await r.ready;
    return await Promise.race([context.binding.handleRequest(req), r.exited.then((m) => Promise.reject(new Error(m)))]);
  } catch (err) {
    console.error("front:", err && err.message);
    return unavailable(err && err.message);
  }
}

export default { fetch };
