// The events stream (GET /api/v1/acp/coordination/events) on the Workers
// tier, next to the server's (`leaseplane serve`, bin/leaseplane): the
// same commands on both, and on both the same events with the same ids,
// the ready event's next index, the filters (?actorDid=, ?prefix=, an
// agent key's own agent), Last-Event-ID's resume and the same refusals,
// byte for byte. On the worker, the events are its ledger's entries (count
// and bytes, at their indexes), a revoked key's stream ends at once, a
// resume from behind retention is 410, and a long backlog (600 entries,
// three of the object's pages) comes whole, in order, then live; a
// stream whose client went away is closed (the object's gauge of open
// streams is back at 0). Everything is counted, nothing
// timed: a wait polls for its condition with a 20 s watchdog.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { createWorkspace, createKey, fresh } from "../miniflare.mjs";
import { startIn, stop, serve, serverKey, objectJSON } from "./local.mjs";

const ADMIN = "admin-secret-for-events-tests";
const EVENTS = "/api/v1/acp/coordination/events";
const A = "did:web:acme.example:agent:a", B = "did:web:acme.example:agent:b";

let dataDir, mf, base, server;
const w = {}, s = {}; // each plane's url and keys: key, operator, agent (B's)
const streams = [];

before(async () => {
  ({ dataDir, mf, base } = await startIn("events", ADMIN, { retentionMs: 1 }));
  w.url = base;
  w.key = await createWorkspace(base, ADMIN, "acme");
  w.operator = (await createKey(base, ADMIN, "acme", "operator")).key;
  w.agent = (await createKey(base, ADMIN, "acme", "agent", B)).key;
  const sdir = path.join(dataDir, "server");
  fs.mkdirSync(sdir);
  s.key = serverKey(sdir, "acme", "--init");
  s.operator = serverKey(sdir, "acme", "--operator");
  s.agent = serverKey(sdir, "acme", "--agent", B);
  server = await serve(sdir);
  s.url = server.url;
});

after(async () => {
  for (const st of streams) st.abort();
  await server?.stop();
  await stop(mf, dataDir);
});

async function call(plane, method, route, key, body) {
  const res = await fetch(plane.url + route, { method, headers: { ...fresh, Authorization: `Bearer ${key}` }, body: body && JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, text, json: text.startsWith("{") ? JSON.parse(text) : null };
}

const lease = (p, resource, actorDid) => call(p, "POST", "/api/v1/acp/coordination/lease", p.key, { resource, actorDid });
const release = (p, resource, actorDid) => call(p, "POST", "/api/v1/acp/coordination/release", p.key, { resource, actorDid });

// open opens an events stream and reads it as it comes: its status and
// headers, the ready event's next, each event (id, type, data as bytes)
// and an end event's data. query: "?..." or "".
function open(plane, key, query = "", lastEventID) {
  const ac = new AbortController();
  const headers = { ...fresh, Authorization: `Bearer ${key}`, Accept: "text/event-stream" };
  if (lastEventID !== undefined) headers["Last-Event-ID"] = String(lastEventID);
  const st = { events: [], ready: undefined, end: undefined, pings: 0, done: false, abort: () => ac.abort() };
  streams.push(st);
  st.answered = fetch(`${plane.url}${EVENTS}${query}`, { headers, signal: ac.signal }).then(async (res) => {
    st.status = res.status;
    st.headers = res.headers;
    if (res.status !== 200) {
      st.body = Buffer.from(await res.arrayBuffer());
      st.done = true;
      return;
    }
    st.reading = (async () => {
      let buf = Buffer.alloc(0);
      try {
        for await (const chunk of res.body) {
          buf = Buffer.concat([buf, chunk]);
          for (let at; (at = buf.indexOf("\n\n")) >= 0; ) {
            frame(st, buf.subarray(0, at));
            buf = buf.subarray(at + 2);
          }
        }
      } catch (err) {
        if (err.name !== "AbortError") st.error = err;
      }
      st.done = true;
    })();
  });
  return st;
}

function frame(st, b) {
  const f = {};
  for (const line of b.toString("latin1").split("\n")) {
    if (line.startsWith(":")) st.pings++;
    const at = line.indexOf(": ");
    if (at > 0) f[line.slice(0, at)] = line.slice(at + 2);
  }
  const data = f.data === undefined ? undefined : Buffer.from(f.data, "latin1");
  if (f.event === "ready") st.ready = JSON.parse(data).next;
  else if (f.event === "end") st.end = JSON.parse(data);
  else if (f.id !== undefined) st.events.push({ id: Number(f.id), type: f.event, data });
}

async function until(what, pred) {
  for (const end = Date.now() + 20000; !pred(); ) {
    if (Date.now() > end) assert.fail(`${what}: not within 20 s`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const opened = async (st) => {
  await st.answered;
  assert.equal(st.status, 200, st.body && st.body.toString());
  await until("the ready event", () => st.ready !== undefined);
  return st;
};

// entries reads the plane's ledger, every entry, as {index, data}, once
// it has n (the server's ledger writer follows its commits).
async function entries(plane, n) {
  for (const end = Date.now() + 20000; ; ) {
    const r = await call(plane, "GET", "/api/v1/ledger/entries?start=0&count=1000", plane.key);
    assert.equal(r.status, 200, r.text);
    if (r.json.entries.length >= n) return r.json.entries.map((e) => ({ index: e.index, data: Buffer.from(e.data, "base64") }));
    if (Date.now() > end) assert.fail(`the ledger has ${r.json.entries.length} entries, not ${n}, after 20 s`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

// same drops what differs between two planes by time alone.
const same = (b) => b.toString().replace(/"([A-Za-z]*(AtMs|Ms))":\d+/g, '"$1":0');
const ids = (st) => st.events.map((e) => e.id);

let all = {}; // each plane's unfiltered stream of the first test

test("a stream sends each committed event with its ledger index and its entry's bytes, filtered, as the server's does", async () => {
  const got = {};
  for (const [name, p] of [["worker", w], ["server", s]]) {
    // Two events before any stream.
    assert.equal((await lease(p, "lock:a", A)).status, 200);
    assert.equal((await release(p, "lock:a", A)).status, 200);
    const st = {
      all: await opened(open(p, p.key)),
      onlyB: await opened(open(p, p.key, `?actorDid=${encodeURIComponent(B)}`)),
      bOwn: await opened(open(p, p.agent)),
      lockC: await opened(open(p, p.key, "?prefix=lock%3Ac")),
    };
    for (const x of Object.values(st)) assert.equal(x.ready, 2, `${name}: ready says the next event is 2 (two before)`);
    for (const h of ["content-type", "cache-control", "x-content-type-options"]) assert.ok(st.all.headers.get(h), h);
    assert.equal(st.all.headers.get("content-type"), "text/event-stream");
    await lease(p, "lock:a", A);
    await lease(p, "lock:b", B);
    await lease(p, "lock:c", B);
    assert.equal((await call(p, "POST", "/api/v1/acp/operator/suspend", p.operator, { actorDid: B })).status, 200);
    // Fences: B's resume (B's streams see it), then A on lock:cz (lock:c's).
    assert.equal((await call(p, "POST", "/api/v1/acp/operator/resume", p.operator, { actorDid: B })).status, 200);
    await lease(p, "lock:cz", A);
    await until(`${name}: the unfiltered stream's 8 events`, () => st.all.events.length >= 8);
    const parsed = st.all.events.map((e) => ({ id: e.id, ...JSON.parse(e.data) }));
    const fenceB = parsed.find((e) => e.type === "operator.resume").id, fenceC = parsed.at(-1).id;
    await until(`${name}: B's streams reach the resume`, () => ids(st.onlyB).includes(fenceB) && ids(st.bOwn).includes(fenceB));
    await until(`${name}: lock:c's stream reaches lock:cz`, () => ids(st.lockC).includes(fenceC));
    assert.deepEqual(ids(st.all), [2, 3, 4, 5, 6, 7, 8, 9], name);
    assert.deepEqual(st.all.events.map((e) => e.type), ["coordination.lease", "coordination.lease", "coordination.lease", "operator.suspend",
      "coordination.revoke", "coordination.revoke", "operator.resume", "coordination.lease"], name);
    const forB = parsed.filter((e) => e.actorDid === B).map((e) => e.id);
    assert.equal(forB.length, 6);
    assert.deepEqual(ids(st.onlyB), forB, `${name}: ?actorDid= shows B's events only`);
    assert.deepEqual(ids(st.bOwn), forB, `${name}: B's agent key sees B's events only`);
    assert.deepEqual(ids(st.lockC), parsed.filter((e) => typeof e.resource === "string" && e.resource.startsWith("lock:c")).map((e) => e.id), `${name}: ?prefix=`);
    assert.equal(ids(st.lockC).length, 3);
    for (const x of [st.onlyB, st.bOwn, st.lockC]) {
      assert.deepEqual(x.events.map((e) => e.data), x.events.map((e) => st.all.events.find((y) => y.id === e.id).data), "a filtered stream sends the same bytes");
    }
    // The same bytes as the ledger's entries, at the same indexes: every
    // entry, each once.
    const es = await entries(p, 10);
    assert.equal(es.length, 10, `${name}: the ledger has 10 entries`);
    st.all.events.forEach((e) => assert.ok(e.data.equals(es[e.id].data), `${name}: event ${e.id}: stream ${e.data}, ledger ${es[e.id].data}`));
    got[name] = st;
  }
  for (const k of Object.keys(got.worker)) {
    assert.deepEqual(got.worker[k].events.map((e) => [e.id, e.type, same(e.data)]), got.server[k].events.map((e) => [e.id, e.type, same(e.data)]), `${k}: the worker's stream is the server's`);
  }
  all = { worker: got.worker.all, server: got.server.all };
});

test("Last-Event-ID resumes after that event, as on the server", async () => {
  for (const [name, p] of [["worker", w], ["server", s]]) {
    const again = await opened(open(p, p.key, "", 4));
    assert.equal(again.ready, 10, name);
    await until(`${name}: events 5 to 9`, () => again.events.length >= 5);
    assert.deepEqual(ids(again), [5, 6, 7, 8, 9], name);
    again.events.forEach((e) => assert.ok(e.data.equals(all[name].events.find((x) => x.id === e.id).data)));
    const first = await opened(open(p, p.key, "", 0));
    await until(`${name}: events 1 to 9`, () => first.events.length >= 9);
    assert.deepEqual(ids(first), [1, 2, 3, 4, 5, 6, 7, 8, 9]);
    assert.equal(first.events[0].type, "coordination.release");
    // A resumed stream goes on live: one more event on both.
    await lease(p, "lock:d", A);
    await until(`${name}: event 10 on the resumed streams`, () => ids(again).includes(10) && ids(first).includes(10));
    assert.deepEqual(ids(again), [5, 6, 7, 8, 9, 10]);
    // A resume from the newest event sends only what comes after it.
    const newest = await opened(open(p, p.key, `?actorDid=${encodeURIComponent(A)}`, 10));
    await lease(p, "lock:d", A);
    await until(`${name}: event 11`, () => newest.events.length >= 1);
    assert.deepEqual(ids(newest), [11]);
    for (const st of [again, first, newest]) st.abort();
  }
});

test("the stream's refusals are the server's, byte for byte", async () => {
  const cases = [
    ["an agent key naming another agent", (p) => [p.agent, `?actorDid=${encodeURIComponent(A)}`], 403],
    ["actorDid not a DID", (p) => [p.key, "?actorDid=nodid"], 400],
    ["an unknown query parameter", (p) => [p.key, "?color=red"], 400],
    ["a parameter twice", (p) => [p.key, "?prefix=a&prefix=b"], 400],
    ["Last-Event-ID past the newest event", (p) => [p.key, "", 99], 400],
    ["Last-Event-ID not a number", (p) => [p.key, "", "x"], 400],
    ["Last-Event-ID negative", (p) => [p.key, "", "-1"], 400],
    ["an unknown key", () => ["lp_000000000000_nope", ""], 401],
  ];
  for (const [what, args, status] of cases) {
    const [ws, ss] = [open(w, ...args(w)), open(s, ...args(s))];
    await Promise.all([ws.answered, ss.answered]);
    assert.equal(ws.status, status, `${what}: ${ws.body}`);
    assert.equal(ss.status, status, `${what} (server): ${ss.body}`);
    assert.equal(ws.body.toString(), ss.body.toString(), what);
  }
  const [wr, sr] = [
    await fetch(w.url + EVENTS, { method: "POST", headers: { ...fresh, Authorization: `Bearer ${w.key}` } }),
    await fetch(s.url + EVENTS, { method: "POST", headers: { Authorization: `Bearer ${s.key}` } }),
  ];
  assert.equal(wr.status, 405);
  assert.equal(wr.headers.get("allow"), sr.headers.get("allow"));
  assert.equal(await wr.text(), await sr.text());
  const [wn, sn] = [await fetch(w.url + EVENTS, { headers: fresh }), await fetch(s.url + EVENTS)];
  assert.equal(wn.status, 401);
  assert.equal(await wn.text(), await sn.text(), "no key");
});

test("a revoked key's stream ends at once with an end event", async () => {
  const made = await createKey(base, ADMIN, "acme", "workspace");
  const st = await opened(open(w, made.key));
  const res = await fetch(`${base}/admin/v1/keys?id=${made.id}`, { method: "DELETE", headers: { ...fresh, Authorization: `Bearer ${ADMIN}` } });
  assert.equal(res.status, 200, await res.text());
  await until("the end event and the stream's end", () => st.end !== undefined && st.done);
  assert.equal(st.end.reason, "unauthorized");
  const again = open(w, made.key);
  await again.answered;
  assert.equal(again.status, 401);
});

test("a resume from behind retention is 410 gone; from the first kept entry it streams", async () => {
  const p = { url: base, key: await createWorkspace(base, ADMIN, "kept") };
  const operator = (await createKey(base, ADMIN, "kept", "operator")).key;
  const clock = (ms) => objectJSON(mf, "kept", `/test/clock?advanceMs=${ms}`, { method: "POST" });
  // 70 entries with the object's clock standing still (no lease lapses).
  for (let i = 0; i < 70; i++) {
    if (i === 1) await clock(-100000000);
    assert.equal((await lease(p, `lock:k${i % 35}`, A)).status, 200);
  }
  const live = await opened(open(p, p.key, "", 60));
  await until("events 61 to 69", () => live.events.length >= 9);
  const [, size, root] = (await call(p, "GET", "/api/v1/ledger/checkpoint", p.key)).text.split("\n");
  assert.equal(size, "70");
  await clock(100000000);
  const mark = await call(p, "POST", `/api/v1/ledger/exported?size=70&root=${encodeURIComponent(root)}`, operator);
  assert.equal(mark.status, 200, mark.text);
  assert.equal(mark.json.dropped, 64);
  for (const after of [0, 62]) {
    const st = open(p, p.key, "", after);
    await st.answered;
    assert.equal(st.status, 410, `after ${after}: ${st.body}`);
    const no = JSON.parse(st.body);
    assert.equal(no.reason, "gone");
    assert.equal(no.error, `entry ${after + 1} was dropped after its retention period, once exported (entries from 64 are kept)`);
  }
  const kept = await opened(open(p, p.key, "", 63));
  await until("events 64 to 69", () => kept.events.length >= 6);
  const es = (await call(p, "GET", "/api/v1/ledger/entries?start=64&count=1000", p.key)).json.entries;
  await until("every kept entry", () => kept.events.length >= es.length);
  assert.deepEqual(ids(kept), es.map((e) => e.index));
  kept.events.forEach((e, i) => assert.ok(e.data.equals(Buffer.from(es[i].data, "base64"))));
  // The stream opened before the drop goes on: it had sent those entries.
  assert.deepEqual(ids(live).slice(0, 9), [61, 62, 63, 64, 65, 66, 67, 68, 69]);
});

test("a resume reads a long backlog a page at a time: every entry once, in order, then live", async () => {
  const p = { url: base, key: await createWorkspace(base, ADMIN, "long") };
  // 600 entries planted in the ledger (the object's test route), more
  // than two of the stream's pages of 256.
  for (let b = 0; b < 3; b++) {
    const evs = Array.from({ length: 200 }, (_, i) => ({ type: "coordination.release", atMs: 1, resource: `lock:p${b * 200 + i}`, actorDid: (b * 200 + i) % 2 ? A : B, released: false }));
    await objectJSON(mf, "long", `/test/plant?events=${encodeURIComponent(JSON.stringify(evs))}`);
  }
  const st = await opened(open(p, p.key, "", 0));
  const onlyA = await opened(open(p, p.key, `?actorDid=${encodeURIComponent(A)}`, 0));
  assert.equal(st.ready, 600);
  await until("events 1 to 599", () => st.events.length >= 599);
  await until("A's 300 events after 0", () => onlyA.events.length >= 300);
  assert.deepEqual(ids(st), Array.from({ length: 599 }, (_, i) => i + 1));
  assert.deepEqual(ids(onlyA), Array.from({ length: 300 }, (_, i) => 2 * i + 1));
  const es = (await call(p, "GET", "/api/v1/ledger/entries?start=1&count=1000", p.key)).json.entries;
  assert.equal(es.length, 599);
  st.events.forEach((e, i) => assert.ok(e.data.equals(Buffer.from(es[i].data, "base64")), `event ${e.id}`));
  assert.equal((await lease(p, "lock:live", A)).status, 200);
  await until("the live event 600", () => ids(st).includes(600) && ids(onlyA).includes(600));
  assert.equal(st.events.length, 600);
});

test("a stream whose client went away is closed by the object", async () => {
  const p = { url: base, key: await createWorkspace(base, ADMIN, "left") };
  const streamsOpen = async () => {
    const r = await call(p, "GET", "/metrics", p.key);
    assert.equal(r.status, 200, r.text);
    return Number(r.text.match(/^leaseplane_event_streams (\d+)$/m)[1]);
  };
  assert.equal(await streamsOpen(), 0);
  const st = await opened(open(p, p.key));
  assert.equal(await streamsOpen(), 1);
  st.abort();
  // The object learns it when the stream is cancelled, or at its next
  // write to it (an event).
  for (const end = Date.now() + 20000; (await streamsOpen()) > 0; ) {
    assert.ok(Date.now() < end, "the object still counts the stream after 20 s");
    assert.equal((await lease(p, "lock:gone", A)).status, 200);
  }
});
