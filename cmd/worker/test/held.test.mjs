// Held requests (lease?waitUpToMs=N) on the Workers tier, in a local
// workerd: the kernel keeps each held ask and says in its Ready which ones
// a command answered; the Durable Object only writes those answers. Each
// request is sent once `wait` shows the one before it held. Nothing here is
// timed: the tests count requests, commands and answers, and every wait
// for a condition polls with a watchdog of 30 s.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { start, createWorkspace, fresh } from "../miniflare.mjs";
import { startIn, stop, objectJSON } from "./local.mjs";

const ADMIN = "admin-secret-for-held-tests";
const LEASE = "/api/v1/acp/coordination/lease";
const RELEASE = "/api/v1/acp/coordination/release";
const did = (n) => `did:web:held.example:agent:${n}`;

let dataDir, mf, base;
before(async () => ({ dataDir, mf, base } = await startIn("held", ADMIN)));
after(() => stop(mf, dataDir));

async function call(route, key, body, { method = "POST", signal } = {}) {
  const res = await fetch(base + route, {
    method,
    signal,
    headers: { ...fresh, Authorization: `Bearer ${key}` },
    body: method === "GET" ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, text, json: JSON.parse(text) };
}

const held = (key, resource, actorDid, opts) => call(`${LEASE}?waitUpToMs=30000`, key, { resource, actorDid }, opts);

// until polls f until it gives a value that is not undefined (30 s
// watchdog).
async function until(what, f) {
  for (const end = Date.now() + 30000; Date.now() < end; ) {
    const v = await f();
    if (v !== undefined) return v;
    await new Promise((r) => setTimeout(r, 25));
  }
  assert.fail(`gave up waiting for ${what}`);
}

// queue is resource's queue as wait shows it ({holders, waiters}).
async function queue(key, resource) {
  const w = await call(`/api/v1/acp/coordination/wait?prefix=${encodeURIComponent(resource)}`, key, null, { method: "GET" });
  assert.equal(w.status, 200, w.text);
  return w.json.queues.find((q) => q.resource === resource) ?? { holders: [], waiters: [] };
}

// heldIn waits until wait shows actorDid's ask held on resource.
const heldIn = (key, resource, actorDid) =>
  until(`${actorDid}'s held ask on ${resource}`, async () => {
    const w = (await queue(key, resource)).waiters.find((x) => x.actorDid === actorDid);
    return w && w.heldUntilMs !== undefined ? w : undefined;
  });

// heldQueue sends n held requests on resource, for did(0) .. did(n-1), each
// once wait shows the one before held, and gives back their answers.
async function heldQueue(key, resource, n) {
  const asks = [];
  for (let i = 0; i < n; i++) {
    asks.push(held(key, resource, did(i)));
    await heldIn(key, resource, did(i));
  }
  return asks;
}

async function metrics(key) {
  const res = await fetch(`${base}/metrics`, { headers: { ...fresh, Authorization: `Bearer ${key}` } });
  assert.equal(res.status, 200);
  const out = {};
  for (const line of (await res.text()).split("\n")) {
    const m = /^(leaseplane_[a-z_]+(?:\{[^}]*\})?) (\d+)$/.exec(line);
    if (m) out[m[1]] = Number(m[2]);
  }
  return out;
}

const object = (ws, route, init) => objectJSON(mf, ws, route, init);

test("ten held requests on one resource are granted one after another in queue order", async () => {
  const key = await createWorkspace(base, ADMIN, "ten");
  const r = "lock:ten";
  assert.equal((await call(LEASE, key, { resource: r, actorDid: did("holder") })).status, 200);
  const before = await metrics(key);
  const asks = await heldQueue(key, r, 10);
  const m0 = await metrics(key);
  assert.equal(m0.leaseplane_held_requests, 10);
  assert.equal(m0['leaseplane_commands_total{op="acquire"}'], 11, "one acquire step per request, none on their behalf");
  assert.equal(m0.leaseplane_commands_logged_total - before.leaseplane_commands_logged_total, 10, "exactly one acquire logged per held request");
  let prev = did("holder"), fence = 0;
  for (let i = 0; i < 10; i++) {
    assert.equal((await call(RELEASE, key, { resource: r, actorDid: prev })).status, 200);
    const got = await asks[i];
    assert.equal(got.status, 200, `held request ${i}: ${got.text}`);
    assert.equal(got.json.lease.holder, did(i), `the release of ${prev} grants the head of the queue`);
    assert.ok(got.json.lease.fence > fence, "fences rise");
    fence = got.json.lease.fence;
    const q = await queue(key, r);
    assert.deepEqual(q.waiters.map((w) => w.actorDid), Array.from({ length: 9 - i }, (_, k) => did(i + 1 + k)), "the others still wait, in order");
    prev = did(i);
  }
  const m1 = await metrics(key);
  assert.equal(m1['leaseplane_commands_total{op="acquire"}'], 11, "no acquire was stepped again for a held request");
  assert.equal(m1.leaseplane_commands_logged_total - m0.leaseplane_commands_logged_total, 10, "the ten releases, each with the grant it made");
  assert.equal(m1.leaseplane_held_requests_total - m0.leaseplane_held_requests_total, 10);
  assert.equal(m1.leaseplane_held_requests, 0);
});

test("no storm: while three requests are held and nothing changes, no command is logged", async () => {
  const key = await createWorkspace(base, ADMIN, "calm");
  const r = "lock:calm";
  assert.equal((await call(LEASE, key, { resource: r, actorDid: did("holder") })).status, 200);
  const asks = await heldQueue(key, r, 3);
  const m0 = await metrics(key);
  assert.equal(m0.leaseplane_held_requests, 3);
  // Twenty reads of the queues while the three are held: the only
  // commands stepped are those twenty, and none is logged.
  for (let i = 0; i < 20; i++) assert.equal((await queue(key, r)).waiters.length, 3);
  const m1 = await metrics(key);
  assert.equal(m1.leaseplane_commands_logged_total, m0.leaseplane_commands_logged_total, "commands logged while nothing changed");
  const steps = (m) => Object.entries(m).filter(([k]) => k.startsWith("leaseplane_commands_total")).reduce((n, [, v]) => n + v, 0);
  assert.equal(steps(m1) - steps(m0), 20, "commands stepped: the twenty waits, nothing on the held requests' behalf");
  assert.equal(m1['leaseplane_commands_total{op="wait"}'] - (m0['leaseplane_commands_total{op="wait"}'] ?? 0), 20);
  assert.equal(m1.leaseplane_held_requests, 3);
  // One release, one grant, one logged command more than the release.
  assert.equal((await call(RELEASE, key, { resource: r, actorDid: did("holder") })).status, 200);
  assert.equal((await asks[0]).json.lease.holder, did(0));
  const m2 = await metrics(key);
  assert.equal(m2.leaseplane_commands_logged_total - m1.leaseplane_commands_logged_total, 1, "the release alone is logged; its grant is in it");
  for (const d of [1, 2]) assert.equal((await call(RELEASE, key, { resource: r, actorDid: did(d) })).status, 200); // they end cancelled
  for (const a of asks.slice(1)) assert.equal((await a).json.reason, "cancelled");
});

// The object cancels a held request's ask when the request's signal aborts
// (the client went away; wrangler.jsonc sets enable_request_signal). A
// local workerd never aborts it: Miniflare's entry worker, in front of
// ours, passes no signal on. So the test route /test/gone runs what the
// abort listener runs.
test("a client that goes away has its ask cancelled; once wait shows it gone, a release does not grant it", async () => {
  const key = await createWorkspace(base, ADMIN, "gone");
  const r = "lock:gone";
  assert.equal((await call(LEASE, key, { resource: r, actorDid: did("holder") })).status, 200);
  const asked = held(key, r, did("leaver"));
  await heldIn(key, r, did("leaver"));
  const { held: asks } = await object("gone", "/test/state");
  assert.deepEqual(await object("gone", `/test/gone?askId=${asks[0]}`, { method: "POST" }), { ok: true, found: true });
  assert.equal((await asked).status, 503);
  await until("the ask gone", async () => {
    const x = (await queue(key, r)).waiters.find((v) => v.actorDid === did("leaver"));
    return x && x.heldUntilMs === undefined ? x : undefined;
  });
  const m0 = await metrics(key);
  assert.equal(m0.leaseplane_held_requests, 0);
  assert.equal(m0['leaseplane_commands_total{op="cancel"}'], 2, "the cancel {} at start and the gone request's");
  assert.equal((await call(RELEASE, key, { resource: r, actorDid: did("holder") })).status, 200);
  assert.deepEqual((await queue(key, r)).holders, [], "nobody was granted the lease");
  const m = await metrics(key);
  assert.equal(m.leaseplane_held_undeliverable_total, 0, "no grant had to be taken back");
  assert.equal((await call(LEASE, key, { resource: r, actorDid: did("next") })).status, 200);
});

test("a grant whose request is gone unnoticed is released at once", async () => {
  const key = await createWorkspace(base, ADMIN, "lost");
  const r = "lock:lost";
  assert.equal((await call(LEASE, key, { resource: r, actorDid: did("holder") })).status, 200);
  const asked = held(key, r, did("lost")).catch((err) => err);
  await heldIn(key, r, did("lost"));
  const { held: asks } = await object("lost", "/test/state");
  assert.equal(asks.length, 1);
  assert.deepEqual(await object("lost", `/test/forget-held?askId=${asks[0]}`, { method: "POST" }), { ok: true, found: true });
  assert.equal((await call(RELEASE, key, { resource: r, actorDid: did("holder") })).status, 200);
  assert.deepEqual((await queue(key, r)).holders, [], "the undeliverable grant was released");
  const m = await metrics(key);
  assert.equal(m.leaseplane_held_undeliverable_total, 1);
  assert.equal(m['leaseplane_commands_total{op="release"}'], 2, "the holder's release and the object's");
  const ledger = await call("/api/v1/ledger/entries?start=0&count=10", key, null, { method: "GET" });
  const lost = ledger.json.entries.map((e) => e.event).filter((e) => e.actorDid === did("lost"));
  assert.deepEqual(lost.map((e) => e.type), ["coordination.lease", "coordination.release"], JSON.stringify(lost));
  assert.equal((await asked).status, 503, "the test route answered the forgotten request");
});

test("a restart cancels the asks of before: the old held request gets nothing granted", async () => {
  const key = await createWorkspace(base, ADMIN, "restart");
  const r = "lock:restart";
  assert.equal((await call(LEASE, key, { resource: r, actorDid: did("holder") })).status, 200);
  const asked = held(key, r, did("before")).then((x) => x, (err) => err);
  await heldIn(key, r, did("before"));
  await mf.dispose();
  const gone = await asked;
  assert.ok(gone instanceof Error || gone.status === 503, `the held request across the restart: ${JSON.stringify(gone.text ?? String(gone))}`);
  ({ mf, url: base } = await start({ dataDir, port: 0, adminSecret: ADMIN, testClock: true }));
  const w = (await queue(key, r)).waiters.find((x) => x.actorDid === did("before"));
  assert.ok(w, "the asker is still a waiter");
  assert.equal(w.heldUntilMs, undefined, "its ask was cancelled when the object started");
  assert.equal((await call(RELEASE, key, { resource: r, actorDid: did("holder") })).status, 200);
  assert.deepEqual((await queue(key, r)).holders, []);
  assert.equal((await metrics(key)).leaseplane_held_undeliverable_total, 0);
});
