// The drills on the Workers tier, in a local workerd (Miniflare, offline):
// the same six scenarios the server runs (kernel/drill), each in a drill
// workspace of its own (an object), through the front's routes, checked
// against the native kernel's replay of what the object applied. Run by
// `make test-worker`.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createWorkspace, createKey, fresh } from "../miniflare.mjs";
import { startIn, stop } from "./local.mjs";

const ADMIN = "admin-secret-for-tests";
const NAMES = ["two-agents-one-slot", "crashed-holder", "deadlock", "herd-of-fifty", "stale-lease-id", "operator-suspends"];

let dataDir, mf, base, wkey, okey, agentKey;

before(async () => {
  ({ dataDir, mf, base } = await startIn("drills", ADMIN));
  wkey = await createWorkspace(base, ADMIN, "drilled");
  okey = (await createKey(base, ADMIN, "drilled", "operator")).key;
  agentKey = (await createKey(base, ADMIN, "drilled", "agent", "did:web:a.example:agent:1")).key;
});

after(() => stop(mf, dataDir));

async function call(method, route, key, body) {
  const res = await fetch(base + route, {
    method,
    headers: { ...fresh, Authorization: `Bearer ${key}` },
    body: method === "GET" ? undefined : body,
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, text, json: JSON.parse(text) };
}

const runs = async () => {
  const r = await call("GET", "/api/v1/drills/runs?limit=1000", wkey);
  assert.equal(r.status, 200, r.text);
  return r.json.runs;
};

// until polls runs() until pred holds (a generous watchdog: a run takes
// over 30 s, the crashed holder's lease lapsing by the object's alarm).
async function until(what, pred, ms = 150000) {
  const end = Date.now() + ms;
  for (;;) {
    const rs = await runs();
    if (pred(rs)) return rs;
    if (Date.now() > end) assert.fail(`${what}: not within ${ms} ms; runs: ${JSON.stringify(rs)}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

// assertRecorded checks that the workspace's ledger holds one drill.run
// entry for each finished run of rs, and none for any other.
async function assertRecorded(rs) {
  const r = await call("GET", "/api/v1/ledger/entries?start=0&count=1000", wkey);
  assert.equal(r.status, 200, r.text);
  const entries = r.json.entries.filter((e) => e.event.type === "drill.run");
  const finished = rs.filter((x) => x.finishedAtMs !== null && x.cancelledAtMs === null);
  assert.deepEqual(entries.map((e) => e.event.runId).sort(), finished.map((x) => x.id).sort(), "one drill.run entry per finished run");
  for (const x of finished) {
    const e = entries.find((e) => e.event.runId === x.id);
    const drills = x.drills.map((d) => `{"name":"${d.name}","passed":${d.passed}${d.passed ? "" : `,"detail":${JSON.stringify(d.detail)}`}}`).join(",");
    assert.equal(Buffer.from(e.data, "base64").toString(),
      `{"type":"drill.run","atMs":${x.finishedAtMs},"runId":"${x.id}","startedAtMs":${x.startedAtMs},"passed":${x.passed},"drills":[${drills}]}`);
  }
}

test("the route refuses what it must, with the server's answers", async () => {
  let r = await call("POST", "/api/v1/drills/run", wkey, "{}");
  assert.equal(r.status, 403, r.text);
  assert.equal(r.json.reason, "forbidden");
  r = await call("POST", "/api/v1/drills/run", agentKey, "{}");
  assert.equal(r.status, 403, r.text);
  r = await call("GET", "/api/v1/drills/runs", agentKey);
  assert.equal(r.status, 403, r.text);
  r = await call("POST", "/api/v1/drills/run", okey, '{"drills":["deadlock"]}');
  assert.equal(r.status, 400, r.text);
  assert.match(r.json.error, /unknown field "drills"/);
  r = await call("GET", "/api/v1/drills/run", okey);
  assert.equal(r.status, 405, r.text);
  assert.equal(r.headers.get("allow"), "POST");
  r = await call("GET", "/api/v1/drills/runs?limit=0", wkey);
  assert.equal(r.status, 400, r.text);
  assert.match(r.json.error, /limit must be an integer from 1 to 1000/);
  r = await call("POST", "/api/v1/drills/cancel", okey, '{"id":"7"}');
  assert.equal(r.status, 400, r.text);
  assert.match(r.json.error, /run_N/);
  r = await call("POST", "/api/v1/drills/cancel", okey, '{"id":"run_99"}');
  assert.equal(r.status, 404, r.text);
  r = await call("PUT", "/api/v1/drills/cadence", okey, '{"everyMs":60000}');
  assert.equal(r.status, 404, r.text);
  assert.match(r.json.error, /not on the Workers tier/);
  assert.deepEqual(await runs(), []);
});

test("an operator's run passes every drill, each in a drill workspace of its own, which is dropped", async () => {
  const r = await call("POST", "/api/v1/drills/run", okey, "");
  assert.equal(r.status, 200, r.text);
  assert.match(r.json.id, /^run_\d+$/);
  const done = await until("the run finishing", (rs) => rs.some((x) => x.id === r.json.id && x.finishedAtMs !== null));
  const run = done.find((x) => x.id === r.json.id);
  assert.equal(run.trigger, "asked");
  assert.equal(run.cancelledAtMs, null);
  assert.deepEqual(run.drills.map((d) => d.name), NAMES);
  for (const d of run.drills) assert.equal(d.passed, true, `${d.name}: ${d.detail} (expected ${d.expected}, live ${d.live})`);
  assert.equal(run.passed, true);
  // Every drill compared answers; the crashed holder's lapse was an alarm tick.
  const crashed = run.drills.find((d) => d.name === "crashed-holder");
  assert.match(crashed.detail, /^5 answers and [1-9]\d* alarm ticks (and \d+ of the host's own cancels )?matched the kernel's replay; \d+ commands found in the durable log$/);
  const herd = run.drills.find((d) => d.name === "herd-of-fifty");
  assert.match(herd.detail, /^\d{2,} answers/);
  // The run is an entry of the workspace's ledger, in the server's bytes
  // (kernel/drill.RunEvent), at the times the run lists.
  await assertRecorded([run]);
  // The drill workspaces are gone: their objects hold nothing.
  const ns = await mf.getDurableObjectNamespace("WORKSPACES");
  for (const n of NAMES) {
    const stub = ns.get(ns.idFromName(`~drill-drilled-${r.json.id.slice(4)}-${n}`));
    const res = await stub.fetch("https://workspace/drill/tape");
    assert.equal(res.status, 404, `${n}'s drill workspace still answers: ${await res.text()}`);
  }
  // Only a drill workspace is ever dropped.
  const real = await ns.get(ns.idFromName("drilled")).fetch("https://workspace/drill/drop");
  assert.equal(real.status, 409, await real.text());
  // The workspace's own leases were not touched.
  const own = await call("POST", "/api/v1/acp/coordination/lease", wkey, JSON.stringify({ resource: "lock:mine", actorDid: "did:web:a.example:agent:1" }));
  assert.equal(own.status, 200, own.text);
  assert.equal(own.json.lease.fence, 1);
});

test("runs past the bound are refused 429, and a queued or running run can be cancelled", async () => {
  const ids = [];
  for (let i = 0; i < 4; i++) {
    const r = await call("POST", "/api/v1/drills/run", okey, "{}");
    assert.equal(r.status, 200, r.text);
    ids.push(r.json.id);
  }
  const over = await call("POST", "/api/v1/drills/run", okey, "{}");
  assert.equal(over.status, 429, over.text);
  assert.equal(over.json.reason, "limit_exceeded");
  assert.equal(over.json.limit, "drillRuns");
  assert.equal(over.json.max, 4);
  assert.equal(over.headers.get("retry-after"), "1");
  for (const id of ids) {
    const c = await call("POST", "/api/v1/drills/cancel", okey, JSON.stringify({ id }));
    assert.equal(c.status, 200, c.text);
    assert.equal(c.json.run.id, id);
    assert.notEqual(c.json.run.cancelledAtMs, null);
    assert.equal(c.json.run.passed, null);
  }
  const again = await call("POST", "/api/v1/drills/cancel", okey, JSON.stringify({ id: ids[0] }));
  assert.equal(again.status, 409, again.text);
  assert.equal(again.json.reason, "run_ended");
  // With the bound free again, a new run is asked and a runner takes it.
  const next = await call("POST", "/api/v1/drills/run", okey, "{}");
  assert.equal(next.status, 200, next.text);
  await until("the next run starting", (rs) => rs.some((x) => x.id === next.json.id && x.startedAtMs !== null));
  const c = await call("POST", "/api/v1/drills/cancel", okey, JSON.stringify({ id: next.json.id }));
  assert.equal(c.status, 200, c.text);
});
