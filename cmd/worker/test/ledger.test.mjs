// The Workers tier's ledger: every event of a workspace, in order, sealed
// with kernel/ledger's code in the Durable Object; receipts and exported
// bundles checked offline with `leaseplane verify`, checkpoints kept and
// checked for consistency by `leaseplane ledger watch`, before and after a
// restart of workerd. Needs bin/leaseplane (make build; make test-worker
// builds it).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { start, createWorkspace, createKey, root, fresh } from "../miniflare.mjs";
import { startIn, stop, objectJSON } from "./local.mjs";

const ADMIN = "admin-secret-for-ledger-tests";
let dataDir, mf, base;
before(async () => ({ dataDir, mf, base } = await startIn("ledger", ADMIN)));
after(() => stop(mf, dataDir));

async function post(route, key, body) {
  const res = await fetch(base + route, { method: "POST", headers: { ...fresh, Authorization: `Bearer ${key}` }, body: JSON.stringify(body) });
  return { status: res.status, json: await res.json() };
}

async function get(route, key) {
  const res = await fetch(base + route, { headers: { ...fresh, Authorization: `Bearer ${key}` } });
  return { status: res.status, type: res.headers.get("content-type"), text: await res.text() };
}

async function entries(key) {
  const all = [];
  for (;;) {
    const r = await get(`/api/v1/ledger/entries?start=${all.length}&count=1000`, key);
    assert.equal(r.status, 200, r.text);
    const page = JSON.parse(r.text).entries;
    if (page.length === 0) return all;
    all.push(...page);
  }
}

const object = (workspace, route, init) => objectJSON(mf, workspace, route, init);

const leaseplane = path.join(root, "bin", "leaseplane");

// cli runs bin/leaseplane against the worker with key; it returns the exit
// status and what it printed.
function cli(key, ...args) {
  assert.ok(fs.existsSync(leaseplane), `${leaseplane} is missing: run make build`);
  const r = spawnSync(leaseplane, args, { env: { ...process.env, LEASEPLANE_URL: base, LEASEPLANE_KEY: key }, encoding: "utf8" });
  return { status: r.status, out: r.stdout + r.stderr };
}

function verify(verifier, text) {
  const file = path.join(dataDir, `verify-${process.hrtime.bigint()}`);
  fs.writeFileSync(file, text);
  return cli("", "verify", "--key", verifier, file);
}

test("grants, renewals, releases, lapses and revocations are entries in order; receipts check offline", async () => {
  const key = await createWorkspace(base, ADMIN, "sealed");
  const op = (await createKey(base, ADMIN, "sealed", "operator")).key;
  const a = "did:web:l.example:agent:a", b = "did:web:l.example:agent:b", c = "did:web:l.example:agent:c";
  const g1 = await post("/api/v1/acp/coordination/lease", key, { resource: "lock:1", actorDid: a });
  assert.equal(g1.status, 200);
  assert.equal((await post("/api/v1/acp/coordination/lease", key, { resource: "lock:1", actorDid: a })).status, 200); // renew
  assert.equal((await post("/api/v1/acp/coordination/release", key, { resource: "lock:1", actorDid: a })).status, 200);
  const g2 = await post("/api/v1/acp/coordination/lease", key, { resource: "lock:2", actorDid: b });
  const g3 = await post("/api/v1/acp/coordination/lease", key, { resource: "lock:3", actorDid: c });
  assert.equal((await post("/api/v1/acp/operator/suspend", op, { actorDid: c })).status, 200); // revokes lock:3
  const first = await get("/api/v1/ledger/checkpoint", key);
  assert.equal(first.status, 200);
  assert.match(first.type, /^text\/plain/);
  assert.equal(first.text.split("\n")[1], "7", `the first checkpoint covers the 7 entries so far:\n${first.text}`);
  // lock:2 lapses by the alarm, with nobody asking.
  const st = await object("sealed", "/test/state");
  await object("sealed", `/test/clock?advanceMs=${g2.json.lease.expiresAtMs - st.nowMs - 200}`, { method: "POST" });
  let es;
  for (let i = 0; i < 200; i++) {
    await new Promise((r) => setTimeout(r, 100));
    es = await entries(key);
    if (es.some((e) => e.event.type === "coordination.expire")) break;
  }
  const types = es.map((e) => `${e.event.type} ${e.event.resource ?? e.event.actorDid}`);
  assert.deepEqual(types, [
    "coordination.lease lock:1",
    "coordination.renew lock:1",
    "coordination.release lock:1",
    "coordination.lease lock:2",
    "coordination.lease lock:3",
    `operator.suspend ${c}`,
    "coordination.revoke lock:3",
    "coordination.expire lock:2",
  ]);
  es.forEach((e, i) => {
    assert.equal(e.index, i);
    assert.deepEqual(JSON.parse(Buffer.from(e.data, "base64").toString("utf8")), e.event);
  });

  const verifier = (await get("/api/v1/ledger/key", key)).text.trim();
  assert.match(verifier, /^leaseplane\/sealed\+[0-9a-f]{8}\+/);
  const receipts = [];
  for (const g of [g1, g2, g3]) {
    const r = await get(`/api/v1/ledger/receipt?leaseId=${g.json.lease.id}`, key);
    assert.equal(r.status, 200, r.text);
    assert.match(r.text, /^c2sp\.org\/tlog-proof@v1\n/);
    receipts.push({ leaseId: g.json.lease.id, text: r.text });
  }
  for (const r of receipts) {
    const v = verify(verifier, r.text);
    assert.equal(v.status, 0, `leaseplane verify refused the receipt of ${r.leaseId}: ${v.out}`);
  }
  // A tampered receipt does not check.
  const tampered = verify(verifier, receipts[0].text.replace(/^index \d+$/m, "index 1"));
  assert.equal(tampered.status, 1, tampered.out);
  // The whole ledger exported through the worker's routes checks as a bundle.
  const bundle = path.join(dataDir, "bundle.json");
  const ex = cli(key, "ledger", "export", "--url", base, "--out", bundle);
  assert.equal(ex.status, 0, ex.out);
  const vb = verify(verifier, fs.readFileSync(bundle, "utf8"));
  assert.equal(vb.status, 0, vb.out);
  assert.match(vb.out, /8 entries|8/);
  // Keep the checkpoints: each one is checked against the last.
  const kept = path.join(dataDir, "checkpoints.jsonl");
  const w1 = cli(key, "ledger", "watch", "--url", base, "--file", kept, "--once");
  assert.equal(w1.status, 0, w1.out);
  const proof = await get("/api/v1/ledger/proof?index=2&size=8", key);
  assert.equal(proof.status, 200, proof.text);
  assert.equal(JSON.parse(proof.text).hashes.length, 3);
  const cons = JSON.parse((await get("/api/v1/ledger/consistency?from=7&to=8", key)).text);
  assert.deepEqual([cons.from, cons.to], [7, 8]);

  // Bad parameters are refused 400 naming them; an unknown lease is 404.
  const bad = await get("/api/v1/ledger/proof?index=9&size=8", key);
  assert.equal(bad.status, 400);
  assert.equal(JSON.parse(bad.text).parameter, "index");
  assert.equal(JSON.parse((await get("/api/v1/ledger/entries?count=0", key)).text).parameter, "count");
  assert.equal((await get("/api/v1/ledger/receipt?leaseId=lease_nope", key)).status, 404);

  // Another workspace sees only its own ledger, under its own key.
  const other = await createWorkspace(base, ADMIN, "other");
  assert.deepEqual(await entries(other), []);
  const otherKey = (await get("/api/v1/ledger/key", other)).text.trim();
  assert.notEqual(otherKey, verifier);
  assert.equal((await get(`/api/v1/ledger/receipt?leaseId=${g1.json.lease.id}`, other)).status, 404);

  // After a restart of workerd, the ledger grows from where it was and the
  // receipts handed out before still check against the new checkpoint.
  await mf.dispose();
  ({ mf, url: base } = await start({ dataDir, port: 0, adminSecret: ADMIN, testClock: true }));
  const g4 = await post("/api/v1/acp/coordination/lease", key, { resource: "lock:4", actorDid: a });
  assert.equal(g4.status, 200);
  const after = await entries(key);
  assert.equal(after.length, 9);
  assert.deepEqual(after.slice(0, 8), es);
  const r4 = (await get(`/api/v1/ledger/receipt?leaseId=${g4.json.lease.id}`, key)).text;
  const v2 = (await get("/api/v1/ledger/key", key)).text.trim();
  assert.equal(v2, verifier, "the verifier key survives the restart");
  for (const r of [...receipts, { leaseId: g4.json.lease.id, text: r4 }]) {
    const v = verify(verifier, r.text);
    assert.equal(v.status, 0, `after the restart, the receipt of ${r.leaseId}: ${v.out}`);
  }
  // The command line's lease --receipt works against the worker unchanged.
  const rfile = path.join(dataDir, "receipt-cli.txt");
  const lc = cli(key, "lease", "lock:5", "--as", b, "--receipt", rfile);
  assert.equal(lc.status, 0, lc.out);
  const vc = cli("", "verify", "--key", verifier, rfile);
  assert.equal(vc.status, 0, vc.out);
  assert.match(vc.out, /receipt holds/);
  const w2 = cli(key, "ledger", "watch", "--url", base, "--file", kept, "--once");
  assert.equal(w2.status, 0, `the checkpoint after the restart is consistent with the one kept before: ${w2.out}`);
  const records = fs.readFileSync(kept, "utf8").trim().split("\n").map((l) => JSON.parse(l));
  assert.deepEqual(records.map((r) => (r.key ? "key" : r.checkpoint.split("\n")[1])), ["key", "8", "10"]);
  assert.equal(records[0].key, verifier);
});

test("the entries are kept 32 to a row, packed as the server packs them; every one reads back, and a receipt from a full row checks", async () => {
  const key = await createWorkspace(base, ADMIN, "rows");
  const verifier = (await get("/api/v1/ledger/key", key)).text.trim();
  const grants = [];
  for (let i = 0; i < 40; i++) {
    const g = await post("/api/v1/acp/coordination/lease", key, { resource: `lock:row/${i}`, actorDid: `did:web:l.example:agent:r${i}` });
    assert.equal(g.status, 200);
    grants.push(g.json.lease.id);
    assert.equal((await post("/api/v1/acp/coordination/release", key, { resource: `lock:row/${i}`, actorDid: `did:web:l.example:agent:r${i}` })).status, 200);
  }
  const es = await entries(key);
  assert.equal(es.length, 80);
  es.forEach((e, i) => {
    assert.equal(e.index, i);
    assert.equal(e.event.type, i % 2 === 0 ? "coordination.lease" : "coordination.release");
    assert.equal(e.event.resource, `lock:row/${Math.floor(i / 2)}`);
  });
  const st = await object("rows", "/test/state");
  assert.deepEqual(st.ledger, { entries: 80, rows: 3 }, "80 entries in rows 0-31, 32-63 and 64-79");
  for (const id of [grants[0], grants[20], grants[39]]) {
    const r = await get(`/api/v1/ledger/receipt?leaseId=${id}`, key);
    assert.equal(r.status, 200, r.text);
    const v = verify(verifier, r.text);
    assert.equal(v.status, 0, `the receipt of ${id}: ${v.out}`);
  }
});

test("with the ledger's writes failing, leases are still granted; after, the ledger holds every event once", async () => {
  const key = await createWorkspace(base, ADMIN, "outage");
  const fault = (on) => object("outage", `/test/ledger-fault?on=${on ? 1 : 0}`, { method: "POST" });
  const a = "did:web:o.example:agent:a";
  assert.equal((await post("/api/v1/acp/coordination/lease", key, { resource: "lock:before", actorDid: a })).status, 200);
  await fault(true);
  const during = [];
  for (let i = 0; i < 3; i++) {
    const g = await post("/api/v1/acp/coordination/lease", key, { resource: `lock:during-${i}`, actorDid: a });
    assert.equal(g.status, 200, "a ledger fault does not stop a grant");
    during.push(g.json.lease);
  }
  assert.equal((await post("/api/v1/acp/coordination/release", key, { resource: "lock:during-0", actorDid: a })).status, 200);
  const st = await fault(true);
  assert.ok(st.ledgerSeq < st.seq, `the ledger is behind the log during the fault: ${JSON.stringify(st)}`);
  await fault(false);
  const es = await entries(key); // the ledger route catches up first
  assert.deepEqual(es.map((e) => `${e.event.type} ${e.event.resource}`), [
    "coordination.lease lock:before",
    "coordination.lease lock:during-0",
    "coordination.lease lock:during-1",
    "coordination.lease lock:during-2",
    "coordination.release lock:during-0",
  ]);
  const verifier = (await get("/api/v1/ledger/key", key)).text.trim();
  for (const l of during) {
    const r = await get(`/api/v1/ledger/receipt?leaseId=${l.id}`, key);
    assert.equal(r.status, 200, r.text);
    const v = verify(verifier, r.text);
    assert.equal(v.status, 0, v.out);
  }
  // Later commands go on from there, each event once.
  assert.equal((await post("/api/v1/acp/coordination/lease", key, { resource: "lock:after", actorDid: a })).status, 200);
  const again = await entries(key);
  assert.equal(again.length, 6);
  assert.equal(again[5].event.resource, "lock:after");
});
