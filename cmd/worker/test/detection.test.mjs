// The lease-overlap detector on the Workers tier, in a local workerd
// (Miniflare, offline): kernel/detect run by the front over the
// workspace's ledger as its object serves it; nothing found in a ledger
// made under held requests, and the overlap of two grants planted in the
// ledger (as a broken plane would have recorded them) found, cited with
// inclusion proofs and filed as one case however often runs repeat. Run
// by `make test-worker`.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createWorkspace, createKey, fresh, start } from "../miniflare.mjs";
import { startIn, stop, objectJSON } from "./local.mjs";

const ADMIN = "admin-secret-for-tests";
const LEASE = "/api/v1/acp/coordination/lease";
const RELEASE = "/api/v1/acp/coordination/release";
const RUN = "/api/v1/detection/run";
const agent = (i) => `did:web:a.example:agent:${i}`;

let dataDir, mf, base, wkey, okey;

before(async () => {
  ({ dataDir, mf, base } = await startIn("detection", ADMIN));
  wkey = await createWorkspace(base, ADMIN, "watched");
  okey = (await createKey(base, ADMIN, "watched", "operator")).key;
});

after(() => stop(mf, dataDir));

async function call(method, route, key, body) {
  const res = await fetch(base + route, { method, headers: { ...fresh, Authorization: `Bearer ${key}` }, body: method === "GET" ? undefined : body });
  const text = await res.text();
  return { status: res.status, text, json: JSON.parse(text) };
}

const run = async () => {
  const r = await call("POST", RUN, okey, '{"detector":"lease-overlap"}');
  assert.equal(r.status, 200, r.text);
  return r.json;
};

// until polls the object's state until pred holds (a generous watchdog).
async function until(what, pred) {
  for (const end = Date.now() + 20000; ; ) {
    const st = await objectJSON(mf, "watched", "/test/state");
    if (pred(st)) return st;
    if (Date.now() > end) assert.fail(`${what}: not within 20 s; state: ${JSON.stringify(st.held)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

test("the detection routes refuse what they must", async () => {
  let r = await call("POST", RUN, wkey, '{"detector":"lease-overlap"}');
  assert.equal(r.status, 403, r.text);
  r = await call("POST", RUN, okey, "{}");
  assert.equal(r.status, 400, r.text);
  assert.match(r.json.error, /detector is required/);
  r = await call("POST", RUN, okey, '{"detector":"nope"}');
  assert.equal(r.status, 400, r.text);
  assert.match(r.json.error, /"nope" is not registered/);
  r = await call("POST", RUN, okey, '{"detector":"lease-overlap","x":1}');
  assert.equal(r.status, 400, r.text);
  r = await call("GET", "/api/v1/detection/cases?status=closed", wkey);
  assert.equal(r.status, 400, r.text);
  r = await call("GET", RUN, okey);
  assert.equal(r.status, 405, r.text);
  r = await call("GET", "/api/v1/detection/detectors", wkey);
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(r.json.detectors.map((d) => d.name), ["lease-overlap"]);
});

test("a ledger made under held requests holds no overlap; a planted one is found, cited and filed once", async () => {
  const lease = (i, wait) => call("POST", LEASE + (wait ? "?waitUpToMs=20000" : ""), wkey, JSON.stringify({ resource: "lock:x", actorDid: agent(i) }));
  const release = (i) => call("POST", RELEASE, wkey, JSON.stringify({ resource: "lock:x", actorDid: agent(i) }));
  assert.equal((await lease(0)).status, 200);
  const held = [];
  for (let i = 1; i <= 3; i++) {
    held.push(lease(i, true)); // one at a time: the kernel answers held asks in the order they came
    await until(`${i} held requests`, (st) => st.held.length === i);
  }
  for (let i = 0; i < 3; i++) {
    assert.equal((await release(i)).status, 200);
    const got = await held[i];
    assert.equal(got.status, 200, got.text);
    assert.equal(got.json.lease.holder, agent(i + 1));
  }
  assert.equal((await release(3)).status, 200);
  const clean = await run();
  assert.equal(clean.detector, "lease-overlap");
  assert.deepEqual(clean.findings, []);
  assert.ok(clean.treeSize >= 8, `${clean.treeSize} entries: four grants and four releases at least`);
  assert.match(clean.checkpoint, new RegExp(`^leaseplane/watched\\n${clean.treeSize}\\n`));
  assert.deepEqual((await call("GET", "/api/v1/detection/cases", wkey)).json.cases, []);

  const now = Date.now();
  const grant = (actor, id, fence, at) => ({ type: "coordination.lease", atMs: at, resource: "lock:twice", actorDid: actor, leaseId: id, fence,
    mode: "write", expiresAtMs: at + 30000, trustDelta: 0 });
  const events = JSON.stringify([grant(agent("x"), "lease_one", 100, now), grant(agent("y"), "lease_two", 101, now + 5)]);
  await objectJSON(mf, "watched", `/test/plant?events=${encodeURIComponent(events)}`);
  const found = await run();
  assert.equal(found.findings.length, 1, JSON.stringify(found.findings));
  const f = found.findings[0];
  assert.equal(f.kind, "overlap");
  assert.equal(f.a.leaseId, "lease_one");
  assert.equal(f.b.leaseId, "lease_two");
  assert.equal(f.case, "case_1");
  assert.equal(found.treeSize, clean.treeSize + 3, "the clean run's detection.run entry, then the two planted grants");
  assert.deepEqual(f.entries.map((e) => e.index), [f.a.entry, f.b.entry]);
  for (const [i, e] of f.entries.entries()) {
    assert.equal(e.proof.index, e.index);
    assert.equal(e.proof.size, found.treeSize);
    assert.ok(e.proof.hashes.length > 0);
    assert.equal(e.event.leaseId, ["lease_one", "lease_two"][i]);
    assert.deepEqual(JSON.parse(Buffer.from(e.data, "base64").toString()), e.event);
  }
  const again = await run();
  assert.equal(again.findings.length, 1);
  assert.equal(again.findings[0].case, "case_1");
  const cases = (await call("GET", "/api/v1/detection/cases?status=open", wkey)).json.cases;
  assert.equal(cases.length, 1);
  assert.equal(cases[0].id, "case_1");
  assert.equal(cases[0].status, "open");
  assert.deepEqual(cases[0].entries, [f.a.entry, f.b.entry]);
  assert.equal(cases[0].finding.text, f.text);
  // Each run is an entry of the workspace's ledger, in the server's bytes
  // (kernel/detect.RunEvent), after the entries it read.
  const ledger = await call("GET", `/api/v1/ledger/entries?start=0&count=1000`, wkey);
  assert.equal(ledger.status, 200, ledger.text);
  const recorded = ledger.json.entries.filter((e) => e.event.type === "detection.run");
  assert.equal(recorded.length, 3, JSON.stringify(recorded));
  recorded.forEach((e, i) => {
    const r = [clean, found, again][i];
    assert.equal(e.index, r.treeSize, `run ${i}: its entry follows the entries it read`);
    const cited = i === 0 ? "" : '"case_1"';
    assert.match(Buffer.from(e.data, "base64").toString(),
      new RegExp(`^\\{"type":"detection\\.run","atMs":\\d+,"detector":"lease-overlap","treeSize":${r.treeSize},"findings":${i === 0 ? 0 : 1},"cases":\\[${cited}\\]\\}$`));
  });
  // The runs' entries are host rows of the log, which a restart's replay
  // passes by: the same machine, and the ledger neither shorter nor longer.
  const before = await objectJSON(mf, "watched", "/test/state");
  assert.equal(before.log.filter((l) => l.op === "host").length, 3, JSON.stringify(before.log));
  await mf.dispose();
  ({ mf, url: base } = await start({ dataDir, port: 0, adminSecret: ADMIN, testClock: true }));
  const after = await objectJSON(mf, "watched", "/test/state");
  const machine = (st) => ({ ...st.snapshot, nowMs: undefined }); // the restart's cancel {} steps at its own time
  assert.deepEqual(machine(after), machine(before), "the same machine after the restart");
  assert.equal(after.ledger.entries, before.ledger.entries);
  const next = await lease(7);
  assert.equal(next.status, 200, next.text);
});
