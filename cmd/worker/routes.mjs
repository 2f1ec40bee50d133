// routes.mjs: the routes of a workspace's Durable Object (workspace.mjs)
// besides commands and held requests: creating the workspace, adding and
// revoking keys, its metrics, and the test routes. Each takes the object.
import kernelModule from "./kernel.wasm";
import { Kernel } from "./kernel.mjs";
import { json, refusal, unavailable, prometheus, enc, dec } from "./respond.mjs";

// create makes the workspace. Once it has had a key it is refused
// workspace_exists; before that, the same creation again is answered as
// the first (its first key may have failed to be made). A drill workspace
// (drill: made by the front's drill runner) keeps a tape (drills.mjs).
export async function create(ws, name, rules, drill = false) {
  if (ws.rules !== null) {
    if (ws.meta("keyed") === null && ws.meta("name") === name && ws.rules === dec.decode(rules)) {
      return json(200, { ok: true, verifier: ws.meta("ledger_verifier") });
    }
    return refusal(409, "workspace_exists", "this workspace exists");
  }
  if (!name) return refusal(400, "invalid_request", "name is required");
  const secret = ws.env.LEASEPLANE_LEDGER_SECRET;
  if (!secret) return unavailable("the LEASEPLANE_LEDGER_SECRET secret is not set: the ledger's signing key cannot be sealed");
  try {
    new Kernel(kernelModule).new(rules);
  } catch (err) {
    return refusal(400, "invalid_request", `rules: ${err.message}`);
  }
  const verifier = await ws.book.create(name, secret); // the origin never changes once made
  ws.setMeta("name", name);
  ws.setMeta("rules", dec.decode(rules));
  if (drill) ws.setMeta("drill", 1);
  ws.load();
  return json(200, { ok: true, verifier });
}

// key adds a key's id (and role) to this workspace, or revokes one; a
// revocation cancels the key's held requests at once and answers them 401,
// and ends its events streams.
export function key(ws, what, q) {
  const id = q.get("id");
  if (what === "add") {
    const k = { id, role: q.get("role"), agent_did: q.get("agentDid") };
    ws.sql.exec(`INSERT OR REPLACE INTO keys (id, role, agent_did) VALUES (?, ?, ?)`, k.id, k.role, k.agent_did);
    ws.setMeta("keyed", 1);
    ws.keys.set(id, k);
    return json(200, { ok: true });
  }
  if (!ws.keys.has(id)) return refusal(404, "not_found", `no key ${JSON.stringify(id)}`);
  ws.sql.exec(`DELETE FROM keys WHERE id = ?`, id);
  ws.keys.delete(id);
  ws.streams.revoke(id);
  for (const [askId, h] of [...ws.held]) {
    if (h.keyId !== id) continue;
    ws.gone(askId);
    h.resolve(refusal(401, "unauthorized", "unknown or revoked key"));
  }
  return json(200, { ok: true, revoked: true });
}

// metrics answers this workspace's counters (since the object started)
// and sizes, as Prometheus text.
export function metrics(ws) {
  const c = ws.counters, one = (v) => [["", v]];
  return prometheus([
    ["leaseplane_commands_total", "counter", "Commands this workspace's object stepped since it started, by op.",
      Object.keys(c.commands).sort().map((op) => [`{op="${op}"}`, c.commands[op]])],
    ["leaseplane_commands_logged_total", "counter", "Commands the kernel said to log, logged.", one(c.logged)],
    ["leaseplane_alarm_ticks_total", "counter", "Ticks sent by the object's alarm.", one(c.alarms)],
    ["leaseplane_held_requests", "gauge", "Lease requests held open now (waitUpToMs).", one(ws.held.size)],
    ["leaseplane_event_streams", "gauge", "Events streams open now.", one(ws.streams.subs.size)],
    ["leaseplane_held_requests_total", "counter", "Held lease requests answered.", one(c.heldAnswered)],
    ["leaseplane_held_undeliverable_total", "counter", "Grants of held asks whose request was gone, released.", one(c.undeliverable)],
    ["leaseplane_drill_runners_total", "counter", "Drill runners the object's alarm let in (each runs the queued drill runs through the front).", one(c.drillRunners)],
    ["leaseplane_drill_runs_started_total", "counter", "Drill runs a runner started.", one(c.drillStarts)],
    ["leaseplane_ledger_write_failures_total", "counter", "Ledger writes that failed (caught up from the log).", one(c.ledgerFailures)],
    ["leaseplane_ledger_entries", "gauge", "Entries in the workspace's ledger.", one(ws.book.size)],
    ["leaseplane_log_commands", "gauge", "Commands in the log after the snapshot.", one(ws.sql.exec(`SELECT count(*) AS n FROM log`).one().n)],
    ["leaseplane_keys", "gauge", "Live keys of the workspace.", one(ws.keys.size)],
    ["leaseplane_storage_bytes", "gauge", "The object's SQLite storage.", one(ws.ctx.storage.sql.databaseSize ?? 0)],
  ]);
}

// test answers the test routes (LEASEPLANE_TEST_CLOCK only).
export function testRoute(ws, what, q) {
  if (what === "clock") {
    // A negative move makes the clock stand still at the last time it
    // recorded (it never goes back) until real time catches up.
    const ms = Number(q.get("advanceMs"));
    if (!Number.isSafeInteger(ms)) return refusal(400, "invalid_request", "advanceMs must be a whole number of ms");
    ws.setMeta("offset", (ws.offset += ms));
    const at = ws.alarmAt;
    ws.alarmAt = undefined;
    ws.arm(at);
    return json(200, { ok: true, offsetMs: ws.offset, nowMs: ws.now() });
  }
  if (what === "ledger-fault") {
    ws.book.fault = q.get("on") === "1";
    return json(200, { ok: true, ledgerFault: ws.book.fault, ledgerSeq: ws.book.seq, seq: ws.seq });
  }
  if (what === "forget-held" || what === "gone") {
    const id = q.get("askId"), h = ws.held.get(id);
    if (what === "gone") ws.gone(id); // as when the request's signal aborts
    ws.held.delete(id);
    h?.resolve(unavailable(`the test route /test/${what} ended this request`));
    return json(200, { ok: true, found: h !== undefined });
  }
  if (what === "plant") {
    // Events put in the ledger as a broken plane would have recorded them
    // (q: events, a JSON array), for the detectors' tests.
    ws.catchUp();
    ws.ctx.storage.transactionSync(() => ws.book.append(enc.encode(q.get("events")), ws.seq, ws.now()));
    return json(200, { ok: true, entries: ws.book.size });
  }
  if (what === "alarm") {
    // The object's alarm once more, as a repeated delivery would run it
    // (an alarm is delivered at least once).
    return ws.alarm().then(() => json(200, { ok: true }));
  }
  if (what !== "state") return refusal(404, "not_found", `no test route ${what}`);
  const log = ws.sql.exec(`SELECT seq, op, now_ms FROM log ORDER BY seq`).toArray();
  return json(200, {
    nowMs: ws.now(),
    nextAlarm: ws.alarmAt ?? null,
    held: [...ws.held.keys()],
    trust: JSON.parse(dec.decode(ws.kernel.trust())),
    snapshot: JSON.parse(dec.decode(ws.kernel.snapshot())),
    log: log.map((r) => ({ seq: r.seq, op: r.op, nowMs: r.now_ms })),
    ledger: { entries: ws.book.size, rows: ws.sql.exec(`SELECT count(*) AS n FROM ledger_rows`).one().n },
  });
}
