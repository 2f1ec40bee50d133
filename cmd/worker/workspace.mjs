// workspace.mjs is the Durable Object of one workspace: the lease authority
// for it. The kernel (its wasip1 build, through kernel.mjs) decides
// everything; this object does the I/O its Ready asks for, one step per
// command: it writes the log when Ready.log says, a snapshot when
// Ready.snapshotDue says, sets its one alarm to Ready.nextAlarm (or to the
// drills', drills.mjs, when earlier), and writes each answer of a held ask
// (Ready.answers) to the request held under its askId. Its SQLite storage:
//
//   meta      key/value: rules, name, clock (last nowMs recorded), offset
//   log       every command the kernel said to log, with its nowMs, the
//             kernel version and the semantics it ran under (a newer kernel
//             replays an older log as it was decided), and its events for
//             the ledger; a command record (kernel/record.go) as the front
//             decoded it, or the op and REST body of a command the object
//             made (tick, cancel, release); written before the answer
//             leaves (workerd's output gate holds the response until the
//             write is durable)
//   snapshot  the machine's snapshot when the kernel says one is due; the
//             log behind both it and the ledger is dropped
//   keys      the ids of the workspace's live keys
//   ledger_*  the ledger (book.mjs)
//
// On start it restores the snapshot, steps the log after it, then steps
// `cancel {}` (the held requests of before are gone). A held request whose
// client goes away (its request's signal aborts) has its ask cancelled; a
// grant that can no longer be delivered is released at once.
//
// The front worker (cmd/worker, Go) authenticates and decodes each command
// and sends its record here as POST /op/<op>. The other routes: /create,
// /keys/add, /keys/revoke, /keyed/metrics and /test/* (routes.mjs, the
// test routes only when the binding LEASEPLANE_TEST_CLOCK is "1"),
// /keyed/whoami, /keyed/events (events.mjs), /ledger/* (book.mjs), /replay, drills.mjs's.

import { DurableObject } from "cloudflare:workers";
import kernelModule from "./kernel.wasm";
import { Kernel } from "./kernel.mjs";
import { Book } from "./book.mjs";
import { replay } from "./replay.mjs";
import { create, key, metrics, testRoute } from "./routes.mjs";
import { initDrills, tape, drillsRoute, armAlarm, alarm } from "./drills.mjs";
import { Streams } from "./events.mjs";
import { json, refusal, unavailable, answer, blob, jsonArray, enc, dec, EMPTY } from "./respond.mjs";

const OPS = new Set(["acquire", "release", "wait", "suspend", "resume", "forget"]);
const body = (o) => enc.encode(JSON.stringify(o));

export class Workspace extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.testClock = env.LEASEPLANE_TEST_CLOCK === "1";
    this.counters = { commands: {}, logged: 0, alarms: 0, heldAnswered: 0, undeliverable: 0, ledgerFailures: 0, drillRunners: 0, drillStarts: 0 };
    this.held = new Map(); // askId → {keyId, signal, resolve}
    this.streams = new Streams(this); // the events streams (events.mjs)
    ctx.blockConcurrencyWhile(async () => this.load());
  }

  // load builds the machine from storage: snapshot, then the log after it,
  // then cancel {}.
  load() {
    if (this.loading) throw new Error("the workspace failed while loading");
    this.loading = true;
    try {
      this.loadStorage();
    } finally {
      this.loading = false;
    }
  }

  loadStorage() {
    this.kernel = null;
    for (const h of this.held.values()) h.resolve(unavailable("the workspace was reloaded"));
    this.held.clear();
    this.sql.exec(`CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v)`);
    this.sql.exec(`CREATE TABLE IF NOT EXISTS log (seq INTEGER PRIMARY KEY, op TEXT NOT NULL, now_ms INTEGER NOT NULL,
      body BLOB NOT NULL, version TEXT NOT NULL, semantics INTEGER NOT NULL DEFAULT 2, events BLOB, command BLOB)`);
    if (!this.sql.exec(`SELECT name FROM pragma_table_info('log')`).toArray().some((c) => c.name === "command")) {
      this.sql.exec(`ALTER TABLE log ADD COLUMN command BLOB`); // a log of an earlier build
    }
    this.sql.exec(`CREATE TABLE IF NOT EXISTS snapshot (id INTEGER PRIMARY KEY CHECK (id = 1),
      seq INTEGER NOT NULL, data BLOB NOT NULL, version TEXT NOT NULL)`);
    this.sql.exec(`CREATE TABLE IF NOT EXISTS keys (id TEXT PRIMARY KEY, role TEXT NOT NULL, agent_did TEXT)`);
    initDrills(this); // this.drill is false until the log is replayed
    this.keys = new Map(this.sql.exec(`SELECT id, role, agent_did FROM keys`).toArray().map((k) => [k.id, k]));
    this.book = new Book(this.ctx, this.env, (k) => this.meta(k), (k, v) => this.setMeta(k, v));
    this.rules = this.meta("rules");
    this.last = Number(this.meta("clock") ?? 0);
    this.offset = Number(this.meta("offset") ?? 0);
    this.alarmAt = this.armedAt = this.drillAt = undefined; // the kernel's, the storage's, the drills' (drills.mjs)
    if (this.rules === null) return; // not made yet
    const k = new Kernel(kernelModule);
    const snap = this.sql.exec(`SELECT seq, data FROM snapshot WHERE id = 1`).toArray()[0];
    if (snap) k.restore(new Uint8Array(snap.data));
    else k.new(enc.encode(this.rules));
    this.seq = snap ? snap.seq : 0;
    // Each logged command decides again by the semantics it was logged
    // under; the machine then moves to this build's.
    let sem = this.book.semantics, r = null;
    for (const row of this.sql.exec(`SELECT * FROM log WHERE seq > ? ORDER BY seq`, this.seq)) {
      if (row.semantics !== sem) k.setSemantics((sem = row.semantics));
      if (row.op !== "host") r = row.command !== null ? k.stepRecord(new Uint8Array(row.command)) : k.stepBody(row.op, row.now_ms, new Uint8Array(row.body));
      this.seq = row.seq; // a host row (drills.mjs) is an entry of the host's own, not a command
    }
    if (sem !== this.book.semantics) k.setSemantics(this.book.semantics);
    this.kernel = k;
    this.version = k.version();
    if (r !== null) this.arm(r.nextAlarm);
    this.drill = this.meta("drill") !== null; // its tape has this cancel too (drills.mjs)
    this.step("cancel", null, body({}));
  }

  meta(k) {
    const row = this.sql.exec(`SELECT v FROM meta WHERE k = ?`, k).toArray()[0];
    return row ? row.v : null;
  }

  setMeta(k, v) {
    this.sql.exec(`INSERT INTO meta (k, v) VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v`, k, v);
  }

  // now is the object's clock: the wall clock plus the test offset, never
  // below the last time it recorded.
  now() {
    return Math.max(Date.now() + this.offset, this.last);
  }

  // fetch answers every route; a failure of the object itself is 503
  // (nothing was granted), never a bare 500.
  async fetch(req) {
    try {
      return await this.route(req, new URL(req.url));
    } catch (err) {
      console.error("workspace: request failed:", err && err.stack);
      return unavailable(err && err.message);
    }
  }

  async route(req, url) {
    const path = url.pathname, q = url.searchParams;
    const made = this.kernel !== null;
    // A route a key reaches is refused unless this workspace holds the
    // key's id: a revocation holds from its answer on.
    const keyId = req.headers.get("X-Leaseplane-Key-Id");
    if (/^\/(op|ledger|keyed)\//.test(path) && made && !this.keys.has(keyId)) return refusal(401, "unauthorized", "unknown or revoked key");
    const absent = () => refusal(404, "not_found", "this workspace does not exist");
    if (path.startsWith("/op/")) {
      const op = path.slice(4);
      if (!OPS.has(op)) return refusal(404, "not_found", `no op ${op}`);
      if (!made) return absent();
      const r = this.step(op, new Uint8Array(await req.arrayBuffer()), null);
      if (r === null) return unavailable(this.failure);
      if (r.answer !== null) return answer(r.status, r.retryAfter, r.answer);
      return new Promise((resolve) => {
        this.held.set(r.askId, { keyId, signal: req.signal, resolve });
        req.signal?.addEventListener("abort", () => this.gone(r.askId), { once: true });
      });
    }
    if (path === "/create") return create(this, q.get("name"), new Uint8Array(await req.arrayBuffer()), q.get("drill") === "1");
    if (/^\/(keyed\/drills|keyed\/detection|drills|drill)\//.test(path)) return drillsRoute(this, path, q, req);
    if (path === "/replay") return replay(req, kernelModule);
    if (!made) return absent();
    if (path === "/keys/add" || path === "/keys/revoke") return key(this, path.slice(6), q);
    if (path === "/keyed/whoami") {
      const k = this.keys.get(keyId);
      return json(200, { ok: true, workspace: this.meta("name"), role: k.role, ...(k.role === "agent" ? { actorDid: k.agent_did } : {}) });
    }
    if (path === "/keyed/metrics") return metrics(this);
    if (path === "/keyed/events") return this.streams.open(q, keyId);
    if (path.startsWith("/ledger/")) {
      this.catchUp();
      return this.book.route(path.slice(8), q, this.now());
    }
    if (this.testClock && path.startsWith("/test/")) return testRoute(this, path.slice(6), q);
    return refusal(404, "not_found", `no route ${path}`);
  }

  // step applies one command at the object's clock: a command record as
  // the front decoded it (rec), or op and a REST body the object made. It
  // does what the Ready says, and returns it (null when the object failed:
  // the machine is then rebuilt from storage and nothing was granted).
  step(op, rec, restBody) {
    const now = this.now();
    this.counters.commands[op] = (this.counters.commands[op] ?? 0) + 1;
    let r;
    try {
      if (rec !== null) new DataView(rec.buffer, rec.byteOffset).setBigInt64(8, BigInt(now), true); // RecordNowOffset
      r = rec !== null ? this.kernel.stepRecord(rec) : this.kernel.stepBody(op, now, restBody);
      if (r.log) this.record(op, now, rec, restBody, r);
      if (this.drill) tape(this, op, now, rec, restBody, r);
    } catch (err) {
      if (this.loading) throw err;
      console.error("workspace: command failed:", err && err.stack);
      this.failure = err.message;
      try {
        this.load();
      } catch (e) {
        console.error("workspace: reload failed:", e && e.stack);
        this.kernel = null;
        this.ctx.abort?.("reload failed");
      }
      return null;
    }
    this.arm(r.nextAlarm);
    for (const a of r.answers) this.deliver(a);
    return r;
  }

  record(op, now, rec, restBody, r) {
    this.seq++;
    this.counters.logged++;
    this.sql.exec(`INSERT INTO log (seq, op, now_ms, body, version, semantics, events, command) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
      this.seq, op, now, blob(restBody ?? EMPTY), this.version, this.book.semantics, blob(jsonArray(r.events.map((e) => e.json))),
      rec === null ? null : blob(rec));
    if (now > this.last) this.setMeta("clock", (this.last = now));
    this.catchUp();
    if (r.snapshotDue) {
      this.sql.exec(`INSERT INTO snapshot (id, seq, data, version) VALUES (1, ?, ?, ?)
        ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, data = excluded.data, version = excluded.version`,
        this.seq, blob(this.kernel.snapshot()), this.version);
      // The log goes only behind both the snapshot and the ledger.
      this.sql.exec(`DELETE FROM log WHERE seq <= ?`, Math.min(this.seq, this.book.seq));
    }
  }

  catchUp() {
    if (!this.book.catchUp(this.seq)) this.counters.ledgerFailures++;
    this.streams.push();
  }

  // deliver writes a held ask's answer to its request; a grant whose
  // request is gone is released at once.
  deliver(a) {
    const h = this.held.get(a.askId);
    this.held.delete(a.askId);
    if (h && !h.signal?.aborted) {
      this.counters.heldAnswered++;
      return h.resolve(answer(a.status, a.retryAfter, a.answer));
    }
    const lease = a.status === 200 ? JSON.parse(dec.decode(a.answer)).lease : undefined;
    if (lease) {
      this.counters.undeliverable++;
      this.step("release", null, body({ resource: lease.resource, actorDid: lease.holder, leaseId: lease.id }));
    }
  }

  // gone cancels the ask of a held request whose client went away.
  gone(askId) {
    if (this.held.delete(askId) && this.kernel !== null) this.step("cancel", null, body({ askId }));
  }

  // arm sets the one storage alarm to the earlier of the kernel's next
  // alarm (at) and the drills' (drills.mjs).
  arm(at) {
    armAlarm(this, at);
  }

  // alarm ticks the kernel when its alarm is due, then sees to the drills
  // (drills.mjs), awaiting a drill run when one is due.
  async alarm() {
    if (this.kernel !== null) await alarm(this);
  }
}
