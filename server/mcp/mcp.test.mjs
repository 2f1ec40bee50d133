// The MCP tools through the official TypeScript SDK (@modelcontextprotocol/sdk),
// against the real binary: `leaseplane serve` on a temporary data folder for
// streamable HTTP at /mcp, and `leaseplane mcp` as a child process for stdio.
//
// Run from the repository root: node --test server/mcp/mcp.test.mjs
// (make test-node). LEASEPLANE_BIN names a built binary; otherwise the test
// builds one with go build.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

const didA = 'did:web:acme.example:agent:a';
const didB = 'did:web:acme.example:agent:b';
const tools = ['coordination.lease.acquire', 'coordination.lease.release', 'coordination.wait'];
// The server's own backend also offers the operator's tools (an operator key runs them).
const operatorTools = ['detection.run', 'drills.cancel', 'drills.run'];

let dir, bin, server, url, wsKey, agentKey, operatorKey;

// keysCreate runs `leaseplane keys create` and returns the key: the last
// word on its stdout.
function keysCreate(...args) {
  const out = execFileSync(bin, ['keys', 'create', '--data', join(dir, 'data'), '--workspace', 'acme', ...args], { encoding: 'utf8' });
  return out.trim().split(/\s+/).pop();
}

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'leaseplane-mcp-node-'));
  bin = process.env.LEASEPLANE_BIN;
  if (!bin) {
    bin = join(dir, 'leaseplane');
    execFileSync('go', ['build', '-o', bin, './cmd/leaseplane'], { stdio: 'inherit' });
  }
  wsKey = keysCreate('--init'); // the data folder is made here, before serve
  agentKey = keysCreate('--agent', didA);
  operatorKey = keysCreate('--operator');
  server = spawn(bin, ['serve', '--addr', '127.0.0.1:0', '--data', join(dir, 'data'), '--log-level', 'warn'], { stdio: ['ignore', 'pipe', 'inherit'] });
  url = await new Promise((resolve, reject) => {
    let seen = '';
    server.stdout.setEncoding('utf8');
    server.stdout.on('data', (chunk) => {
      seen += chunk;
      const m = seen.match(/^export LEASEPLANE_URL=(\S+)$/m);
      if (m) resolve(m[1]);
    });
    server.on('exit', (code) => reject(new Error(`leaseplane serve exited ${code} before listening:\n${seen}`)));
  });
});

after(async () => {
  if (server && server.exitCode === null) {
    const exited = new Promise((resolve) => server.on('exit', resolve));
    server.kill('SIGTERM');
    await exited;
  }
  rmSync(dir, { recursive: true, force: true });
});

async function connectHTTP(key) {
  const client = new Client({ name: 'leaseplane-node-test', version: '0' });
  const headers = key ? { Authorization: `Bearer ${key}` } : {};
  await client.connect(new StreamableHTTPClientTransport(new URL('/mcp', url), { requestInit: { headers } }));
  return client;
}

async function connectStdio(key, ...flags) {
  const client = new Client({ name: 'leaseplane-node-test', version: '0' });
  const transport = new StdioClientTransport({
    command: bin,
    args: ['mcp', ...flags],
    env: { ...process.env, LEASEPLANE_URL: url, LEASEPLANE_KEY: key },
    stderr: 'inherit',
  });
  await client.connect(transport);
  return client;
}

// The answer of a tool call: structuredContent, which must equal the JSON
// of the text copy. The SDK has already checked it against the tool's
// output schema.
function answer(res) {
  assert.ok(res.structuredContent, `no structuredContent: ${JSON.stringify(res)}`);
  return res.structuredContent;
}

for (const [name, connect] of [['http', connectHTTP], ['stdio', connectStdio]]) {
  test(`tools/list per role over ${name}: the operator tools for an operator key only`, async () => {
    for (const [key, want] of [[operatorKey, [...tools, ...operatorTools]], [wsKey, tools], [agentKey, tools]]) {
      const c = await connect(key);
      try {
        assert.deepEqual((await c.listTools()).tools.map((t) => t.name).sort(), [...want].sort());
      } finally {
        await c.close();
      }
    }
  });

  test(`the lease tools over ${name}`, async () => {
    const resource = `lock:deploy/${name}`;
    const a = await connect(agentKey);
    const ws = await connect(wsKey);
    try {
      const listed = await a.listTools();
      // An agent key is offered the tools it may call: not the operator's.
      assert.deepEqual(listed.tools.map((t) => t.name).sort(), [...tools].sort());
      for (const t of listed.tools) {
        assert.ok(t.outputSchema, `${t.name} declares no output schema`);
        assert.equal(t.inputSchema.type, 'object');
      }
      const acquire = listed.tools.find((t) => t.name === tools[0]);
      assert.deepEqual(acquire.inputSchema.required, ['resource', 'actorDid'], 'ttlMs must be optional');
      assert.match(acquire.description, /lease_held/);
      assert.match(acquire.description, /deadlock/);

      let res = await a.callTool({ name: tools[0], arguments: { resource, actorDid: didA, ttlMs: 1000 } });
      assert.equal(res.isError, undefined, JSON.stringify(res));
      let v = answer(res);
      assert.equal(v.ok, true);
      assert.equal(v.lease.holder, didA);
      assert.equal(v.lease.expiresAtMs - v.lease.grantedAtMs, 30000, 'ttlMs is dropped');
      assert.deepEqual(JSON.parse(res.content[0].text), v, 'text copy equals structuredContent');

      res = await ws.callTool({ name: tools[0], arguments: { resource, actorDid: didB } });
      assert.ok(!res.isError, `a refusal is a normal result: ${JSON.stringify(res)}`);
      v = answer(res);
      assert.equal(v.ok, false);
      assert.equal(v.reason, 'lease_held');
      assert.equal(v.holder, didA);
      assert.equal(v.stampede.waitMs, 50);

      res = await a.callTool({ name: tools[2], arguments: {} });
      assert.ok(!res.isError, JSON.stringify(res));
      const q = answer(res).queues.find((q) => q.resource === resource);
      assert.ok(q, `no queue for ${resource}`);
      assert.deepEqual(q.holders.map((h) => h.holder), [didA]);
      assert.deepEqual(q.waiters.map((w) => w.actorDid), [didB]);

      res = await a.callTool({ name: tools[1], arguments: { resource, actorDid: didB } });
      assert.equal(res.isError, true, `agent key naming another agent: ${JSON.stringify(res)}`);
      assert.match(res.content[0].text, /actor_mismatch/);

      res = await a.callTool({ name: tools[1], arguments: { resource, actorDid: didA, leaseId: 'x' } });
      assert.equal(res.isError, true);
      assert.match(res.content[0].text, /unknown argument "leaseId"/);

      res = await a.callTool({ name: tools[1], arguments: { resource, actorDid: didA } });
      assert.ok(!res.isError, JSON.stringify(res));
      v = answer(res);
      assert.equal(v.released, true);
      assert.equal(v.releasedIds.length, 1);
    } finally {
      await a.close();
      await ws.close();
    }
  });
}

test('http without a bearer key is refused 401', async () => {
  await assert.rejects(connectHTTP(''), (err) => err.code === 401 && /"reason":"unauthorized"/.test(err.message));
});

test('stdio with an unknown key gives an unauthorized error result', async () => {
  const c = await connectStdio('lp_not-a-key');
  try {
    const res = await c.callTool({ name: tools[2], arguments: {} });
    assert.equal(res.isError, true);
    assert.match(res.content[0].text, /unauthorized.*LEASEPLANE_KEY/);
  } finally {
    await c.close();
  }
});

// Claude Desktop, Codex and Copilot CLI accept only ^[a-zA-Z0-9_-]{1,64}$:
// with --mcp-tool-names underscore the tools are listed so, and tools/call
// takes both spellings (here over stdio; serve's /mcp lists dotted names
// and takes underscore ones too).
test('underscore tool names: listed, and both spellings called', async () => {
  const underscored = [...tools].map((t) => t.replaceAll('.', '_')).sort();
  const c = await connectStdio(agentKey, '--mcp-tool-names', 'underscore');
  const h = await connectHTTP(agentKey);
  try {
    const listed = await c.listTools();
    assert.deepEqual(listed.tools.map((t) => t.name).sort(), underscored);
    for (const t of listed.tools) assert.match(t.name, /^[a-zA-Z0-9_-]{1,64}$/);
    const resource = 'lock:names';
    let res = await c.callTool({ name: 'coordination_lease_acquire', arguments: { resource, actorDid: didA } });
    assert.equal(answer(res).ok, true, JSON.stringify(res));
    res = await c.callTool({ name: 'coordination.lease.release', arguments: { resource, actorDid: didA } });
    assert.equal(answer(res).released, true, JSON.stringify(res));
    res = await h.callTool({ name: 'coordination_wait', arguments: {} });
    assert.ok(!res.isError, JSON.stringify(res));
    assert.ok(Array.isArray(answer(res).queues));
  } finally {
    await c.close();
    await h.close();
  }
});

// acquire with waitUpToMs: the plane holds the call and answers the grant
// when the holder releases.
test('acquire with waitUpToMs is answered at the release', async () => {
  const resource = 'lock:held';
  const a = await connectHTTP(agentKey);
  const ws = await connectHTTP(wsKey);
  try {
    let res = await a.callTool({ name: tools[0], arguments: { resource, actorDid: didA } });
    assert.equal(answer(res).ok, true, JSON.stringify(res));
    const held = ws.callTool({ name: tools[0], arguments: { resource, actorDid: didB, waitUpToMs: 20000 } });
    for (;;) {
      const q = answer(await a.callTool({ name: tools[2], arguments: {} })).queues.find((q) => q.resource === resource);
      if (q && q.waiters.some((w) => w.actorDid === didB)) break;
      await new Promise((r) => setTimeout(r, 5));
    }
    res = await a.callTool({ name: tools[1], arguments: { resource, actorDid: didA } });
    assert.equal(answer(res).released, true);
    res = await held;
    const v = answer(res);
    assert.equal(v.ok, true, JSON.stringify(res));
    assert.equal(v.lease.holder, didB);
    res = await ws.callTool({ name: tools[0], arguments: { resource, actorDid: didB, waitUpToMs: 30001 } });
    assert.equal(res.isError, true);
    assert.match(res.content[0].text, /waitUpToMs/);
  } finally {
    await a.close();
    await ws.close();
  }
});
