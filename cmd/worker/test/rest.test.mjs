// The REST suite against the Workers tier in a local workerd (Miniflare,
// offline): the Go front worker authenticates and routes, the workspace's
// Durable Object decides with the kernel's wasip1 build. Run by
// `make test-worker` (after make worker).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { start, createWorkspace, createKey, fresh, record } from "../miniflare.mjs";

const ADMIN = "admin-secret-for-tests";
const LEASE = "/api/v1/acp/coordination/lease";
const RELEASE = "/api/v1/acp/coordination/release";
const WAIT = "/api/v1/acp/coordination/wait";
const SUSPEND = "/api/v1/acp/operator/suspend";

let dataDir, mf, base, keyA, keyB;

before(async () => {
  dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "leaseplane-worker-"));
  ({ mf, url: base } = await start({ dataDir, port: 0, adminSecret: ADMIN, testClock: true }));
  keyA = await createWorkspace(base, ADMIN, "acme");
  keyB = await createWorkspace(base, ADMIN, "globex", { readShared: ["file:"] });
});

after(async () => {
  await mf?.dispose();
  fs.rmSync(dataDir, { recursive: true, force: true });
});

async function call(route, key, body, { method = "POST", headers = {} } = {}) {
  const h = { ...fresh, ...headers };
  if (key !== null) h.Authorization = `Bearer ${key}`;
  const res = await fetch(base + route, {
    method,
    headers: h,
    body: method === "GET" ? undefined : typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    assert.fail(`${method} ${route} answered ${res.status} with a body that is not JSON: ${text}`);
  }
  return { status: res.status, headers: res.headers, text, json };
}

const acquire = (key, resource, actorDid, extra = {}) => call(LEASE, key, { resource, actorDid, ...extra });
const release = (key, resource, actorDid, extra = {}) => call(RELEASE, key, { resource, actorDid, ...extra });

// object reaches a workspace's Durable Object directly (the test clock).
function object(workspace) {
  return mf.getDurableObjectNamespace("WORKSPACES").then((ns) => ns.get(ns.idFromName(workspace)));
}

async function objectJSON(workspace, route, init) {
  const stub = await object(workspace);
  const res = await stub.fetch(`https://workspace${route}`, init);
  const body = await res.json();
  assert.equal(res.status, 200, `${route}: ${JSON.stringify(body)}`);
  return body;
}

test("a grant answers the lease with a fence", async () => {
  const r = await acquire(keyA, "lock:grant", "did:web:a.example:agent:1");
  assert.equal(r.status, 200, r.text);
  assert.equal(r.headers.get("content-type"), "application/json");
  assert.equal(r.json.ok, true);
  const l = r.json.lease;
  assert.equal(l.resource, "lock:grant");
  assert.equal(l.holder, "did:web:a.example:agent:1");
  assert.equal(l.mode, "write");
  assert.equal(l.expiresAtMs - l.grantedAtMs, 30000);
  assert.match(l.id, /^lease_/);
  // A renewal keeps id and fence.
  const again = await acquire(keyA, "lock:grant", "did:web:a.example:agent:1");
  assert.equal(again.status, 200);
  assert.equal(again.json.lease.id, l.id);
  assert.equal(again.json.lease.fence, l.fence);
});

test("one Go runtime in the front serves request after request", async () => {
  const served = async () => (await call("/healthz", null, null, { method: "GET" })).json.served;
  const first = await served();
  for (let i = 0; i < 5; i++) assert.equal((await acquire(keyA, "lock:runtime", "did:web:a.example:agent:rt")).status, 200);
  // The five leases and this request went through the same runtime's
  // counter: a runtime per request would answer 1 every time.
  assert.equal(await served(), first + 6);
});

test("lease_held answers 409 with Retry-After and the back-off", async () => {
  await acquire(keyA, "lock:held", "did:web:a.example:agent:1");
  const r = await acquire(keyA, "lock:held", "did:web:a.example:agent:2");
  assert.equal(r.status, 409, r.text);
  assert.equal(r.json.reason, "lease_held");
  assert.equal(r.json.holder, "did:web:a.example:agent:1");
  assert.deepEqual(r.json.stampede, { admitted: ["did:web:a.example:agent:2"], waitMs: 50 });
  assert.equal(r.headers.get("retry-after"), "1");
});

test("a request that would close a cycle is refused deadlock", async () => {
  const a = "did:web:a.example:agent:dl-a", b = "did:web:a.example:agent:dl-b";
  assert.equal((await acquire(keyA, "lock:dl-1", a)).status, 200);
  assert.equal((await acquire(keyA, "lock:dl-2", b)).status, 200);
  assert.equal((await acquire(keyA, "lock:dl-2", a)).json.reason, "lease_held");
  const r = await acquire(keyA, "lock:dl-1", b);
  assert.equal(r.status, 409, r.text);
  assert.equal(r.json.reason, "deadlock");
  assert.equal(r.json.holder, a);
  assert.equal(r.json.waitingOn, "lock:dl-2");
  assert.ok(Array.isArray(r.json.cycle) && r.json.cycle.length > 0);
  assert.ok(r.headers.get("retry-after"), "deadlock carries Retry-After");
});

test("release frees the lease; an old leaseId is stale_lease", async () => {
  const who = "did:web:a.example:agent:rel";
  const g = await acquire(keyA, "lock:rel", who);
  const id = g.json.lease.id;
  const r = await release(keyA, "lock:rel", who, { leaseId: id });
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(r.json, { ok: true, released: true, releasedIds: [id] });
  const again = await release(keyA, "lock:rel", who, { leaseId: id });
  assert.equal(again.status, 409, again.text);
  assert.equal(again.json.reason, "stale_lease");
  const nothing = await release(keyA, "lock:rel", who);
  assert.deepEqual(nothing.json, { ok: true, released: false, releasedIds: [] });
  // The next grant on the resource takes a new fence.
  const next = await acquire(keyA, "lock:rel", "did:web:a.example:agent:other");
  assert.ok(next.json.lease.fence > g.json.lease.fence);
});

test("workspaces never see each other", async () => {
  const ra = await acquire(keyA, "lock:shared-name", "did:web:x.example:agent:1");
  const rb = await acquire(keyB, "lock:shared-name", "did:web:x.example:agent:2");
  assert.equal(ra.status, 200);
  assert.equal(rb.status, 200, "another workspace's lease on the same name does not conflict");
  const waitB = await call(WAIT, keyB, null, { method: "GET" });
  assert.equal(waitB.status, 200, waitB.text);
  assert.ok(!waitB.text.includes("did:web:x.example:agent:1"), `globex's wait shows acme's holder: ${waitB.text}`);
  // globex's rules make file: read-shared; acme's do not.
  const r1 = await acquire(keyB, "file:q3", "did:web:x.example:agent:r1", { mode: "read" });
  const r2 = await acquire(keyB, "file:q3", "did:web:x.example:agent:r2", { mode: "read" });
  assert.equal(r2.status, 200, r2.text);
  const s1 = await acquire(keyA, "file:q3", "did:web:x.example:agent:r1", { mode: "read" });
  const s2 = await acquire(keyA, "file:q3", "did:web:x.example:agent:r2", { mode: "read" });
  assert.equal(s1.status, 200);
  assert.equal(s2.status, 409, s2.text);
  assert.equal(r1.status, 200);
});

test("401: no key, a bad scheme, an unknown key, a revoked key", async () => {
  const none = await acquire(null, "lock:x", "did:web:a.example:agent:1");
  assert.equal(none.status, 401);
  assert.deepEqual(none.json, { ok: false, reason: "unauthorized", error: "missing key: send Authorization: Bearer KEY" });
  assert.equal(none.headers.get("www-authenticate"), 'Bearer realm="leaseplane"');
  const basic = await call(LEASE, null, { resource: "lock:x", actorDid: "did:web:a" }, { headers: { Authorization: "Basic Zm9vOmJhcg==" } });
  assert.equal(basic.status, 401);
  assert.equal(basic.json.error, "the Authorization header must be Bearer KEY");
  for (const k of ["lp_000000000000_nope", "not-a-key", "lp_" + "x".repeat(300)]) {
    const r = await acquire(k, "lock:x", "did:web:a.example:agent:1");
    assert.equal(r.status, 401, k);
    assert.equal(r.json.error, "unknown or revoked key");
  }
  const made = await createKey(base, ADMIN, "acme", "workspace");
  assert.equal((await acquire(made.key, "lock:revoke", "did:web:a.example:agent:1")).status, 200);
  const rev = await fetch(`${base}/admin/v1/keys?id=${made.id}`, { method: "DELETE", headers: { Authorization: `Bearer ${ADMIN}` } });
  assert.equal(rev.status, 200, await rev.text());
  assert.equal((await acquire(made.key, "lock:revoke", "did:web:a.example:agent:1")).status, 401);
  const wrongAdmin = await fetch(`${base}/admin/v1/workspaces?name=evil`, { method: "POST", headers: { Authorization: "Bearer guess" } });
  assert.equal(wrongAdmin.status, 401);
});

test("a revocation holds at once, whatever KV still serves: the next request and a held one are refused", async () => {
  const made = await createKey(base, ADMIN, "acme", "workspace");
  const who = "did:web:a.example:agent:revoked";
  assert.equal((await acquire(made.key, "lock:revoked", who)).status, 200);
  // Another agent's request, held behind the lease, with the same key.
  const other = "did:web:a.example:agent:revoked-2";
  const held = call(`${LEASE}?waitUpToMs=20000`, made.key, { resource: "lock:revoked", actorDid: other });
  for (let i = 0; i < 100; i++) {
    const w = await call(`${WAIT}?prefix=lock:revoked`, keyA, null, { method: "GET" });
    if (w.json.queues[0]?.waiters?.length) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  // Revoked at the object only: the key's KV record stays, as a record
  // cached at another location would.
  const revoked = await objectJSON("acme", `/keys/revoke?id=${made.id}`, { method: "POST" });
  assert.deepEqual(revoked, { ok: true, revoked: true });
  const h = await held;
  assert.equal(h.status, 401, `the held request: ${h.text}`);
  assert.equal(h.json.reason, "unauthorized");
  const q = (await call(`${WAIT}?prefix=lock:revoked`, keyA, null, { method: "GET" })).json.queues[0];
  assert.equal(q.waiters.find((x) => x.actorDid === other)?.heldUntilMs, undefined, "the revoked key's held ask was cancelled");
  const next = await acquire(made.key, "lock:revoked", who);
  assert.equal(next.status, 401, next.text);
  assert.equal(next.json.error, "unknown or revoked key");
  assert.equal((await call("/api/v1/ledger/checkpoint", made.key, null, { method: "GET" })).status, 401);
  // The admin route's revocation of an unknown or revoked id is 404.
  const again = await fetch(`${base}/admin/v1/keys?id=${made.id}`, { method: "DELETE", headers: { ...fresh, Authorization: `Bearer ${ADMIN}` } });
  assert.equal(again.status, 404, await again.text());
});

test("a creation whose first key was never made can be sent again", async () => {
  // The object made, then the front gone before the key (as a failed KV
  // write would leave it).
  await objectJSON("retried", "/create?name=retried", { method: "POST", body: "" });
  const key = await createWorkspace(base, ADMIN, "retried");
  assert.equal((await acquire(key, "lock:x", "did:web:a.example:agent:1")).status, 200);
  const twice = await fetch(`${base}/admin/v1/workspaces?name=retried`, { method: "POST", headers: { ...fresh, Authorization: `Bearer ${ADMIN}` } });
  assert.equal(twice.status, 409);
  assert.equal((await twice.json()).reason, "workspace_exists");
  const none = await fetch(`${base}/admin/v1/keys?workspace=nosuch&role=workspace`, { method: "POST", headers: { ...fresh, Authorization: `Bearer ${ADMIN}` } });
  assert.equal(none.status, 404, await none.text());
});

test("whoami says what a key is; a revoked key learns nothing", async () => {
  const w = await call("/api/v1/whoami", keyA, null, { method: "GET" });
  assert.equal(w.status, 200, w.text);
  assert.deepEqual(w.json, { ok: true, workspace: "acme", role: "workspace" });
  const me = "did:web:a.example:agent:whoami";
  const agent = await createKey(base, ADMIN, "acme", "agent", me);
  const a = await call("/api/v1/whoami", agent.key, null, { method: "GET" });
  assert.deepEqual(a.json, { ok: true, workspace: "acme", role: "agent", actorDid: me });
  await objectJSON("acme", `/keys/revoke?id=${agent.id}`, { method: "POST" });
  assert.equal((await call("/api/v1/whoami", agent.key, null, { method: "GET" })).status, 401);
  assert.equal((await call("/api/v1/whoami", null, null, { method: "GET" })).status, 401);
});

test("/metrics counts the workspace's commands and held requests from its object", async () => {
  const key = await createWorkspace(base, ADMIN, "metered");
  const metrics = async () => {
    const res = await fetch(`${base}/metrics`, { headers: { ...fresh, Authorization: `Bearer ${key}` } });
    assert.equal(res.status, 200);
    assert.match(res.headers.get("content-type"), /^text\/plain/);
    const out = {};
    for (const line of (await res.text()).split("\n")) {
      const m = /^(leaseplane_[a-z_]+(?:\{[^}]*\})?) (\d+)$/.exec(line);
      if (m) out[m[1]] = Number(m[2]);
    }
    return out;
  };
  const m0 = await metrics();
  assert.equal(m0.leaseplane_commands_logged_total, 0);
  const a = "did:web:a.example:agent:m-a", b = "did:web:a.example:agent:m-b";
  for (let i = 0; i < 3; i++) assert.equal((await acquire(key, "lock:m", a)).status, 200);
  const m1 = await metrics();
  assert.equal(m1['leaseplane_commands_total{op="acquire"}'], 3);
  assert.equal(m1.leaseplane_commands_logged_total, 3, "the grant and two renewals are logged");
  assert.equal(m1.leaseplane_ledger_entries, 3);
  assert.equal((await call(`${WAIT}`, key, null, { method: "GET" })).status, 200);
  assert.equal((await metrics())['leaseplane_commands_total{op="wait"}'], 1);
  // One request held behind a's lease.
  const held = call(`${LEASE}?waitUpToMs=20000`, key, { resource: "lock:m", actorDid: b });
  let m2;
  for (let i = 0; i < 100; i++) {
    m2 = await metrics();
    if (m2.leaseplane_held_requests === 1) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.equal(m2.leaseplane_held_requests, 1);
  assert.equal((await release(key, "lock:m", a)).status, 200);
  const got = await held;
  assert.equal(got.status, 200, got.text);
  const m4 = await metrics();
  assert.equal(m4.leaseplane_held_requests, 0);
  assert.equal(m4.leaseplane_held_requests_total, 1);
  assert.equal(m4.leaseplane_keys, 1);
});

test("403: an agent key naming another agent; suspend without an operator key", async () => {
  const me = "did:web:a.example:agent:keyed";
  const { key } = await createKey(base, ADMIN, "acme", "agent", me);
  const other = await acquire(key, "lock:agent", "did:web:a.example:agent:someone-else");
  assert.equal(other.status, 403, other.text);
  assert.equal(other.json.reason, "actor_mismatch");
  assert.equal(other.json.keyActorDid, me);
  assert.equal(other.json.actorDid, "did:web:a.example:agent:someone-else");
  assert.equal((await acquire(key, "lock:agent", me)).status, 200);
  // An agent key reads the queues.
  assert.equal((await call(WAIT, key, null, { method: "GET" })).status, 200);
  const forbidden = await call(SUSPEND, keyA, { actorDid: me });
  assert.equal(forbidden.status, 403);
  assert.equal(forbidden.json.reason, "forbidden");
  const op = await createKey(base, ADMIN, "acme", "operator");
  const s = await call(SUSPEND, op.key, { actorDid: me });
  assert.equal(s.status, 200, s.text);
  const refused = await acquire(key, "lock:agent", me);
  assert.equal(refused.status, 403);
  assert.equal(refused.json.reason, "suspended");
});

test("400 names the field; the front and the object refuse with the same bytes", async () => {
  const me = "did:web:a.example:agent:bad";
  const { key } = await createKey(base, ADMIN, "acme", "agent", me);
  for (const body of ['{"resource": 5, "actorDid": "did:web:a.example:agent:bad"}', "{not json", '{"resource":"lock:a","actorDid":"nodid"}', "[]"]) {
    const viaFront = await call(LEASE, key, body); // agent key: decided by the Go front
    const viaObject = await call(LEASE, keyA, body); // workspace key: decided by the kernel in the object
    assert.equal(viaFront.status, 400, viaFront.text);
    assert.equal(viaObject.status, 400, viaObject.text);
    assert.equal(viaFront.json.reason, "invalid_request");
    assert.equal(viaFront.text, viaObject.text, `body ${body}`);
  }
  const r = await acquire(keyA, "", "did:web:a.example:agent:1");
  assert.match(r.json.error, /resource/);
});

test("413 above 8192 bytes; 404 and 405 for routes", async () => {
  const big = JSON.stringify({ resource: "lock:big", actorDid: "did:web:a.example:agent:1", pad: "x".repeat(9000) });
  const r = await call(LEASE, keyA, big);
  assert.equal(r.status, 413);
  assert.equal(r.json.reason, "body_too_large");
  const nf = await call("/api/v1/nope", keyA, {});
  assert.equal(nf.status, 404);
  assert.equal(nf.json.reason, "not_found");
  const m = await call(LEASE, keyA, null, { method: "GET" });
  assert.equal(m.status, 405);
  assert.equal(m.headers.get("allow"), "POST");
});

test("a lease lapses by the object's alarm with nobody asking", async () => {
  const ws = "lapse";
  const key = await createWorkspace(base, ADMIN, ws);
  const who = "did:web:a.example:agent:crashes";
  const g = await acquire(key, "lock:lapse", who);
  assert.equal(g.status, 200);
  const before = await objectJSON(ws, "/test/state");
  assert.equal(before.nextAlarm, g.json.lease.expiresAtMs);
  // Move the object's clock to 300 ms before the expiry: the alarm then
  // fires in real time, 300 ms later, and nobody sends a request.
  await objectJSON(ws, `/test/clock?advanceMs=${g.json.lease.expiresAtMs - before.nowMs - 300}`, { method: "POST" });
  let state;
  for (let i = 0; i < 200; i++) {
    await new Promise((r) => setTimeout(r, 100));
    state = await objectJSON(ws, "/test/state");
    if (state.log.some((e) => e.op === "tick")) break;
  }
  const ticks = state.log.filter((e) => e.op === "tick");
  assert.ok(ticks.length >= 1, `no tick logged: ${JSON.stringify(state.log)}`);
  assert.ok(ticks[0].nowMs >= g.json.lease.expiresAtMs, "the tick ran at or after the expiry");
  assert.deepEqual(state.log.map((e) => e.op).slice(-ticks.length), ticks.map(() => "tick"), "only ticks after the grant");
  assert.equal(state.trust[who], -5, "the lapse cost the holder 5 trust points");
  assert.equal(state.nextAlarm, null);
  // The next grant gets a new fence.
  const next = await acquire(key, "lock:lapse", "did:web:a.example:agent:next");
  assert.equal(next.status, 200);
  assert.equal(next.json.lease.fence, g.json.lease.fence + 1);
});

test("restarting workerd keeps every lease (snapshot plus log)", async () => {
  const ws = "restart";
  const key = await createWorkspace(base, ADMIN, ws);
  const stub = await object(ws);
  // 1,010 renewals straight to the object: past one snapshot (the kernel
  // says one is due every 1,000 logged commands), so the restart restores
  // a snapshot and replays a log.
  const held = [];
  for (let i = 0; i < 1010; i++) {
    const res = await stub.fetch("https://workspace/op/acquire", {
      method: "POST",
      headers: { "X-Leaseplane-Key-Id": key.split("_")[1] },
      body: record("acquire", { resource: "lock:r0", actorDid: "did:web:a.example:agent:0" }),
    });
    assert.equal(res.status, 200);
    await res.arrayBuffer();
  }
  // Then the leases to keep (no refusal, whose claim would end and move
  // the machine by alarm).
  for (let i = 1; i < 5; i++) {
    const r = await acquire(key, `lock:r${i}`, `did:web:a.example:agent:${i}`);
    assert.equal(r.status, 200);
    held.push(r.json.lease);
  }
  // Stop the object's clock (a restart on a loaded machine may take
  // longer than a lease lives): what is compared is the storage, not time.
  await objectJSON(ws, "/test/clock?advanceMs=-100000000", { method: "POST" });
  const stateBefore = await objectJSON(ws, "/test/state");
  assert.ok(stateBefore.log.length < 100, `a snapshot dropped the log behind it (${stateBefore.log.length} commands in the log)`);
  assert.equal(stateBefore.nowMs, stateBefore.snapshot.nowMs, "the clock stands at the last command");

  await mf.dispose();
  ({ mf, url: base } = await start({ dataDir, port: 0, adminSecret: ADMIN, testClock: true }));

  const stateAfter = await objectJSON(ws, "/test/state");
  assert.deepEqual(stateAfter.snapshot, stateBefore.snapshot, "the same machine after the restart");
  for (const l of held) {
    const other = await acquire(key, l.resource, "did:web:a.example:agent:intruder");
    assert.equal(other.status, 409, other.text);
    assert.equal(other.json.holder, l.holder);
    const renew = await acquire(key, l.resource, l.holder);
    assert.equal(renew.json.lease.id, l.id);
    assert.equal(renew.json.lease.fence, l.fence);
  }
  // Keys survive too (KV): the ones made before the restart still work.
  const a = await acquire(keyA, "lock:after-restart", "did:web:a.example:agent:someone");
  assert.equal(a.status, 200, a.text);
});

test("wait pages by query parameters; forget needs an operator key", async () => {
  await acquire(keyA, "queue:a", "did:web:a.example:agent:qa");
  await acquire(keyA, "queue:b", "did:web:a.example:agent:qb");
  const page = await call(`${WAIT}?prefix=queue:&limit=1`, keyA, null, { method: "GET" });
  assert.equal(page.status, 200, page.text);
  assert.deepEqual(page.json.queues.map((q) => q.resource), ["queue:a"]);
  assert.equal(page.json.next, "queue:a");
  const bad = await call(`${WAIT}?limit=0`, keyA, null, { method: "GET" });
  assert.equal(bad.status, 400);
  assert.match(bad.json.error, /limit must be an integer from 1 to 1000/);
  const forget = "/api/v1/acp/operator/forget";
  assert.equal((await call(forget, keyA, { actorDid: "did:web:a.example:agent:qa" })).json.reason, "forbidden");
  const op = await createKey(base, ADMIN, "acme", "operator");
  const busy = await call(forget, op.key, { actorDid: "did:web:a.example:agent:qa" });
  assert.equal(busy.status, 409, busy.text);
  assert.equal(busy.json.reason, "agent_busy");
});

test("lease?waitUpToMs holds the request and answers the grant at the release", async () => {
  const a = "did:web:a.example:agent:hold-a", b = "did:web:a.example:agent:hold-b";
  assert.equal((await acquire(keyA, "lock:hold", a)).status, 200);
  const waiting = call(`${LEASE}?waitUpToMs=20000`, keyA, { resource: "lock:hold", actorDid: b });
  await new Promise((r) => setTimeout(r, 500));
  assert.equal((await release(keyA, "lock:hold", a)).status, 200);
  const got = await waiting;
  assert.equal(got.status, 200, got.text);
  assert.equal(got.json.lease.holder, b);
  // Time up: the last lease_held; a bad value: 400 naming it.
  const short = await call(`${LEASE}?waitUpToMs=100`, keyA, { resource: "lock:hold", actorDid: a });
  assert.equal(short.status, 409, short.text);
  assert.equal(short.json.reason, "lease_held");
  const bad = await call(`${LEASE}?waitUpToMs=30001`, keyA, { resource: "lock:hold", actorDid: a });
  assert.equal(bad.status, 400);
  assert.match(bad.json.error, /waitUpToMs must be a whole number of milliseconds from 0 to 30000, not "30001"/);
});
