// The ledger's retention on the Workers tier: POST /api/v1/ledger/exported
// (an operator key, the root of the tree of that size) marks what an export
// holds; retention (LEASEPLANE_LEDGER_RETENTION_MS, 1 ms here) then drops
// the bodies of whole rows of 32 entries below the mark, and only those:
// their hashes stay, so proofs and checkpoints still check, and their
// entries and receipts answer 410.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { start, createWorkspace, createKey, fresh } from "../miniflare.mjs";

const ADMIN = "admin-secret-for-retention-tests";
let dataDir, mf, base;

before(async () => {
  dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "leaseplane-worker-retention-"));
  ({ mf, url: base } = await start({ dataDir, port: 0, adminSecret: ADMIN, retentionMs: 1, testClock: true }));
});

after(async () => {
  await mf?.dispose();
  fs.rmSync(dataDir, { recursive: true, force: true });
});

// clock moves the workspace object's clock (the test clock).
async function clock(ws, ms) {
  const ns = await mf.getDurableObjectNamespace("WORKSPACES");
  const res = await ns.get(ns.idFromName(ws)).fetch(`https://workspace/test/clock?advanceMs=${ms}`, { method: "POST" });
  assert.equal(res.status, 200, await res.text());
}

async function call(method, route, key, body) {
  const res = await fetch(base + route, { method, headers: { ...fresh, Authorization: `Bearer ${key}` }, body: body && JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, text, json: text.startsWith("{") ? JSON.parse(text) : null };
}

test("an export mark lets retention drop exported bodies, and only those", async () => {
  const key = await createWorkspace(base, ADMIN, "kept");
  const operator = (await createKey(base, ADMIN, "kept", "operator")).key;
  // 70 entries: 35 grants and 35 renewals, with the object's clock
  // standing still after the first (no lease lapses however slow the
  // machine is).
  const leases = [];
  for (let i = 0; i < 70; i++) {
    if (i === 1) await clock("kept", -100000000);
    const r = await call("POST", "/api/v1/acp/coordination/lease", key, { resource: `lock:k${i % 35}`, actorDid: "did:web:k.example:agent:1" });
    assert.equal(r.status, 200, r.text);
    if (i < 35) leases.push(r.json.lease.id);
  }
  const ck = await call("GET", "/api/v1/ledger/checkpoint", key);
  const [, size, root] = ck.text.split("\n");
  assert.equal(size, "70");
  await clock("kept", 100000000); // real time again: the entries are older than 1 ms (their leases may lapse from now on: entries after 70)
  const mark = (k, q) => call("POST", `/api/v1/ledger/exported?${q}`, k);
  // Who may mark, and what is checked.
  assert.equal((await mark(key, `size=70&root=${encodeURIComponent(root)}`)).status, 403, "a workspace key may not mark an export");
  assert.equal((await call("GET", `/api/v1/ledger/exported?size=70&root=${encodeURIComponent(root)}`, operator)).status, 405);
  const wrong = await mark(operator, `size=69&root=${encodeURIComponent(root)}`);
  assert.equal(wrong.status, 400);
  assert.equal(wrong.json.parameter, "root");
  assert.match(wrong.json.error, /not the root of this ledger's tree of size 69/);
  assert.equal((await mark(operator, `size=100000&root=${encodeURIComponent(root)}`)).json.parameter, "size");
  assert.equal((await mark(operator, "size=70&root=abc")).json.parameter, "root");
  assert.equal((await mark(operator, "size=70")).json.parameter, "root");
  // Nothing dropped before a mark.
  assert.equal((await call("GET", "/api/v1/ledger/entries?start=0&count=1", key)).status, 200);
  // The mark at 70 covers rows [0, 32) and [32, 64): both go; [64, 70) stays.
  const ok = await mark(operator, `size=70&root=${encodeURIComponent(root)}`);
  assert.equal(ok.status, 200, ok.text);
  assert.deepEqual(ok.json, { ok: true, exported: 70, dropped: 64, retentionMs: 1 });
  const gone = await call("GET", "/api/v1/ledger/entries?start=0&count=10", key);
  assert.equal(gone.status, 410, gone.text);
  assert.equal(gone.json.reason, "gone");
  assert.equal((await call("GET", "/api/v1/ledger/entries?start=63&count=1", key)).status, 410);
  const kept = await call("GET", "/api/v1/ledger/entries?start=64&count=6", key);
  assert.equal(kept.status, 200, kept.text);
  assert.deepEqual(kept.json.entries.map((e) => e.index), [64, 65, 66, 67, 68, 69]);
  assert.equal((await call("GET", `/api/v1/ledger/receipt?leaseId=${leases[0]}`, key)).status, 410, "a dropped grant's receipt");
  // The hashes stay: a proof of a dropped entry, and consistency from it.
  const proof = await call("GET", "/api/v1/ledger/proof?index=3&size=70", key);
  assert.equal(proof.status, 200, proof.text);
  assert.ok(proof.json.hashes.length > 0);
  assert.equal((await call("GET", "/api/v1/ledger/consistency?from=10&to=70", key)).status, 200);
  // Entries after the mark are never dropped, however old: 40 more fill
  // row [64, 96) past the mark (the leases of before may lapse meanwhile:
  // more entries still).
  for (let i = 0; i < 40; i++) {
    assert.equal((await call("POST", "/api/v1/acp/coordination/lease", key, { resource: "lock:later", actorDid: "did:web:k.example:agent:1" })).status, 200);
  }
  const again = await mark(operator, `size=70&root=${encodeURIComponent(root)}`);
  assert.equal(again.json.dropped, 64, "row [64, 96) is not all exported: kept");
  const n = Number((await call("GET", "/api/v1/ledger/checkpoint", key)).text.split("\n")[1]);
  assert.ok(n >= 110, `the ledger kept growing from where it was (${n} entries)`);
  const after = await call("GET", "/api/v1/ledger/entries?start=64&count=1000", key);
  assert.deepEqual(after.json.entries.map((e) => e.index), Array.from({ length: n - 64 }, (_, i) => 64 + i), "every entry from 64 on is kept");
});
