// drills.mjs: the drills' state, and detection's cases, in a workspace's Durable Object
// (workspace.mjs). The drills themselves run in the Go front (cmd/worker,
// drills.go: kernel/drill, the server's own code); a workspace's object
// keeps its runs (table drill_runs) and its cadence, and its alarm starts
// them: the object's one alarm is set to the earlier of the kernel's next
// alarm and the drills' (a queued run, the cadence's next), and when the
// drills are due it calls the front through the binding SELF (the worker
// itself) with a runner token it keeps, and awaits the run (an alarm
// handler may run for 15 minutes; a request's waitUntil only 30 s after
// its answer). The front's runner is let in only with that token (one
// runner at a time per workspace; a repeated alarm finds it held and
// starts nothing). While it awaits, no other alarm of the object runs, so
// the kernel's deadlines are kept by a timer of the alarm's own. A drill
// workspace's object (meta drill = 1) keeps its tape: every command it
// stepped with its answer and events, which the front checks against the
// kernel's replay. The detectors run in the front too (detection.go); the
// object keeps the cases they file (table detection_cases, one per
// finding's key however often runs repeat). A drill workspace's object tapes the cancel {} it steps
// on every start too: workerd makes an object again when it likes (its
// alarm after an eviction), and that cancel is replayed like the rest.
import { json, refusal, b64, blob, dec, enc, jsonArray, EMPTY } from "./respond.mjs";

// MAX_RUNS bounds a workspace's runs queued or running, as on the server
// (429 limit_exceeded past it).
export const MAX_RUNS = 4;
// A runner that has not been heard from for this long is gone (its
// isolate ended): the next alarm lets in another, which runs its run again.
const RUNNER_STALE_MS = 120000;
// The cadence's bounds, as on the server: 0 (none) or 1 s to 7 days.
export const MIN_CADENCE_MS = 1000, MAX_CADENCE_MS = 7 * 24 * 3600 * 1000;

export function initDrills(ws) {
  ws.drill = false;
  ws.sql.exec(`CREATE TABLE IF NOT EXISTS drill_runs (id INTEGER PRIMARY KEY AUTOINCREMENT, trigger TEXT NOT NULL,
    requested_ms INTEGER NOT NULL, started_ms INTEGER, finished_ms INTEGER, cancelled_ms INTEGER, passed INTEGER,
    drills TEXT NOT NULL DEFAULT '[]', recorded INTEGER NOT NULL DEFAULT 0)`);
  if (!ws.sql.exec(`SELECT name FROM pragma_table_info('drill_runs')`).toArray().some((c) => c.name === "recorded")) {
    ws.sql.exec(`ALTER TABLE drill_runs ADD COLUMN recorded INTEGER NOT NULL DEFAULT 0`); // a table of an earlier build
  }
  ws.sql.exec(`CREATE TABLE IF NOT EXISTS detection_cases (id INTEGER PRIMARY KEY AUTOINCREMENT, detector TEXT NOT NULL,
    key TEXT NOT NULL UNIQUE, entry_a INTEGER NOT NULL, entry_b INTEGER NOT NULL, finding TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'open', first_seen_ms INTEGER NOT NULL, last_seen_ms INTEGER NOT NULL)`);
  if (ws.meta("drill") !== null) {
    ws.sql.exec(`CREATE TABLE IF NOT EXISTS tape (seq INTEGER PRIMARY KEY AUTOINCREMENT, op TEXT NOT NULL, now_ms INTEGER NOT NULL,
      body BLOB NOT NULL, status INTEGER NOT NULL, answer BLOB NOT NULL, events BLOB NOT NULL, changed INTEGER NOT NULL)`);
  }
}

// tape records one step of a drill workspace: rec is the command record
// as the object stamped it (null for a command the object made).
export function tape(ws, op, now, rec, restBody, r) {
  ws.sql.exec(`INSERT INTO tape (op, now_ms, body, status, answer, events, changed) VALUES (?, ?, ?, ?, ?, ?, ?)`,
    op, now, blob(rec ?? restBody ?? EMPTY), r.status, blob(r.answer ?? enc.encode("null")),
    blob(jsonArray(r.events.map((e) => e.json))), r.log ? 1 : 0);
}

const runId = (id) => `run_${id}`;

function runJSON(r) {
  const ended = r.cancelled_ms !== null || r.finished_ms === null;
  return `{"id":"${runId(r.id)}","trigger":${JSON.stringify(r.trigger)},"requestedAtMs":${r.requested_ms},` +
    `"startedAtMs":${r.started_ms ?? null},"finishedAtMs":${r.finished_ms ?? null},"cancelledAtMs":${r.cancelled_ms ?? null},` +
    `"passed":${ended ? null : r.passed === 1},"drills":${r.drills}}`;
}

const runOf = (ws, id) => ws.sql.exec(`SELECT * FROM drill_runs WHERE id = ?`, id).toArray()[0];
const open = `finished_ms IS NULL AND cancelled_ms IS NULL`;
const openRuns = (ws) => ws.sql.exec(`SELECT count(*) AS n FROM drill_runs WHERE ${open}`).one().n;
const runnerOf = (ws) => JSON.parse(ws.meta("drill_runner") ?? "null");
const cadenceOf = (ws) => Number(ws.meta("drill_every") ?? 0);

// drillsDue is when the object's alarm must next see to the drills (on
// its clock), or null: at once for a queued run and no live runner; when
// the live runner would be stale; the cadence's next run when none is
// queued.
export function drillsDue(ws) {
  if (ws.drill || ws.rules === null) return null;
  const held = runnerOf(ws);
  if (openRuns(ws) > 0) return held !== null && held.ms > ws.now() - RUNNER_STALE_MS ? held.ms + RUNNER_STALE_MS : ws.now();
  return cadenceOf(ws) > 0 ? Number(ws.meta("drill_next")) : null;
}

// drillsChanged sets the object's alarm again after the drills' state
// changed.
function drillsChanged(ws) {
  ws.drillAt = drillsDue(ws);
  ws.arm(ws.alarmAt);
}

// armAlarm sets the object's one storage alarm to the earlier of the
// kernel's next alarm (at, kept as ws.alarmAt) and the drills' (ws.drillAt,
// worked out again only when the drills change), in real time: minus the
// test offset. A drill run's alarm, awaiting the run, learns when the
// kernel's moved (ws.kernelMoved).
export function armAlarm(ws, at) {
  if (at !== ws.alarmAt) {
    ws.alarmAt = at;
    ws.kernelMoved?.();
  }
  if (ws.drillAt === undefined) ws.drillAt = drillsDue(ws);
  const next = [at, ws.drillAt].filter((t) => t !== null && t !== undefined);
  const when = next.length === 0 ? null : Math.min(...next) - ws.offset;
  if (when === ws.armedAt) return;
  ws.armedAt = when;
  if (when === null) ws.ctx.storage.deleteAlarm();
  else ws.ctx.storage.setAlarm(when);
}

// alarm is the object's alarm: the kernel's tick when its alarm is due,
// then the drills' part.
export async function alarm(ws) {
  ws.catchUp();
  ws.armedAt = undefined; // it fired: set it again, whatever is next
  if (ws.alarmAt !== null && ws.alarmAt !== undefined && ws.alarmAt <= ws.now()) tick(ws);
  else ws.arm(ws.alarmAt);
  ws.book.retain(ws.now());
  if (!ws.drill) await drillAlarm(ws);
}

function tick(ws) {
  ws.alarmAt = undefined; // arm again whatever the kernel says
  ws.counters.alarms++;
  ws.step("tick", null, EMPTY);
}

// drillAlarm is the drills' part of the object's alarm: a cadence run
// queued when it is due and none is queued, and, while runs are queued and
// no runner is live, a runner started and awaited. A repeated alarm (an
// alarm is delivered at least once) finds the runner live and starts
// nothing.
async function drillAlarm(ws) {
  const now = ws.now(), every = cadenceOf(ws);
  if (every > 0 && openRuns(ws) === 0 && Number(ws.meta("drill_next")) <= now) {
    ws.sql.exec(`INSERT INTO drill_runs (trigger, requested_ms) VALUES ('cadence', ?)`, now);
  }
  const held = runnerOf(ws);
  if (openRuns(ws) > 0 && !(held !== null && held.ms > now - RUNNER_STALE_MS)) {
    const token = [...crypto.getRandomValues(new Uint8Array(16))].map((b) => b.toString(16).padStart(2, "0")).join("");
    ws.setMeta("drill_runner", JSON.stringify({ token, ms: now }));
    ws.counters.drillRunners++;
    drillsChanged(ws);
    await runFront(ws, token);
    // A runner that ended with runs still queued (it failed) keeps its
    // token until it is stale: the alarm then lets in another.
    if (runnerOf(ws)?.token === token && openRuns(ws) === 0) ws.setMeta("drill_runner", null);
  }
  drillsChanged(ws);
}

// runFront has the front run the workspace's queued runs with token, and
// waits for it. Meanwhile it steps the kernel's ticks when they are due:
// workerd runs no other alarm of this object until this one returns.
async function runFront(ws, token) {
  let done = false, timer;
  const run = (async () => {
    try {
      if (!ws.env.SELF) throw new Error("the binding SELF (the worker itself, wrangler.jsonc) is not set");
      const name = ws.meta("name");
      const res = await ws.env.SELF.fetch(`https://front${RUNNER_PATH}?workspace=${encodeURIComponent(name)}&token=${token}`,
        { method: "POST", headers: { "X-Leaseplane-Runner": await runnerProof(ws.env.LEASEPLANE_LEDGER_SECRET, name, token) } });
      const text = await res.text();
      if (res.status !== 200) console.error(`workspace: the drill runner answered ${res.status}: ${text}`);
    } catch (err) {
      console.error("workspace: the drill runner failed:", err && err.message);
    } finally {
      done = true;
      ws.kernelMoved?.();
    }
  })();
  while (!done) {
    const at = ws.alarmAt;
    await new Promise((resolve) => {
      ws.kernelMoved = resolve;
      if (at !== null && at !== undefined) timer = setTimeout(resolve, Math.min(Math.max(0, at - ws.now()), 60000)); // a timer's delay is at most 2^31-1 ms
    });
    ws.kernelMoved = null;
    clearTimeout(timer);
    if (!done && ws.kernel !== null && ws.alarmAt !== null && ws.alarmAt !== undefined && ws.alarmAt <= ws.now()) tick(ws);
  }
  await run;
}

// RUNNER_PATH is the front's route that runs a workspace's queued runs
// (drills.go); it runs only for the token the object holds, sent with its
// proof.
const RUNNER_PATH = "/drills/runner";

// runnerProof is the front's runnerProof (drilltape.go): the hex
// HMAC-SHA256, under the ledger secret, of "leaseplane drill runner", the
// workspace and the token, lines apart.
async function runnerProof(secret, name, token) {
  const key = await crypto.subtle.importKey("raw", enc.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const mac = new Uint8Array(await crypto.subtle.sign("HMAC", key, enc.encode(`leaseplane drill runner\n${name}\n${token}`)));
  return [...mac].map((b) => b.toString(16).padStart(2, "0")).join("");
}

// drillsRoute answers the object's drill routes: /keyed/drills/* (a key
// the object holds), /drills/* (the front's runner) and /drill/* (a drill
// workspace's own); and detection's, /keyed/detection/*.
export async function drillsRoute(ws, path, q, req) {
  const now = ws.now();
  if (path.startsWith("/keyed/drills/")) return keyedRoute(ws, path.slice(14), q, now);
  if (path.startsWith("/keyed/detection/")) return casesRoute(ws, path.slice(17), q, new Uint8Array(await req.arrayBuffer()), now);
  if (path.startsWith("/drills/")) return runnerRoute(ws, path.slice(8), q, new Uint8Array(await req.arrayBuffer()), now);
  return drillRoute(ws, path.slice(7), q);
}

// keyedRoute answers the drill routes a key reaches (the front checked the
// key's role and the request): add, runs and cancel.
function keyedRoute(ws, what, q, now) {
  if (what === "add") {
    const n = ws.sql.exec(`SELECT count(*) AS n FROM drill_runs WHERE ${open}`).one().n;
    if (n >= MAX_RUNS) {
      return json(429, `{"ok":false,"reason":"limit_exceeded","limit":"drillRuns","max":${MAX_RUNS},"error":` +
        JSON.stringify(`this workspace has ${n} drill runs queued or running (at most ${MAX_RUNS}); ask again once one has finished, or cancel one (POST /api/v1/drills/cancel)`) + "}",
        { "Retry-After": "1" });
    }
    const id = ws.sql.exec(`INSERT INTO drill_runs (trigger, requested_ms) VALUES ('asked', ?) RETURNING id`, now).one().id;
    drillsChanged(ws); // the alarm starts a runner at once, unless one is live
    return json(200, `{"ok":true,"id":"${runId(id)}"}`);
  }
  if (what === "runs") {
    const limit = Number(q.get("limit") ?? 20);
    const rows = ws.sql.exec(`SELECT * FROM drill_runs ORDER BY id DESC LIMIT ?`, limit).toArray();
    return json(200, `{"ok":true,"everyMs":${cadenceOf(ws)},"runs":[${rows.map(runJSON).join(",")}]}`);
  }
  if (what === "cadence") {
    // The front checked everyMs (0, or MIN_CADENCE_MS to MAX_CADENCE_MS).
    // The next run is due everyMs from now, then everyMs after each
    // cadence run started, as on the server.
    const every = Number(q.get("everyMs"));
    if (!(every === 0 || (Number.isSafeInteger(every) && every >= MIN_CADENCE_MS && every <= MAX_CADENCE_MS))) {
      return refusal(400, "invalid_request", `everyMs must be 0 (stop) or an integer from ${MIN_CADENCE_MS} to ${MAX_CADENCE_MS}`);
    }
    ws.setMeta("drill_every", every);
    ws.setMeta("drill_next", every > 0 ? now + every : null);
    drillsChanged(ws);
    return json(200, `{"ok":true,"everyMs":${every}}`);
  }
  if (what === "cancel") {
    const id = Number(q.get("id")), r = runOf(ws, id);
    if (!r) return refusal(404, "not_found", `this workspace has no drill run ${runId(id)}`);
    if (r.cancelled_ms !== null) return refusal(409, "run_ended", `drill run ${runId(id)} was already cancelled`);
    if (r.finished_ms !== null) {
      return refusal(409, "run_ended", `drill run ${runId(id)} has already finished; only a queued or running run can be cancelled`);
    }
    ws.sql.exec(`UPDATE drill_runs SET cancelled_ms = ?, finished_ms = ? WHERE id = ?`, now, now, id);
    // A queued cadence run cancelled: the next one is a whole cadence away.
    if (r.trigger === "cadence" && r.started_ms === null && cadenceOf(ws) > 0) ws.setMeta("drill_next", now + cadenceOf(ws));
    drillsChanged(ws);
    return json(200, `{"ok":true,"run":${runJSON(runOf(ws, id))}}`);
  }
  return refusal(404, "not_found", `no drill route ${what}`);
}

// runnerRoute answers the front's runner (no key: the object is reachable
// only through its binding): claim the next run, save a run's results,
// record a finished run's entry, ask whether it was cancelled. Every call
// carries the runner's token; the object answers only the runner its
// alarm let in (each call renews it), any other 409 (it then stops).
function runnerRoute(ws, what, q, body, now) {
  const token = q.get("token") ?? "";
  const held = runnerOf(ws);
  if (held === null || held.token !== token) {
    return json(409, `{"ok":false,"reason":"not_runner","busy":true,"error":"this runner was not let in, or another took its place"}`);
  }
  ws.setMeta("drill_runner", JSON.stringify({ token, ms: now }));
  if (what === "claim") {
    const r = ws.sql.exec(`SELECT id, trigger FROM drill_runs WHERE ${open} ORDER BY id LIMIT 1`).toArray()[0];
    if (!r) {
      ws.setMeta("drill_runner", null);
      drillsChanged(ws);
      return json(200, `{"ok":true,"id":null}`);
    }
    ws.sql.exec(`UPDATE drill_runs SET started_ms = ?, drills = '[]' WHERE id = ?`, now, r.id);
    if (r.trigger === "cadence" && cadenceOf(ws) > 0) ws.setMeta("drill_next", now + cadenceOf(ws));
    ws.counters.drillStarts++;
    return json(200, `{"ok":true,"id":${r.id}}`);
  }
  const id = Number(q.get("id")), r = runOf(ws, id);
  if (!r) return refusal(404, "not_found", `no drill run ${runId(id)}`);
  const cancelled = r.cancelled_ms !== null;
  if (what === "state") return json(200, `{"ok":true,"cancelled":${cancelled}}`);
  if (cancelled) return refusal(409, "run_ended", `drill run ${runId(id)} was cancelled`);
  if (what === "record") {
    // The finished run's drill.run entry, which the front made from what
    // save answered (kernel/drill.RunEvent); once per run.
    if (r.finished_ms === null) return refusal(409, "run_open", `drill run ${runId(id)} has not finished`);
    if (r.recorded === 0) {
      recordHost(ws, body, now);
      ws.sql.exec(`UPDATE drill_runs SET recorded = 1 WHERE id = ?`, id);
    }
    return json(200, `{"ok":true}`);
  }
  if (what !== "save") return refusal(404, "not_found", `no drill runner route ${what}`);
  const results = dec.decode(body);
  if (q.get("finished") === "1") {
    const finished = Math.max(now, r.started_ms ?? now);
    ws.sql.exec(`UPDATE drill_runs SET drills = ?, finished_ms = ?, passed = ? WHERE id = ?`,
      results, finished, q.get("passed") === "1" ? 1 : 0, id);
    return json(200, `{"ok":true,"startedAtMs":${r.started_ms ?? finished},"finishedAtMs":${finished}}`);
  }
  ws.sql.exec(`UPDATE drill_runs SET drills = ? WHERE id = ?`, results, id);
  return json(200, `{"ok":true}`);
}

// recordHost puts a host event (a drill.run or detection.run entry, its
// bytes as the front made them) in the workspace's log as a row of op
// "host", as the server logs it: the ledger derives its entry from the
// log with the commands', in their order, and replay passes it by.
function recordHost(ws, event, now) {
  ws.catchUp();
  ws.seq++;
  ws.sql.exec(`INSERT INTO log (seq, op, now_ms, body, version, semantics, events, command) VALUES (?, 'host', ?, ?, ?, ?, ?, NULL)`,
    ws.seq, now, blob(enc.encode("{}")), ws.version, ws.book.semantics, blob(jsonArray([event])));
  if (now > ws.last) ws.setMeta("clock", (ws.last = now));
  ws.catchUp();
}

// drillRoute answers the front about a drill workspace: its tape from an
// entry on, its log, and dropping it.
async function drillRoute(ws, what, q) {
  const drill = ws.meta("drill") !== null;
  if (what === "drop" && ws.rules !== null && !drill) return refusal(409, "not_a_drill", "only a drill workspace is dropped");
  if (what === "drop") {
    for (const h of ws.held.values()) h.resolve(refusal(404, "not_found", "this workspace does not exist"));
    ws.held.clear();
    await ws.ctx.storage.deleteAlarm();
    await ws.ctx.storage.deleteAll();
    ws.load();
    return json(200, `{"ok":true}`);
  }
  if (!drill) return refusal(404, "not_found", "this workspace is no drill workspace");
  if (what === "tape") {
    const from = Number(q.get("from") ?? 0);
    const rows = ws.sql.exec(`SELECT * FROM tape WHERE seq > ? ORDER BY seq`, from).toArray();
    return json(200, "[" + rows.map((t) => `{"op":"${t.op}","nowMs":${t.now_ms},"body":"${b64(new Uint8Array(t.body))}",` +
      `"status":${t.status},"answer":${dec.decode(t.answer)},"events":${dec.decode(t.events)},"changed":${t.changed === 1}}`).join(",") + "]");
  }
  if (what === "log") {
    const rows = ws.sql.exec(`SELECT op, now_ms, body, command FROM log ORDER BY seq`).toArray();
    return json(200, "[" + rows.map((l) => `{"op":"${l.op}","nowMs":${l.now_ms},"body":"${b64(new Uint8Array(l.command ?? l.body))}"}`).join(",") + "]");
  }
  return refusal(404, "not_found", `no drill workspace route ${what}`);
}

// casesRoute answers the front's detection runs: the workspace's rules,
// filing a run's findings (a JSON array of [key, entryA, entryB, finding];
// answered with their case ids, in order), and the cases.
function casesRoute(ws, what, q, body, now) {
  if (what === "rules") return json(200, ws.rules);
  if (what === "file") {
    const ids = JSON.parse(dec.decode(body)).map(([key, a, b, finding]) =>
      ws.sql.exec(`INSERT INTO detection_cases (detector, key, entry_a, entry_b, finding, first_seen_ms, last_seen_ms)
        VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET last_seen_ms = excluded.last_seen_ms RETURNING id`,
        q.get("detector"), key, a, b, JSON.stringify(finding), now, now).one().id);
    return json(200, `{"ids":[${ids.join(",")}],"nowMs":${now}}`);
  }
  if (what === "record") {
    recordHost(ws, body, now); // the run's detection.run entry (kernel/detect.RunEvent)
    return json(200, `{"ok":true}`);
  }
  if (what !== "cases") return refusal(404, "not_found", `no detection route ${what}`);
  const status = q.get("status") ?? "";
  const rows = ws.sql.exec(`SELECT * FROM detection_cases ${status ? "WHERE status = ?" : ""} ORDER BY id`, ...(status ? [status] : [])).toArray();
  return json(200, `{"ok":true,"cases":[${rows.map((c) => `{"id":"case_${c.id}","detector":${JSON.stringify(c.detector)},` +
    `"status":${JSON.stringify(c.status)},"entries":[${c.entry_a},${c.entry_b}],"firstSeenAtMs":${c.first_seen_ms},` +
    `"lastSeenAtMs":${c.last_seen_ms},"finding":${c.finding}}`).join(",")}]}`);
}
