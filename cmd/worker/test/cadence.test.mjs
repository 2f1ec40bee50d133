// Drill runs by the workspace object's alarm, in a local workerd
// (Miniflare, offline): a cadence set with PUT /api/v1/drills/cadence makes
// runs with nobody asking, each started by the object's alarm (which calls
// the front through the binding SELF and awaits the run), each passing and
// recorded in the ledger; stopped, no more come, however often the alarm
// is delivered again. A run here runs three quick drills
// (LEASEPLANE_TEST_DRILLS, a test build's variable); drills.test.mjs runs
// every drill. Run by `make test-worker`.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createWorkspace, createKey, fresh } from "../miniflare.mjs";
import { startIn, stop, objectJSON } from "./local.mjs";

const ADMIN = "admin-secret-for-tests";
const QUICK = ["two-agents-one-slot", "deadlock", "stale-lease-id"];
const WS = "cadenced";

let dataDir, mf, base, wkey, okey;

before(async () => {
  ({ dataDir, mf, base } = await startIn("cadence", ADMIN, { testDrills: QUICK }));
  wkey = await createWorkspace(base, ADMIN, WS);
  okey = (await createKey(base, ADMIN, WS, "operator")).key;
});

after(() => stop(mf, dataDir));

async function call(method, route, key, body) {
  const res = await fetch(base + route, { method, headers: { ...fresh, Authorization: `Bearer ${key}` }, body: method === "GET" ? undefined : body });
  const text = await res.text();
  return { status: res.status, text, json: JSON.parse(text) };
}

const listed = async () => {
  const r = await call("GET", "/api/v1/drills/runs?limit=1000", wkey);
  assert.equal(r.status, 200, r.text);
  return r.json;
};

// until polls the runs until pred holds (a generous watchdog).
async function until(what, pred, ms = 120000) {
  for (const end = Date.now() + ms; ; ) {
    const l = await listed();
    if (pred(l.runs)) return l.runs;
    if (Date.now() > end) assert.fail(`${what}: not within ${ms} ms; runs: ${JSON.stringify(l.runs)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

// counters reads the object's drill counters from its metrics.
async function counters() {
  const res = await fetch(`${base}/metrics`, { headers: { ...fresh, Authorization: `Bearer ${wkey}` } });
  const text = await res.text();
  assert.equal(res.status, 200, text);
  const n = (name) => Number(text.match(new RegExp(`^${name} (\\d+)$`, "m"))?.[1]);
  return { runners: n("leaseplane_drill_runners_total"), started: n("leaseplane_drill_runs_started_total") };
}

const finished = (x) => x.finishedAtMs !== null;

test("a cadence makes passing runs by the object's alarm with no ask, each in the ledger; stopped, no more, however often the alarm repeats", async () => {
  const set = await call("PUT", "/api/v1/drills/cadence", okey, '{"everyMs":1000}');
  assert.equal(set.status, 200, set.text);
  assert.equal(set.text, '{"ok":true,"everyMs":1000}');
  assert.equal((await listed()).everyMs, 1000);
  // Nobody asks: the runs come from the cadence alone.
  await until("three cadence runs finishing", (rs) => rs.filter(finished).length >= 3);
  const stop = await call("PUT", "/api/v1/drills/cadence", okey, '{"everyMs":0}');
  assert.equal(stop.text, '{"ok":true,"everyMs":0}');
  const rs = (await until("the run under way finishing", (rs) => rs.every(finished))).reverse();
  assert.equal((await listed()).everyMs, 0);
  for (const x of rs) {
    assert.equal(x.trigger, "cadence", JSON.stringify(x));
    assert.equal(x.cancelledAtMs, null);
    assert.deepEqual(x.drills.map((d) => d.name), QUICK);
    for (const d of x.drills) assert.equal(d.passed, true, `${x.id} ${d.name}: ${d.detail}`);
    assert.equal(x.passed, true);
  }
  // One at a time: each run started after the one before it finished.
  for (let i = 1; i < rs.length; i++) assert.ok(rs[i].startedAtMs >= rs[i - 1].finishedAtMs, JSON.stringify(rs));
  // Each run was started once, each by a runner of its own alarm.
  let c = await counters();
  assert.equal(c.started, rs.length);
  assert.equal(c.runners, rs.length);
  // The alarm delivered again (as Cloudflare may: at least once) starts
  // nothing: no run is due and none is queued.
  for (let i = 0; i < 3; i++) await objectJSON(mf, WS, "/test/alarm");
  assert.equal((await listed()).runs.length, rs.length);
  c = await counters();
  assert.equal(c.started, rs.length);
  assert.equal(c.runners, rs.length);
  // Every run is a drill.run entry of the workspace's ledger, once.
  const ledger = await call("GET", "/api/v1/ledger/entries?start=0&count=1000", wkey);
  const entries = ledger.json.entries.filter((e) => e.event.type === "drill.run");
  assert.deepEqual(entries.map((e) => e.event.runId), rs.map((x) => x.id));
  for (const [i, e] of entries.entries()) {
    assert.equal(e.event.startedAtMs, rs[i].startedAtMs);
    assert.equal(e.event.atMs, rs[i].finishedAtMs);
    assert.equal(e.event.passed, true);
  }
});

test("an asked run while the alarm is repeated many times runs once", async () => {
  const c0 = await counters();
  const r = await call("POST", "/api/v1/drills/run", okey, "{}");
  assert.equal(r.status, 200, r.text);
  // The alarm delivered again and again at once, beside the one the ask
  // set: one runner is let in, the others find it live.
  await Promise.all([1, 2, 3, 4].map(() => objectJSON(mf, WS, "/test/alarm")));
  const rs = await until("the run finishing", (rs) => rs.some((x) => x.id === r.json.id && finished(x)));
  const run = rs.find((x) => x.id === r.json.id);
  assert.equal(run.trigger, "asked");
  assert.equal(run.passed, true, JSON.stringify(run));
  for (let i = 0; i < 3; i++) await objectJSON(mf, WS, "/test/alarm");
  const c = await counters();
  assert.equal(c.started - c0.started, 1, "the run was started once");
  assert.equal(c.runners - c0.runners, 1, "one runner was let in");
  assert.equal((await listed()).runs.filter((x) => x.id === r.json.id).length, 1);
});
