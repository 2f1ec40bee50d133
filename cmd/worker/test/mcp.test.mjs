// MCP over streamable HTTP at the worker's /mcp, through the official
// TypeScript SDK (@modelcontextprotocol/sdk), next to the server's /mcp
// (`leaseplane serve`, bin/leaseplane): the same tools, and the same
// results for the same calls (times aside), to a workspace key and to an
// operator key (drills.run, drills.cancel and detection.run are listed to
// operator keys only, and refused to any other). A held call answers when
// the lease is the caller's; a revoked key is refused.
//
// GET /openapi.json answers the server's document, the same bytes.
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
const AGENT = "did:web:acme.example:agent:mcp";
let dir, mf, base, server, serverURL, workerKey, serverKey, workerOperator, serverOperator, workerAgent, serverAgent;
const clients = [];

before(async () => {
  assert.ok(fs.existsSync(bin), `${bin} is missing: run make build`);
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "leaseplane-worker-mcp-"));
  ({ mf, url: base } = await start({ dataDir: path.join(dir, "worker"), port: 0, adminSecret: ADMIN, testClock: true }));
  workerKey = await createWorkspace(base, ADMIN, "acme");
  const out = execFileSync(bin, ["keys", "create", "--data", path.join(dir, "data"), "--workspace", "acme", "--init"], { encoding: "utf8" });
  serverKey = out.trim().split(/\s+/).pop();
  const more = (...flags) => execFileSync(bin, ["keys", "create", "--data", path.join(dir, "data"), "--workspace", "acme", ...flags], { encoding: "utf8" }).trim().split(/\s+/).pop();
  serverOperator = more("--operator");
  serverAgent = more("--agent", AGENT);
  workerOperator = (await createKey(base, ADMIN, "acme", "operator")).key;
  workerAgent = (await createKey(base, ADMIN, "acme", "agent", AGENT)).key;
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
    const rpc = async (key, id, method, params) => {
      const res = await fetch(`${serverURL}/mcp`, {
        method: "POST",
        headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json", Accept: "application/json, text/event-stream" },
        body: JSON.stringify({ jsonrpc: "2.0", id, method, params }),
      });
      return (await res.json()).result;
    };
    const init = await rpc(serverKey, 1, "initialize", { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "x", version: "1" } });
    const file = {
      capabilities: init.capabilities, instructions: init.instructions, serverInfo: { name: init.serverInfo.name, title: init.serverInfo.title },
      tools: await rpc(serverKey, 2, "tools/list"), operatorTools: await rpc(serverOperator, 3, "tools/list"),
    };
    fs.writeFileSync(path.join(root, "cmd/worker/mcp.json"), JSON.stringify(file) + "\n");
  }
  assert.deepEqual(wt.tools, st.tools, "the worker lists the server's lease tools, byte for byte (else: LEASEPLANE_WRITE_MCP=1 make test-worker)");
  assert.deepEqual(wt.tools.map((t) => t.name), ["coordination.lease.acquire", "coordination.lease.release", "coordination.wait"]);
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

const OPERATOR_TOOLS = ["detection.run", "drills.cancel", "drills.run"];

// normal drops what differs between two planes by time or by signing key
// alone: times, the signed checkpoint note, a run's drills so far.
const normal = (r) => {
  const c = structuredClone(r);
  const n = (o) => {
    if (!o || typeof o !== "object") return;
    for (const k of Object.keys(o)) {
      if (k === "checkpoint" || k === "drills" || k === "startedAtMs") o[k] = "*";
      else if (/AtMs$/.test(k) && o[k] !== null) o[k] = 0;
      else n(o[k]);
    }
  };
  n(c.structuredContent);
  if (c.structuredContent) c.content = c.content.map((x, i) => (i === c.content.length - 1 ? { type: "text", text: "*" } : x));
  return c;
};

test("an operator key is offered drills.run, drills.cancel and detection.run, answered as by the server", async () => {
  const w = await connect(base, workerOperator), s = await connect(serverURL, serverOperator);
  const [wt, st] = [await w.listTools(), await s.listTools()];
  assert.deepEqual(wt.tools, st.tools, "the worker lists the server's tools to an operator key, byte for byte (else: LEASEPLANE_WRITE_MCP=1 make test-worker)");
  assert.deepEqual(wt.tools.map((t) => t.name).filter((n) => OPERATOR_TOOLS.includes(n)).sort(), OPERATOR_TOOLS);
  assert.equal(wt.tools.length, 6);
  // The detector first: the two ledgers hold the same events (the test
  // before made the same calls on both), and no drill run is in them yet.
  const calls = [
    ["detection.run", { detector: "lease-overlap" }],
    ["detection.run", { detector: "nope" }],
    ["detection.run", {}],
    ["detection_run", { detector: "lease-overlap", extra: 1 }],
    ["drills.run", { x: 1 }],
    ["drills.run", {}],
    ["drills.cancel", { id: "run_1" }],
    ["drills.cancel", { id: "run_1" }],
    ["drills_cancel", { id: "run_99" }],
    ["drills.cancel", { id: "nope" }],
    ["drills.cancel", {}],
  ];
  const got = [];
  for (const [name, args] of calls) {
    const [wr, sr] = [await w.callTool({ name, arguments: args }), await s.callTool({ name, arguments: args })];
    assert.deepEqual(normal(wr), normal(sr), `${name} ${JSON.stringify(args)}`);
    got.push(wr);
  }
  const det = got[0].structuredContent;
  assert.equal(got[0].isError, undefined, JSON.stringify(got[0]));
  assert.equal(det.detector, "lease-overlap");
  assert.deepEqual(det.findings, []);
  assert.ok(det.treeSize > 0, "the run read the ledger");
  assert.equal(got[0].content[0].text, JSON.stringify(det), "the text is the REST answer");
  assert.equal(got[1].isError, true);
  assert.equal(got[5].structuredContent.id, "run_1");
  assert.equal(got[6].structuredContent.run.id, "run_1");
  assert.equal(typeof got[6].structuredContent.run.cancelledAtMs, "number", "the run is kept as cancelled");
  assert.equal(got[6].structuredContent.run.passed, null);
  assert.equal(got[7].structuredContent.reason, "run_ended");
  assert.equal(got[8].structuredContent.reason, "not_found");
  for (const i of [1, 2, 3, 4, 7, 8, 9, 10]) assert.equal(got[i].isError, true, `${calls[i][0]} ${JSON.stringify(calls[i][1])}`);
});

test("a workspace or agent key is not offered the operator tools, and is refused them as by the server", async () => {
  for (const [wk, sk] of [[workerKey, serverKey], [workerAgent, serverAgent]]) {
    const w = await connect(base, wk), s = await connect(serverURL, sk);
    const [wt, st] = [await w.listTools(), await s.listTools()];
    assert.deepEqual(wt.tools, st.tools);
    assert.deepEqual(wt.tools.map((t) => t.name), ["coordination.lease.acquire", "coordination.lease.release", "coordination.wait"]);
    for (const [name, args] of [["drills.run", {}], ["drills.cancel", { id: "run_1" }], ["detection.run", { detector: "lease-overlap" }]]) {
      const [wr, sr] = [await w.callTool({ name, arguments: args }), await s.callTool({ name, arguments: args })];
      assert.deepEqual(wr, sr, `${name} ${JSON.stringify(args)}`);
      assert.equal(wr.isError, true);
      assert.equal(wr.structuredContent.reason, "forbidden", JSON.stringify(wr));
    }
  }
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

test("the worker's /openapi.json is the server's, byte for byte, with no key", async () => {
  for (const method of ["GET", "HEAD", "POST"]) {
    const [w, s] = [await fetch(`${base}/openapi.json`, { method, headers: fresh }), await fetch(`${serverURL}/openapi.json`, { method })];
    const [wb, sb] = [Buffer.from(await w.arrayBuffer()), Buffer.from(await s.arrayBuffer())];
    assert.equal(w.status, s.status, method);
    for (const h of ["content-type", "allow", "cache-control", "x-content-type-options"]) assert.equal(w.headers.get(h), s.headers.get(h), `${method} ${h}`);
    assert.ok(wb.equals(sb), `${method}: the worker's ${wb.length} bytes are not the server's ${sb.length} (cmd/worker and the server both answer kernel/api/openapi.json)`);
    if (method === "GET") {
      assert.equal(w.status, 200);
      assert.equal(JSON.parse(wb).openapi, "3.1.0");
    }
  }
  const file = fs.readFileSync(path.join(root, "kernel/api/openapi.json"));
  const s = Buffer.from(await (await fetch(`${serverURL}/openapi.json`)).arrayBuffer());
  assert.ok(file.equals(s), "kernel/api/openapi.json is the running server's answer");
});
