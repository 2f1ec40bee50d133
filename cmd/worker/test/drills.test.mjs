// The drills on the Workers tier, in a local workerd (Miniflare, offline):
// the same six scenarios the server runs (kernel/drill), each in a drill
// workspace of its own (an object), through the front's routes, checked
// against the native kernel's replay of what the object applied. Run by
// `make test-worker`.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createWorkspace, createKey, fresh } from "../miniflare.mjs";
import { startIn, stop, objectJSON } from "./local.mjs";

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
  // The cadence's refusals are the server's.
  r = await call("PUT", "/api/v1/drills/cadence", wkey, '{"everyMs":60000}');
  assert.equal(r.status, 403, r.text);
  r = await call("GET", "/api/v1/drills/cadence", okey);
  assert.equal(r.status, 405, r.text);
  assert.equal(r.headers.get("allow"), "PUT");
  for (const [body, want] of [
    ["", /everyMs is required/],
    ["{}", /everyMs is required/],
    ['{"everyMs":null}', /everyMs is required/],
    ['{"everyMs":999}', /everyMs must be 0 \(stop\) or an integer from 1000 to 604800000/],
    ['{"everyMs":604800001}', /from 1000 to 604800000/],
    ['{"everyMs":1.5e3}', /from 1000 to 604800000/],
    ['{"everyMs":"60000"}', /from 1000 to 604800000/],
    ['{"everyMs":60000,"x":1}', /unknown field "x" \(PUT \/api\/v1\/drills\/cadence takes \{"everyMs": N\}\)/],
    ["[]", /the body must be a JSON object/],
  ]) {
    r = await call("PUT", "/api/v1/drills/cadence", okey, body);
    assert.equal(r.status, 400, `${body}: ${r.text}`);
    assert.equal(r.json.reason, "invalid_request");
    assert.match(r.json.error, want, body);
  }
  r = await call("GET", "/api/v1/drills/runs", wkey);
  assert.equal(r.json.everyMs, 0);
  // The runner's route runs nothing for a caller that is not the object's
  // alarm: no proof of the token, or a wrong one, is refused before any
  // object is reached.
  for (const headers of [{}, { "X-Leaseplane-Runner": "0".repeat(64) }]) {
    const res = await fetch(`${base}/drills/runner?workspace=drilled&token=00ff`, { method: "POST", headers: { ...fresh, ...headers } });
    const text = await res.text();
    assert.equal(res.status, 404, text);
    assert.match(text, /no drill runner/);
  }
  assert.deepEqual(await runs(), []);
});

test("an operator's run passes every drill, each in a drill workspace of its own, which is dropped", async () => {
  const r = await call("POST", "/api/v1/drills/run", okey, "");
  assert.equal(r.status, 200, r.text);
  assert.match(r.json.id, /^run_\d+$/);
  // The object's alarm started it (nobody else can) and awaits it: a run
  // takes over 30 s, the crashed holder's lapse.
  const started = (await until("the run starting", (rs) => rs.some((x) => x.id === r.json.id && x.startedAtMs !== null))).find((x) => x.id === r.json.id);
  // Meanwhile the workspace's own leases still lapse on time: no other
  // alarm of the object runs while it awaits the run, so a timer of the
  // alarm's own ticks the kernel. A lease taken now and its expiry moved
  // into the past by the test clock lapses before the run ends.
  const own = await call("POST", "/api/v1/acp/coordination/lease", wkey, JSON.stringify({ resource: "lock:mine", actorDid: "did:web:a.example:agent:1" }));
  assert.equal(own.status, 200, own.text);
  assert.equal(own.json.lease.fence, 1, "the drills did not touch the workspace's own leases");
  const st = await objectJSON(mf, "drilled", "/test/state");
  await objectJSON(mf, "drilled", `/test/clock?advanceMs=${own.json.lease.expiresAtMs - st.nowMs + 1}`, { method: "POST" });
  for (const end = Date.now() + 20000; ; ) {
    const now = await objectJSON(mf, "drilled", "/test/state");
    if (now.log.some((e) => e.op === "tick")) break;
    if (Date.now() > end) assert.fail(`the lease did not lapse while the run ran: ${JSON.stringify(now.log)}`);
    await new Promise((res) => setTimeout(res, 50));
  }
  const during = (await runs()).find((x) => x.id === r.json.id);
  assert.equal(during.finishedAtMs, null, "the lapse came before the run's end");
  // The alarm delivered again while the run runs (an alarm is delivered at
  // least once) lets in no second runner.
  for (let i = 0; i < 3; i++) await objectJSON(mf, "drilled", "/test/alarm");
  const done = await until("the run finishing", (rs) => rs.some((x) => x.id === r.json.id && x.finishedAtMs !== null));
  const run = done.find((x) => x.id === r.json.id);
  assert.equal(run.trigger, "asked");
  assert.equal(run.startedAtMs, started.startedAtMs, "started once");
  const metrics = await (await fetch(`${base}/metrics`, { headers: { ...fresh, Authorization: `Bearer ${wkey}` } })).text();
  assert.match(metrics, /^leaseplane_drill_runners_total 1$/m);
  assert.match(metrics, /^leaseplane_drill_runs_started_total 1$/m);
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
