// workspace.mjs is the Durable Object of one workspace: the lease authority
// for it. It hosts one instance of the kernel's wasip1 build (kernel.mjs)
// and keeps the truth in the object's SQLite storage:
//
//   meta      key/value: rules, name, clock (last nowMs recorded), offset
//   log       every command that changed the machine, with its nowMs and
//             the kernel version it ran under, written before the answer
//             leaves (workerd's output gate holds the response until the
//             write is durable)
//   snapshot  the machine's snapshot every SNAPSHOT_EVERY commands; the
//             log behind it is dropped
//
// On start it restores the snapshot and applies the log after it: the
// kernel is deterministic, so that gives back the same machine. Its alarm
// is set to the kernel's next alarm and sends a tick when it fires, so
// leases lapse with nobody asking.
//
// The front worker (cmd/worker, Go) authenticates and sends commands here
// as POST /op/<op> with the REST body. Other routes:
//
//   POST /create        make the workspace (body: its rules)
//   POST /replay        replay one scenario in a fresh machine of its own
//                       (the parity run): {"rules": b64|null,
//                       "steps": [b64...]} → per step status,
//                       Retry-After, answer and events, and the trust,
//                       every bytes field in base64
//   POST /test/clock?advanceMs=N   and   GET /test/state
//                       only when the binding LEASEPLANE_TEST_CLOCK is "1":
//                       move this object's clock ahead (alarms fire in
//                       real time) and read its state without a command

import { DurableObject } from "cloudflare:workers";
import kernelModule from "./kernel.wasm";
import { Kernel } from "./kernel.mjs";

const SNAPSHOT_EVERY = 256;
const OPS = new Set(["acquire", "release", "wait", "suspend", "resume"]);
const enc = new TextEncoder();
const dec = new TextDecoder();
const EMPTY = new Uint8Array(0);

function json(status, body, headers = {}) {
  return new Response(typeof body === "string" ? body : JSON.stringify(body), {
    status,
    headers: {
      "Content-Type": "application/json",
      "X-Content-Type-Options": "nosniff",
      "Cache-Control": "no-store",
      ...headers,
    },
  });
}

function refusal(status, reason, error, headers) {
  return json(status, { ok: false, reason, error }, headers);
}

function unavailable(what) {
  return refusal(503, "unavailable", `the lease plane cannot decide now; nothing was granted; retry (${what})`, { "Retry-After": "1" });
}

// blob copies bytes into an ArrayBuffer, the type SQLite storage binds.
const blob = (u8) => u8.buffer.slice(u8.byteOffset, u8.byteOffset + u8.byteLength);

const b64 = (u8) => {
  let s = "";
  for (let i = 0; i < u8.length; i += 0x8000) s += String.fromCharCode(...u8.subarray(i, i + 0x8000));
  return btoa(s);
};

const unb64 = (s) => Uint8Array.from(atob(s), (c) => c.charCodeAt(0));

export class Workspace extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.testClock = env.LEASEPLANE_TEST_CLOCK === "1";
    ctx.blockConcurrencyWhile(async () => this.load());
  }

  // load builds the machine from storage: snapshot, then the log after it.
  load() {
    this.kernel = null;
    this.sql.exec(`CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v)`);
    this.sql.exec(`CREATE TABLE IF NOT EXISTS log (seq INTEGER PRIMARY KEY, op TEXT NOT NULL,
      now_ms INTEGER NOT NULL, body BLOB NOT NULL, version TEXT NOT NULL)`);
    this.sql.exec(`CREATE TABLE IF NOT EXISTS snapshot (id INTEGER PRIMARY KEY CHECK (id = 1),
      seq INTEGER NOT NULL, data BLOB NOT NULL, version TEXT NOT NULL)`);
    this.rules = this.meta("rules");
    this.last = Number(this.meta("clock") ?? 0);
    this.offset = Number(this.meta("offset") ?? 0);
    this.alarmAt = null;
    if (this.rules === null) return; // not made yet
    const k = new Kernel(kernelModule);
    const snap = this.sql.exec(`SELECT seq, data FROM snapshot WHERE id = 1`).toArray()[0];
    if (snap) k.restore(new Uint8Array(snap.data));
    else k.new(enc.encode(this.rules));
    let after = snap ? snap.seq : 0;
    this.seq = after;
    for (const row of this.sql.exec(`SELECT seq, op, now_ms, body FROM log WHERE seq > ? ORDER BY seq`, after)) {
      k.apply(row.op, row.now_ms, new Uint8Array(row.body));
      this.seq = row.seq;
    }
    this.kernel = k;
    this.version = k.version();
    this.sinceSnapshot = this.sql.exec(`SELECT count(*) AS n FROM log`).one().n;
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

  async fetch(req) {
    const url = new URL(req.url);
    const path = url.pathname;
    if (path.startsWith("/op/")) {
      const op = path.slice(4);
      if (!OPS.has(op)) return refusal(404, "not_found", `no op ${op}`);
      if (this.kernel === null) return refusal(404, "not_found", "this workspace does not exist");
      const body = new Uint8Array(await req.arrayBuffer());
      return this.command(op, body);
    }
    switch (path) {
      case "/create":
        return this.create(new Uint8Array(await req.arrayBuffer()));
      case "/replay":
        return this.replay(await req.json());
    }
    if (this.testClock) {
      switch (path) {
        case "/test/clock":
          return this.advance(Number(url.searchParams.get("advanceMs")));
        case "/test/state":
          return this.state();
      }
    }
    return refusal(404, "not_found", `no route ${path}`);
  }

  create(rules) {
    if (this.rules !== null) return refusal(409, "workspace_exists", "this workspace exists");
    try {
      new Kernel(kernelModule).new(rules);
    } catch (err) {
      return refusal(400, "invalid_request", `rules: ${err.message}`);
    }
    this.setMeta("rules", dec.decode(rules));
    this.load();
    return json(200, { ok: true });
  }

  // command applies one command, logs it when it changed the machine and
  // sets the alarm, all before the answer leaves.
  command(op, body) {
    const now = this.now();
    let res;
    try {
      res = this.kernel.apply(op, now, body);
      if (res.changed) this.record(op, now, body);
    } catch (err) {
      // The machine may be ahead of storage: rebuild it from storage.
      console.error("workspace: command failed:", err && err.stack);
      this.reload();
      return unavailable(err.message);
    }
    const headers = res.retryAfter > 0 ? { "Retry-After": String(res.retryAfter) } : {};
    return json(res.status, dec.decode(res.answer), headers);
  }

  record(op, now, body) {
    this.seq++;
    this.sql.exec(`INSERT INTO log (seq, op, now_ms, body, version) VALUES (?, ?, ?, ?, ?)`,
      this.seq, op, now, blob(body), this.version);
    if (now > this.last) {
      this.last = now;
      this.setMeta("clock", now);
    }
    if (++this.sinceSnapshot >= SNAPSHOT_EVERY) {
      this.sql.exec(`INSERT INTO snapshot (id, seq, data, version) VALUES (1, ?, ?, ?)
        ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, data = excluded.data, version = excluded.version`,
        this.seq, blob(this.kernel.snapshot()), this.version);
      this.sql.exec(`DELETE FROM log WHERE seq <= ?`, this.seq);
      this.sinceSnapshot = 0;
    }
    this.schedule();
  }

  // schedule sets the storage alarm to the kernel's next alarm (in real
  // time: minus the test offset).
  schedule() {
    const at = this.kernel.nextAlarm();
    if (at === this.alarmAt) return;
    this.alarmAt = at;
    if (at === null) this.ctx.storage.deleteAlarm();
    else this.ctx.storage.setAlarm(at - this.offset);
  }

  reload() {
    try {
      this.load();
    } catch (err) {
      console.error("workspace: reload failed:", err && err.stack);
      this.kernel = null;
      this.ctx.abort?.("reload failed");
    }
  }

  async alarm() {
    if (this.kernel === null) return;
    this.alarmAt = null;
    this.command("tick", EMPTY);
    if (this.alarmAt === null && this.kernel) this.schedule();
  }

  replay(input) {
    const k = (this.replayKernel ??= new Kernel(kernelModule));
    try {
      k.new(input.rules == null ? EMPTY : unb64(input.rules));
    } catch (err) {
      if (k.broken) this.replayKernel = null;
      return json(200, { e: err.message });
    }
    const steps = [];
    try {
      for (const s of input.steps) {
        const r = k.step(unb64(s));
        steps.push({ s: r.status, r: r.retryAfter, a: b64(r.answer), v: b64(r.events) });
      }
      return json(200, { steps, trust: b64(k.trust()) });
    } catch (err) {
      if (k.broken) this.replayKernel = null;
      return json(200, { e: err.message });
    }
  }

  advance(ms) {
    if (!Number.isSafeInteger(ms) || ms < 0) return refusal(400, "invalid_request", "advanceMs must be a whole number of ms ≥ 0");
    this.offset += ms;
    this.setMeta("offset", this.offset);
    if (this.kernel) {
      this.alarmAt = undefined;
      this.schedule();
    }
    return json(200, { ok: true, offsetMs: this.offset, nowMs: this.now() });
  }

  state() {
    if (this.kernel === null) return refusal(404, "not_found", "this workspace does not exist");
    const log = this.sql.exec(`SELECT seq, op, now_ms FROM log ORDER BY seq`).toArray();
    return json(200, {
      nowMs: this.now(),
      nextAlarm: this.kernel.nextAlarm(),
      trust: JSON.parse(dec.decode(this.kernel.trust())),
      snapshot: JSON.parse(dec.decode(this.kernel.snapshot())),
      log: log.map((r) => ({ seq: r.seq, op: r.op, nowMs: r.now_ms })),
    });
  }
}
