// MCP over streamable HTTP at the worker's /mcp, through the official
// TypeScript SDK (@modelcontextprotocol/sdk), next to the server's /mcp
// (`leaseplane serve`, bin/leaseplane): the same tools, and the same
// results for the same calls (times aside). A held call answers when the
// lease is the caller's; a revoked key is refused.
//
// LEASEPLANE_WRITE_MCP=1 rewrites cmd/worker/mcp.json (the server's own
// description of itself and its tools, which the front answers) from the
// running server.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { start, createWorkspace, createKey, root, fresh } from "../miniflare.mjs";

const ADMIN = "admin-secret-for-mcp-tests";
const bin = path.join(root, "bin", "leaseplane");
let dir, mf, base, server, serverURL, workerKey, serverKey;
const clients = [];

before(async () => {
  assert.ok(fs.existsSync(bin), `${bin} is missing: run make build`);
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "leaseplane-worker-mcp-"));
  ({ mf, url: base } = await start({ dataDir: path.join(dir, "worker"), port: 0, adminSecret: ADMIN, testClock: true }));
  workerKey = await createWorkspace(base, ADMIN, "acme");
  const out = execFileSync(bin, ["keys", "create", "--data", path.join(dir, "data"), "--workspace", "acme", "--init"], { encoding: "utf8" });
  serverKey = out.trim().split(/\s+/).pop();
  server = spawn(bin, ["serve", "--addr", "127.0.0.1:0", "--data", path.join(dir, "data"), "--log-level", "warn"], { stdio: ["ignore", "pipe", "inherit"] });
  serverURL = await new Promise((resolve, reject) => {
    let seen = "";
    server.stdout.setEncoding("utf8");
    server.stdout.on("data", (chunk) => {
      const m = (seen += chunk).match(/^export LEASEPLANE_URL=(\S+)$/m);
      if (m) resolve(m[1]);
    });
    server.on("exit", (code) => reject(new Error(`leaseplane serve exited ${code} before listening:\n${seen}`)));
  });
});

after(async () => {
  for (const c of clients) await c.close().catch(() => {});
  if (server && server.exitCode === null) {
    const exited = new Promise((resolve) => server.on("exit", resolve));
    server.kill("SIGTERM");
    await exited;
  }
  await mf?.dispose();
  fs.rmSync(dir, { recursive: true, force: true });
});

// connect is an SDK client of url's /mcp with key. Its requests close
// their connections (workerd drops idle ones after 5 s; fresh).
async function connect(url, key) {
  const transport = new StreamableHTTPClientTransport(new URL(`${url}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${key}` } },
    fetch: (u, init) => fetch(u, { ...init, headers: { ...Object.fromEntries(new Headers(init?.headers)), ...fresh } }),
  });
  const c = new Client({ name: "leaseplane-worker-test", version: "1.0.0" });
  await c.connect(transport);
  clients.push(c);
  return c;
}

// same drops what differs between two planes by time alone.
const same = (r) => JSON.parse(JSON.stringify(r).replace(/(\\?")(grantedAtMs|expiresAtMs|nowMs|sinceMs|lapsesAtMs|claimUntilMs|heldUntilMs)(\\?"):\d+/g, "$1$2$3:0"));

test("the worker's /mcp lists the server's tools, and answers each call as the server does", async () => {
  const w = await connect(base, workerKey), s = await connect(serverURL, serverKey);
  const [wt, st] = [await w.listTools(), await s.listTools()];
  if (process.env.LEASEPLANE_WRITE_MCP === "1") {
    const res = await fetch(`${serverURL}/mcp`, {
      method: "POST",
      headers: { Authorization: `Bearer ${serverKey}`, "Content-Type": "application/json", Accept: "application/json, text/event-stream" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "x", version: "1" } } }),
    });
    const init = (await res.json()).result;
    const list = await fetch(`${serverURL}/mcp`, {
      method: "POST",
      headers: { Authorization: `Bearer ${serverKey}`, "Content-Type": "application/json", Accept: "application/json, text/event-stream" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 2, method: "tools/list" }),
    });
    const file = { capabilities: init.capabilities, instructions: init.instructions, serverInfo: { name: init.serverInfo.name, title: init.serverInfo.title }, tools: (await list.json()).result };
    fs.writeFileSync(path.join(root, "cmd/worker/mcp.json"), JSON.stringify(file) + "\n");
  }
  const dropOperator = (l) => l.tools.filter((t) => !["drills.run", "drills.cancel", "detection.run"].includes(t.name));
  assert.deepEqual(wt.tools, dropOperator(st), "the worker lists the server's lease tools, byte for byte (else: LEASEPLANE_WRITE_MCP=1 make test-worker)");
  assert.deepEqual(w.getInstructions(), s.getInstructions());
  assert.deepEqual(w.getServerCapabilities(), s.getServerCapabilities());
  const a = "did:web:acme.example:agent:a", b = "did:web:acme.example:agent:b";
  const calls = [
    ["coordination.lease.acquire", { resource: "lock:mcp", actorDid: a }],
    ["coordination.lease.acquire", { resource: "lock:mcp", actorDid: b, ttlMs: 5000 }],
    ["coordination.wait", {}],
    ["coordination.lease.acquire", { resource: "", actorDid: a }],
    ["coordination.lease.acquire", { resourcex: "lock:mcp", actorDid: a }],
    ["coordination.lease.acquire", { resource: "lock:mcp", actorDid: a, waitUpToMs: 30001 }],
    ["coordination.lease.release", { resource: 7, actorDid: a }],
    ["coordination_lease_release", { resource: "lock:mcp", actorDid: a }],
    ["coordination.lease.release", { resource: "lock:mcp", actorDid: a }],
  ];
  const got = [];
  for (const [name, args] of calls) {
    const [wr, sr] = [await w.callTool({ name, arguments: args }), await s.callTool({ name, arguments: args })];
    assert.deepEqual(same(wr), same(sr), `${name} ${JSON.stringify(args)}`);
    got.push(wr);
  }
  assert.equal(got[0].structuredContent.lease.holder, a);
  assert.equal(got[1].structuredContent.reason, "lease_held");
  assert.equal(got[1].isError, undefined, "a refusal the agent acts on is a normal result");
  assert.equal(got[3].isError, true, "a bad argument is a tool error");
  assert.equal(got[7].structuredContent.released, true, "the underscored name calls the same tool");
});

test("a held call over MCP answers when the lease is the caller's", async () => {
  const w = await connect(base, workerKey);
  const a = "did:web:acme.example:agent:ha", b = "did:web:acme.example:agent:hb";
  assert.equal((await w.callTool({ name: "coordination.lease.acquire", arguments: { resource: "lock:mcp-held", actorDid: a } })).structuredContent.ok, true);
  const asked = w.callTool({ name: "coordination.lease.acquire", arguments: { resource: "lock:mcp-held", actorDid: b, waitUpToMs: 30000 } });
  for (const end = Date.now() + 30000; ; ) {
    const q = (await w.callTool({ name: "coordination.wait", arguments: {} })).structuredContent.queues.find((x) => x.resource === "lock:mcp-held");
    if (q?.waiters?.some((x) => x.actorDid === b && x.heldUntilMs !== undefined)) break;
    assert.ok(Date.now() < end, "b's call never showed held");
    await new Promise((r) => setTimeout(r, 25));
  }
  assert.equal((await w.callTool({ name: "coordination.lease.release", arguments: { resource: "lock:mcp-held", actorDid: a } })).structuredContent.released, true);
  const got = await asked;
  assert.equal(got.isError, undefined, JSON.stringify(got));
  assert.equal(got.structuredContent.lease.holder, b);
});

test("the worker's /mcp refuses a missing, unknown or revoked key", async () => {
  const made = await createKey(base, ADMIN, "acme", "workspace");
  const c = await connect(base, made.key);
  assert.equal((await c.listTools()).tools.length, 3);
  const res = await fetch(`${base}/admin/v1/keys?id=${made.id}`, { method: "DELETE", headers: { ...fresh, Authorization: `Bearer ${ADMIN}` } });
  assert.equal(res.status, 200, await res.text());
  await assert.rejects(c.listTools(), /401|unauthorized|revoked/i);
  await assert.rejects(connect(base, "lp_000000000000_nope"), /401|unauthorized/i);
  const get = await fetch(`${base}/mcp`, { headers: { ...fresh, Authorization: `Bearer ${workerKey}` } });
  assert.equal(get.status, 405);
  assert.equal(get.headers.get("allow"), "POST");
});
