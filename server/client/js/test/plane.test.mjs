// The JavaScript client against a real `leaseplane serve` (LEASEPLANE_BIN,
// a temporary data folder, a free port).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, accessSync, constants } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import * as lp from '../index.js';

const bin = process.env.LEASEPLANE_BIN;
let srv;

async function startPlane() {
  if (!bin) throw new Error('LEASEPLANE_BIN must name the built leaseplane binary (make test-js builds it)');
  accessSync(bin, constants.X_OK);
  const dir = mkdtempSync(join(tmpdir(), 'leaseplane-js-'));
  const data = join(dir, 'data');
  const proc = spawn(bin, ['serve', '--addr', '127.0.0.1:0', '--data', data], { stdio: ['ignore', 'pipe', 'pipe'] });
  proc.stderr.resume();
  let url = '', key = '';
  const lines = createInterface({ input: proc.stdout });
  for await (const line of lines) {
    if (line.startsWith('export LEASEPLANE_KEY=')) key = line.slice('export LEASEPLANE_KEY='.length);
    if (line.startsWith('export LEASEPLANE_URL=')) { url = line.slice('export LEASEPLANE_URL='.length); break; }
  }
  proc.stdout.resume();
  if (!url || !key) throw new Error('leaseplane serve did not start');
  const newKey = (...args) => execFileSync(bin, ['keys', 'create', '--data', data, '--workspace', 'default', ...args]).toString().trim().split(/\s+/).pop();
  return { proc, dir, data, url, key, operator: newKey('--operator'), newKey };
}

async function operator(route, actorDid) {
  const r = await fetch(`${srv.url}/api/v1/acp/operator/${route}`, {
    method: 'POST', headers: { Authorization: `Bearer ${srv.operator}` }, body: JSON.stringify({ actorDid }),
  });
  assert.equal(r.status, 200, `${route} ${actorDid}`);
}

// acquireRequests counts the acquire requests the plane answered (/metrics).
async function acquireRequests() {
  const text = await (await fetch(`${srv.url}/metrics`)).text();
  let n = 0;
  for (const line of text.split('\n')) {
    if (line.startsWith('leaseplane_requests_total{') && line.includes('op="acquire"')) n += Number(line.split(/\s+/).pop());
  }
  return n;
}

let seq = 0;
const fresh = (p) => `lock:${p}/${seq++}`;

before(async () => { srv = await startPlane(); });
after(async () => {
  srv.proc.kill('SIGTERM');
  await new Promise((r) => srv.proc.once('exit', r));
  rmSync(srv.dir, { recursive: true, force: true });
});

const plane = () => new lp.Plane({ url: srv.url, key: srv.key });

async function queue(resource) {
  const w = await plane().wait({ prefix: resource });
  return w.queues.find((q) => q.resource === resource) ?? { holders: [], waiters: [] };
}

test('take and release', async () => {
  const p = plane();
  const r = fresh('take');
  const l = await p.acquire({ resource: r, actorDid: 'did:web:a' });
  assert.equal(l.holder, 'did:web:a');
  assert.equal(l.mode, 'write');
  assert.equal(l.expiresAtMs - l.grantedAtMs, 30000);
  const again = await p.acquire({ resource: r, actorDid: 'did:web:a' });
  assert.deepEqual([again.id, again.fence], [l.id, l.fence]);
  const held = await p.acquire({ resource: r, actorDid: 'did:web:b' }).catch((e) => e);
  assert.ok(held instanceof lp.LeaseHeld && held instanceof lp.LeaseplaneError);
  assert.equal(held.status, 409);
  assert.equal(held.holder, 'did:web:a');
  assert.deepEqual(held.holders, ['did:web:a']);
  assert.ok(held.waitMs > 0);
  await assert.rejects(p.release({ resource: r, actorDid: 'did:web:a', leaseId: '0'.repeat(32) }), lp.StaleLease);
  assert.equal(await p.release({ resource: r, actorDid: 'did:web:a', leaseId: l.id }), true);
  assert.equal(await p.release({ resource: r, actorDid: 'did:web:a' }), false);
  await p.release({ resource: r, actorDid: 'did:web:b' });
  assert.deepEqual(await queue(r), { holders: [], waiters: [] });
});

test('errorOf: each reason the plane answers is its own class, with its fields', () => {
  const classes = {
    lease_held: lp.LeaseHeld, deadlock: lp.Deadlock, suspended: lp.Suspended, limit_exceeded: lp.LimitExceeded,
    cancelled: lp.Cancelled, stale_lease: lp.StaleLease, unauthorized: lp.Unauthorized, actor_mismatch: lp.ActorMismatch,
    forbidden: lp.Forbidden, invalid_request: lp.InvalidRequest, unavailable: lp.Unavailable, not_found: lp.NotFound,
    agent_busy: lp.AgentBusy, gone: lp.Gone,
  };
  for (const [reason, Cls] of Object.entries(classes)) {
    const e = lp.errorOf(409, { ok: false, reason, error: 'why' }, 2);
    assert.equal(e.constructor, Cls, reason);
    assert.ok(e instanceof lp.LeaseplaneError && e instanceof Error, reason);
    assert.deepEqual([e.name, e.reason, Cls.reason, e.status, e.retryAfter, e.message], [Cls.name, reason, reason, 409, 2, `${reason}: why`]);
  }
  const other = lp.errorOf(500, { reason: 'internal' });
  assert.equal(other.constructor, lp.LeaseplaneError);
  assert.equal(other.reason, 'internal');
  assert.deepEqual([new lp.PlaneUnreachable('x').reason, new lp.LeaseLost('x').reason], ['unreachable', 'lost']);
  const held = lp.errorOf(409, { reason: 'lease_held', holder: 'did:web:a', holders: ['did:web:a'], stampede: { waitMs: 50, admitted: ['did:web:b'] } });
  assert.deepEqual([held.holder, held.holders, held.claimants, held.waitMs, held.admitted], ['did:web:a', ['did:web:a'], [], 50, ['did:web:b']]);
  const claims = lp.errorOf(409, { reason: 'lease_held', claimants: ['did:web:b'] });
  assert.deepEqual([claims.holder, claims.claimants, claims.waitMs], [null, ['did:web:b'], 0]);
  const dl = lp.errorOf(409, { reason: 'deadlock', holder: 'did:web:b', waitingOn: 'r', cycle: ['x'] });
  assert.deepEqual([dl.holder, dl.waitingOn, dl.cycle], ['did:web:b', 'r', ['x']]);
  const lim = lp.errorOf(429, { reason: 'limit_exceeded', limit: 'asks', max: 8 });
  assert.deepEqual([lim.limit, lim.max], ['asks', 8]);
});

test('errors by reason', async () => {
  const r = fresh('errors');
  await assert.rejects(new lp.Plane({ url: srv.url, key: 'lp_nope_nope' }).acquire({ resource: r, actorDid: 'did:web:a' }), lp.Unauthorized);
  const agent = new lp.Plane({ url: srv.url, key: srv.newKey('--agent', 'did:web:own') });
  await assert.rejects(agent.acquire({ resource: r, actorDid: 'did:web:other' }), lp.ActorMismatch);
  await assert.rejects(plane().acquire({ resource: r, actorDid: 'nodid' }), lp.InvalidRequest);
  await assert.rejects(new lp.Plane({ url: 'http://127.0.0.1:1', key: 'k' }).acquire({ resource: r, actorDid: 'did:web:a' }), lp.PlaneUnreachable);
  await operator('suspend', 'did:web:sus');
  await assert.rejects(plane().acquire({ resource: r, actorDid: 'did:web:sus' }), lp.Suspended);
  await operator('resume', 'did:web:sus');
});

test('deadlock', async () => {
  const p = plane();
  const r1 = fresh('dl'), r2 = fresh('dl');
  await p.acquire({ resource: r1, actorDid: 'did:web:a' });
  await p.acquire({ resource: r2, actorDid: 'did:web:b' });
  await assert.rejects(p.acquire({ resource: r1, actorDid: 'did:web:b' }), lp.LeaseHeld);
  const e = await p.acquire({ resource: r2, actorDid: 'did:web:a' }).catch((x) => x);
  assert.ok(e instanceof lp.Deadlock, String(e));
  assert.equal(e.holder, 'did:web:b');
  assert.equal(e.waitingOn, r1);
  assert.ok(e.cycle.includes('did:web:a'));
  for (const [r, a] of [[r1, 'did:web:a'], [r2, 'did:web:b'], [r1, 'did:web:b']]) await p.release({ resource: r, actorDid: a });
});

test('a wait is one held request, not polling', async () => {
  const r = fresh('held');
  const p = plane();
  const first = await p.acquire({ resource: r, actorDid: 'did:web:a' });
  const sent = [];
  const b = new lp.Plane({ url: srv.url, key: srv.key, fetch: (u, o) => { sent.push(String(u)); return fetch(u, o); } });
  const waiting = b.acquire({ resource: r, actorDid: 'did:web:b', waitUpToMs: 25000 });
  while ((await queue(r)).waiters.length === 0) { /* until b's request is held */ }
  await p.release({ resource: r, actorDid: 'did:web:a' });
  const got = await waiting;
  assert.equal(got.holder, 'did:web:b');
  assert.ok(got.fence > first.fence);
  assert.equal(sent.length, 1, sent.join(' '));
  assert.match(sent[0], /\/lease\?waitUpToMs=2\d{4}$/);
  await p.release({ resource: r, actorDid: 'did:web:b' });
});

test('withLease releases, and passes errors through', async () => {
  const p = plane();
  const r = fresh('with');
  const fence = await p.withLease({ resource: r, actorDid: 'did:web:a', timeoutMs: 10000 }, async (lease, signal) => {
    assert.equal(signal.aborted, false);
    assert.deepEqual((await queue(r)).holders.map((h) => h.id), [lease.id]);
    return lease.fence;
  });
  assert.deepEqual(await queue(r), { holders: [], waiters: [] });
  await assert.rejects(p.withLease({ resource: r, actorDid: 'did:web:b' }, async () => { throw new Error('boom'); }), /boom/);
  assert.deepEqual(await queue(r), { holders: [], waiters: [] });
  assert.ok(fence > 0);
  await p.acquire({ resource: r, actorDid: 'did:web:a' });
  await assert.rejects(p.withLease({ resource: r, actorDid: 'did:web:b', timeoutMs: 200 }, () => assert.fail('granted')), lp.LeaseHeld);
  assert.deepEqual((await queue(r)).waiters, []);
  await p.release({ resource: r, actorDid: 'did:web:a' });
});

test('a suspend is pushed: the signal aborts with no renewal sent', async () => {
  const p = plane();
  const r = fresh('suspend');
  let between = -1;
  const err = await p.withLease({ resource: r, actorDid: 'did:web:pushed', renewEveryMs: 3600_000 }, async (lease, signal) => {
    const before0 = await acquireRequests();
    await operator('suspend', 'did:web:pushed');
    if (!signal.aborted) await new Promise((res) => signal.addEventListener('abort', res, { once: true }));
    between = (await acquireRequests()) - before0;
    assert.match(signal.reason.message, /revoked/);
  }).catch((e) => e);
  assert.equal(between, 0, 'acquire requests between the suspend and the notice');
  assert.ok(err instanceof lp.LeaseLost, String(err));
  assert.match(err.message, new RegExp(`lost the lease on ${r}`));
  await operator('resume', 'did:web:pushed');
  assert.deepEqual(await queue(r), { holders: [], waiters: [] });
});

test('events stream', async () => {
  const p = plane();
  const r = fresh('events');
  const ac = new AbortController();
  let ready;
  const live = new Promise((res) => { ready = res; });
  const got = [];
  const reading = (async () => {
    for await (const e of p.events({ prefix: r, signal: ac.signal, onReady: ready })) {
      got.push(e);
      if (got.length === 2) ac.abort();
    }
  })();
  await live;
  const l = await p.acquire({ resource: r, actorDid: 'did:web:a' });
  await p.release({ resource: r, actorDid: 'did:web:a' });
  await reading;
  assert.deepEqual(got.map((e) => e.type), ['coordination.lease', 'coordination.release']);
  assert.equal(got[0].leaseId, l.id);
  assert.equal(got[1].id, got[0].id + 1);
  assert.equal(JSON.parse(got[0].data).leaseId, l.id);
});
