// workspace.mjs is the Durable Object of one workspace: the lease authority
// for it. It hosts one instance of the kernel's wasip1 build (kernel.mjs)
// and keeps the truth in the object's SQLite storage:
//
//   meta      key/value: rules, name, clock (last nowMs recorded), offset
//   log       every command that changed the machine, with its nowMs, the
//             kernel version and the semantics it ran under (a newer kernel
//             replays an older log as it was decided), written before the answer
//             leaves (workerd's output gate holds the response until the
//             write is durable)
//   snapshot  the machine's snapshot every SNAPSHOT_EVERY commands; the
//             log behind both it and the ledger is dropped
//   ledger_*  the workspace's ledger: every event the kernel emits, as an
//             entry with its bytes exactly as emitted, packed 32 to a row
//             as the server packs them (kernel/ledger/rows, through the
//             ledger module; the last row grows until full), derived from the log
//             (each row keeps its command's events) right after the row is
//             written and caught up after a failure; the stored tree
//             hashes (tlog's layout); the grant entry of each lease; and, in
//             meta, the origin, the verifier key, the signing key sealed with
//             the LEASEPLANE_LEDGER_SECRET binding, and the latest signed
//             checkpoint. Hashes, proofs and signatures come from
//             kernel/ledger built as a wasm module (cmd/worker/ledger).
//
// On start it restores the snapshot and applies the log after it: the
// kernel is deterministic, so that gives back the same machine. Its alarm
// is set to the kernel's next alarm and sends a tick when it fires, so
// leases lapse with nobody asking.
//
// The front worker (cmd/worker, Go) authenticates and sends commands here
// as POST /op/<op> with the REST body. Other routes:
//
//   POST /create?name=N make the workspace (body: its rules) and its
//                       ledger's signing key
//   GET  /ledger/key, /ledger/checkpoint, /ledger/entries?start&count,
//        /ledger/proof?index&size, /ledger/consistency?from&to,
//        /ledger/receipt?leaseId   the ledger routes
//   POST /replay        replay one scenario in a fresh machine of its own
//                       (the parity run): {"rules": b64|null,
//                       "steps": [b64...]} → per step status,
//                       Retry-After, answer and events, and the trust,
//                       every bytes field in base64
//   POST /test/clock?advanceMs=N, GET /test/state, POST /test/ledger-fault?on=1|0
//                       only when the binding LEASEPLANE_TEST_CLOCK is "1":
//                       move this object's clock ahead (alarms fire in
//                       real time), read its state without a command, make
//                       the ledger's writes fail until turned off

import { DurableObject } from "cloudflare:workers";
import kernelModule from "./kernel.wasm";
import ledgerModule from "./ledger.wasm";
import { Kernel } from "./kernel.mjs";
import { Ledger, seal, unseal } from "./ledger.mjs";

const SNAPSHOT_EVERY = 256;
const LEDGER_ROW = 32; // the entries of a full ledger row (kernel/ledger/rows.Size)
const OPS = new Set(["acquire", "release", "wait", "suspend", "resume", "forget"]);
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
    this.counters = { commands: {}, logged: 0, alarms: 0, heldOpen: 0, heldAnswered: 0, ledgerFailures: 0 };
    ctx.blockConcurrencyWhile(async () => this.load());
  }

  // load builds the machine from storage: snapshot, then the log after it.
  load() {
    this.kernel = null;
    this.sql.exec(`CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v)`);
    this.sql.exec(`CREATE TABLE IF NOT EXISTS log (seq INTEGER PRIMARY KEY, op TEXT NOT NULL,
      now_ms INTEGER NOT NULL, body BLOB NOT NULL, version TEXT NOT NULL, semantics INTEGER NOT NULL DEFAULT 2,
      events BLOB)`);
    this.sql.exec(`CREATE TABLE IF NOT EXISTS snapshot (id INTEGER PRIMARY KEY CHECK (id = 1),
      seq INTEGER NOT NULL, data BLOB NOT NULL, version TEXT NOT NULL)`);
    this.sql.exec(`CREATE TABLE IF NOT EXISTS ledger_rows (first INTEGER PRIMARY KEY, count INTEGER NOT NULL, data BLOB NOT NULL)`);
    this.sql.exec(`CREATE TABLE IF NOT EXISTS ledger_hashes (idx INTEGER PRIMARY KEY, hash BLOB NOT NULL)`);
    this.sql.exec(`CREATE TABLE IF NOT EXISTS ledger_grants (lease_id TEXT PRIMARY KEY, idx INTEGER NOT NULL)`);
    this.sql.exec(`CREATE TABLE IF NOT EXISTS keys (id TEXT PRIMARY KEY, role TEXT NOT NULL, agent_did TEXT)`);
    this.keys = new Map(this.sql.exec(`SELECT id, role, agent_did FROM keys`).toArray().map((k) => [k.id, k]));
    this.ledger = new Ledger(ledgerModule, (indexes) => this.readHashes(indexes));
    this.semantics = this.ledger.semantics();
    this.packOldEntries();
    this.ledgerSize = this.storedSize();
    this.openRow = null;
    this.hashCount = this.sql.exec(`SELECT count(*) AS n FROM ledger_hashes`).one().n;
    this.ledgerSeq = Number(this.meta("ledger_seq") ?? 0);
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
    // Each logged command decides again by the semantics it was logged
    // under; the machine then moves to this build's.
    let sem = this.semantics;
    for (const row of this.sql.exec(`SELECT seq, op, now_ms, body, semantics FROM log WHERE seq > ? ORDER BY seq`, after)) {
      if (row.semantics !== sem) k.setSemantics((sem = row.semantics));
      k.apply(row.op, row.now_ms, new Uint8Array(row.body));
      this.seq = row.seq;
    }
    if (sem !== this.semantics) k.setSemantics(this.semantics);
    this.kernel = k;
    this.version = k.version();
    this.sinceSnapshot = this.sql.exec(`SELECT count(*) AS n FROM log`).one().n;
  }

  // metrics answers this workspace's counters (since the object started)
  // and sizes, as Prometheus text.
  metrics() {
    const c = this.counters;
    const n = (q) => this.sql.exec(q).one().n;
    const lines = [];
    const metric = (name, type, help, samples) => {
      lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
      for (const [labels, v] of samples) lines.push(`${name}${labels} ${v}`);
    };
    metric("leaseplane_commands_total", "counter", "Commands this workspace's object applied since it started, by op.",
      Object.keys(c.commands).sort().map((op) => [`{op="${op}"}`, c.commands[op]]));
    metric("leaseplane_commands_logged_total", "counter", "Commands that changed the machine and were logged.", [["", c.logged]]);
    metric("leaseplane_alarm_ticks_total", "counter", "Ticks sent by the object's alarm.", [["", c.alarms]]);
    metric("leaseplane_held_requests", "gauge", "Lease requests held open now (waitUpToMs).", [["", c.heldOpen]]);
    metric("leaseplane_held_requests_total", "counter", "Held lease requests answered.", [["", c.heldAnswered]]);
    metric("leaseplane_ledger_write_failures_total", "counter", "Ledger writes that failed (caught up from the log).", [["", c.ledgerFailures]]);
    metric("leaseplane_ledger_entries", "gauge", "Entries in the workspace's ledger.", [["", this.ledgerSize]]);
    metric("leaseplane_log_commands", "gauge", "Commands in the log after the snapshot.", [["", n(`SELECT count(*) AS n FROM log`)]]);
    metric("leaseplane_keys", "gauge", "Live keys of the workspace.", [["", this.keys.size]]);
    metric("leaseplane_storage_bytes", "gauge", "The object's SQLite storage.", [["", this.ctx.storage.sql.databaseSize ?? 0]]);
    return new Response(lines.join("\n") + "\n", {
      status: 200,
      headers: { "Content-Type": "text/plain; version=0.0.4; charset=utf-8", "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store" },
    });
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
      return await this.route(req);
    } catch (err) {
      console.error("workspace: request failed:", err && err.stack);
      return unavailable(err && err.message);
    }
  }

  async route(req) {
    const url = new URL(req.url);
    const path = url.pathname;
    // Every route a key reaches is refused unless this workspace holds the
    // key's id: a revocation holds from its answer on.
    const keyId = req.headers.get("X-Leaseplane-Key-Id");
    const keyed = path.startsWith("/op/") || path.startsWith("/ledger/") || path.startsWith("/keyed/");
    if (keyed && this.kernel !== null && !this.keys.has(keyId)) {
      return refusal(401, "unauthorized", "unknown or revoked key");
    }
    if (path === "/keyed/whoami" && this.kernel !== null) {
      const k = this.keys.get(keyId);
      const who = { ok: true, workspace: this.meta("name"), role: k.role };
      if (k.role === "agent") who.actorDid = k.agent_did;
      return json(200, who);
    }
    if (path === "/keyed/metrics" && this.kernel !== null) return this.metrics();
    if (path.startsWith("/op/")) {
      const op = path.slice(4);
      if (!OPS.has(op)) return refusal(404, "not_found", `no op ${op}`);
      if (this.kernel === null) return refusal(404, "not_found", "this workspace does not exist");
      const body = new Uint8Array(await req.arrayBuffer());
      const waitUpTo = url.searchParams.get("waitUpToMs");
      if (op === "acquire" && waitUpTo !== null) return this.held(body, Number(waitUpTo), keyId);
      return this.command(op, body);
    }
    switch (path) {
      case "/create":
        return this.create(url.searchParams.get("name"), new Uint8Array(await req.arrayBuffer()));
      case "/keys/add":
      case "/keys/revoke":
        return this.key(path.slice(6), url.searchParams);
      case "/replay": {
        let input;
        try {
          input = await req.json();
        } catch (err) {
          return refusal(400, "invalid_request", `replay: the body is not JSON: ${err.message}`);
        }
        if (!input || !Array.isArray(input.steps)) return refusal(400, "invalid_request", "replay: want {rules, steps: [...]}");
        return this.replay(input);
      }
    }
    if (path.startsWith("/ledger/")) {
      if (this.kernel === null) return refusal(404, "not_found", "this workspace does not exist");
      this.catchUp();
      return this.ledgerRoute(path.slice(8), url.searchParams);
    }
    if (this.testClock) {
      switch (path) {
        case "/test/clock":
          return this.advance(Number(url.searchParams.get("advanceMs")));
        case "/test/state":
          return this.state();
        case "/test/ledger-fault":
          this.ledgerFault = url.searchParams.get("on") === "1";
          return json(200, { ok: true, ledgerFault: this.ledgerFault, ledgerSeq: this.ledgerSeq, seq: this.seq });
      }
    }
    return refusal(404, "not_found", `no route ${path}`);
  }

  // key adds a key's id (and role) to this workspace, or revokes one; a
  // revocation ends the key's held requests at once.
  key(what, q) {
    if (this.kernel === null) return refusal(404, "not_found", "this workspace does not exist");
    const id = q.get("id");
    if (what === "add") {
      const k = { id, role: q.get("role"), agent_did: q.get("agentDid") };
      this.sql.exec(`INSERT OR REPLACE INTO keys (id, role, agent_did) VALUES (?, ?, ?)`, k.id, k.role, k.agent_did);
      this.setMeta("keyed", 1);
      this.keys.set(id, k);
      return json(200, { ok: true });
    }
    if (!this.keys.has(id)) return refusal(404, "not_found", `no key ${JSON.stringify(id)}`);
    this.sql.exec(`DELETE FROM keys WHERE id = ?`, id);
    this.keys.delete(id);
    this.wake();
    return json(200, { ok: true, revoked: true });
  }

  // create makes the workspace. Once it has had a key it is refused
  // workspace_exists; before that, the same creation again is answered as
  // the first (its first key may have failed to be made).
  async create(name, rules) {
    if (this.rules !== null) {
      if (this.meta("keyed") === null && this.meta("name") === name && this.rules === dec.decode(rules)) {
        return json(200, { ok: true, verifier: this.meta("ledger_verifier") });
      }
      return refusal(409, "workspace_exists", "this workspace exists");
    }
    if (!name) return refusal(400, "invalid_request", "name is required");
    const secret = this.env.LEASEPLANE_LEDGER_SECRET;
    if (!secret) return unavailable("the LEASEPLANE_LEDGER_SECRET secret is not set: the ledger's signing key cannot be sealed");
    try {
      new Kernel(kernelModule).new(rules);
    } catch (err) {
      return refusal(400, "invalid_request", `rules: ${err.message}`);
    }
    // The origin never changes once the workspace exists.
    const host = this.env.LEASEPLANE_PUBLIC_HOST;
    const origin = host ? `${host}/leaseplane/${name}` : `leaseplane/${name}`;
    const { signer, verifier } = this.ledger.keygen(origin);
    const sealed = await seal(secret, origin, signer);
    this.setMeta("name", name);
    this.setMeta("ledger_origin", origin);
    this.setMeta("ledger_verifier", verifier);
    this.setMeta("ledger_signer", sealed);
    this.setMeta("rules", dec.decode(rules));
    this.load();
    return json(200, { ok: true, verifier });
  }

  // command applies one command, logs it when it changed the machine and
  // sets the alarm, all before the answer leaves.
  command(op, body) {
    return this.answer(this.apply(op, body));
  }

  // apply applies one command and logs it when it changed the machine; it
  // returns the kernel's result, or null when the object failed (the
  // machine is then rebuilt from storage).
  apply(op, body) {
    const now = this.now();
    this.counters.commands[op] = (this.counters.commands[op] ?? 0) + 1;
    try {
      const res = this.kernel.apply(op, now, body);
      if (res.changed) this.record(op, now, body, res.events);
      return res;
    } catch (err) {
      console.error("workspace: command failed:", err && err.stack);
      this.reload();
      this.failure = err.message;
      return null;
    }
  }

  answer(res) {
    if (res === null) return unavailable(this.failure);
    const headers = res.retryAfter > 0 ? { "Retry-After": String(res.retryAfter) } : {};
    return json(res.status, dec.decode(res.answer), headers);
  }

  // held answers POST lease?waitUpToMs=N: while the answer is lease_held,
  // the object asks again on the caller's behalf whenever its machine
  // changed (a release, a lapse or revocation by alarm, a claim ending, an
  // operator's act) and shortly before the caller's own claim would end,
  // and answers the grant or any other refusal at once, or the last
  // lease_held when the time is up. The front has checked N (0 to 30000).
  async held(body, waitUpToMs, keyId) {
    this.counters.heldOpen++;
    try {
      return await this.holding(body, waitUpToMs, keyId);
    } finally {
      this.counters.heldOpen--;
      this.counters.heldAnswered++;
    }
  }

  async holding(body, waitUpToMs, keyId) {
    const deadline = Date.now() + waitUpToMs;
    for (;;) {
      if (!this.keys.has(keyId)) return refusal(401, "unauthorized", "unknown or revoked key");
      const res = this.apply("acquire", body);
      if (res === null || res.status !== 409) return this.answer(res);
      const a = JSON.parse(dec.decode(res.answer));
      const left = deadline - Date.now();
      if (a.reason !== "lease_held" || left <= 0) return this.answer(res);
      // The caller's claim lasts waitMs + 1000 ms from this refusal.
      const beforeClaimEnds = Math.max(50, a.stampede.waitMs + 1000 - 300);
      await new Promise((resolve) => {
        const t = setTimeout(resolve, Math.min(left, beforeClaimEnds));
        (this.wakers ??= []).push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  }

  record(op, now, body, events) {
    this.seq++;
    this.counters.logged++;
    this.sql.exec(`INSERT INTO log (seq, op, now_ms, body, version, semantics, events) VALUES (?, ?, ?, ?, ?, ?, ?)`,
      this.seq, op, now, blob(body), this.version, this.semantics, blob(events));
    if (now > this.last) {
      this.last = now;
      this.setMeta("clock", now);
    }
    this.catchUp();
    this.wake(); // held requests ask again: something may have freed
    if (++this.sinceSnapshot >= SNAPSHOT_EVERY) {
      this.sql.exec(`INSERT INTO snapshot (id, seq, data, version) VALUES (1, ?, ?, ?)
        ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, data = excluded.data, version = excluded.version`,
        this.seq, blob(this.kernel.snapshot()), this.version);
      // The log goes only behind both the snapshot and the ledger.
      this.sql.exec(`DELETE FROM log WHERE seq <= ?`, Math.min(this.seq, this.ledgerSeq));
      this.sinceSnapshot = 0;
    }
    this.schedule();
  }

  wake() {
    const wake = this.wakers;
    this.wakers = [];
    if (wake) for (const w of wake) w();
  }

  // catchUp writes to the ledger the events of every logged command it does
  // not hold yet (normally the one just logged), each command's entries in
  // one storage transaction with the ledger's position. Writing the ledger
  // is best effort: a failure never fails the command; it is logged, and
  // the next command, alarm or ledger request tries again from the log, so
  // no event is missing or written twice.
  catchUp() {
    if (this.ledgerSeq >= this.seq) return;
    const rows = this.sql.exec(`SELECT seq, now_ms, events FROM log WHERE seq > ? ORDER BY seq`, this.ledgerSeq).toArray();
    try {
      for (const row of rows) {
        this.ctx.storage.transactionSync(() => {
          if (this.ledgerFault) throw new Error("injected ledger fault (test)");
          if (row.events !== null) this.appendEvents(new Uint8Array(row.events), row.seq, row.now_ms);
          this.ledgerSeq = row.seq;
          this.setMeta("ledger_seq", row.seq);
        });
      }
    } catch (err) {
      console.error("workspace: the ledger is behind the log:", err && err.message);
      this.counters.ledgerFailures++;
      this.ledger = new Ledger(ledgerModule, (indexes) => this.readHashes(indexes));
      this.ledgerSize = this.storedSize();
      this.openRow = null;
      this.hashCount = this.sql.exec(`SELECT count(*) AS n FROM ledger_hashes`).one().n;
      this.ledgerSeq = Number(this.meta("ledger_seq") ?? 0);
    }
  }

  // appendEvents adds each event of a command (seq, applied at nowMs) to
  // the ledger: its stored hashes, and the entry to the last row, packed
  // again once per command (a full row is never written again).
  appendEvents(events, seq, nowMs) {
    if (events.length <= 2) return; // "[]"
    let row = this.openRow ?? this.lastRow();
    const put = (r) => this.sql.exec(`INSERT OR REPLACE INTO ledger_rows (first, count, data) VALUES (?, ?, ?)`,
      r.first, r.entries.length, blob(this.ledger.pack(r.entries)));
    for (const entry of this.ledger.events(events)) {
      const i = this.ledgerSize;
      const hs = this.ledger.append(i, entry);
      for (const h of hs) this.sql.exec(`INSERT INTO ledger_hashes (idx, hash) VALUES (?, ?)`, this.hashCount++, blob(h));
      if (row.entries.length === LEDGER_ROW) {
        put(row);
        row = { first: i, entries: [] };
      }
      row.entries.push({ seq, time: nowMs, data: entry });
      this.ledgerSize++;
      const ev = JSON.parse(dec.decode(entry));
      if (ev.type === "coordination.lease" && typeof ev.leaseId === "string") {
        this.sql.exec(`INSERT OR REPLACE INTO ledger_grants (lease_id, idx) VALUES (?, ?)`, ev.leaseId, i);
      }
    }
    put(row);
    this.openRow = row;
  }

  // storedSize is the number of entries the rows hold.
  storedSize() {
    return this.sql.exec(`SELECT coalesce(max(first + count), 0) AS n FROM ledger_rows`).one().n;
  }

  // lastRow is the row the next entry goes in: the last one, unpacked,
  // while it is not full.
  lastRow() {
    const r = this.sql.exec(`SELECT first, count, data FROM ledger_rows ORDER BY first DESC LIMIT 1`).toArray()[0];
    if (!r) return { first: 0, entries: [] };
    if (r.count === LEDGER_ROW) return { first: r.first + LEDGER_ROW, entries: [] };
    return { first: r.first, entries: this.ledger.unpack(new Uint8Array(r.data)) };
  }

  // rowEntries are the entries of the rows holding indexes [start, end),
  // as [{index, data}].
  rowEntries(start, end) {
    const out = [];
    const rows = this.sql.exec(`SELECT first, data FROM ledger_rows WHERE first >= ? AND first < ? ORDER BY first`,
      start - (start % LEDGER_ROW), end).toArray();
    for (const r of rows) {
      this.ledger.unpack(new Uint8Array(r.data)).forEach((e, k) => {
        const index = r.first + k;
        if (index >= start && index < end) out.push({ index, data: e.data });
      });
    }
    return out;
  }

  // packOldEntries packs the one-row-per-entry table of earlier builds
  // into rows, in one transaction, and drops it.
  packOldEntries() {
    const old = this.sql.exec(`SELECT count(*) AS n FROM sqlite_master WHERE type = 'table' AND name = 'ledger_entries'`).one().n;
    if (old === 0) return;
    this.ctx.storage.transactionSync(() => {
      const all = this.sql.exec(`SELECT idx, data FROM ledger_entries ORDER BY idx`).toArray();
      for (let first = 0; first < all.length; first += LEDGER_ROW) {
        const part = all.slice(first, first + LEDGER_ROW);
        part.forEach((r, k) => {
          if (r.idx !== first + k) throw new Error(`the ledger's old entry ${r.idx} is out of place`);
        });
        const entries = part.map((r) => ({ seq: 0, time: 0, data: new Uint8Array(r.data) }));
        this.sql.exec(`INSERT INTO ledger_rows (first, count, data) VALUES (?, ?, ?)`, first, entries.length, blob(this.ledger.pack(entries)));
      }
      this.sql.exec(`DROP TABLE ledger_entries`);
    });
  }

  readHashes(indexes) {
    const out = [];
    for (const i of indexes) {
      const row = this.sql.exec(`SELECT hash FROM ledger_hashes WHERE idx = ?`, i).toArray()[0];
      if (!row) return null;
      out.push(new Uint8Array(row.hash));
    }
    return out;
  }

  // signed is the latest signed checkpoint, signing a new one when the
  // ledger grew since (on demand).
  async signed() {
    const size = Number(this.meta("ledger_ckpt_size") ?? -1);
    if (size === this.ledgerSize) return { size, text: this.meta("ledger_ckpt") };
    const origin = this.meta("ledger_origin");
    this.signer ??= await unseal(this.env.LEASEPLANE_LEDGER_SECRET, origin, this.meta("ledger_signer"));
    const n = this.ledgerSize;
    const text = dec.decode(this.ledger.checkpoint(n, origin, this.signer));
    this.setMeta("ledger_ckpt_size", n);
    this.setMeta("ledger_ckpt", text);
    return { size: n, text };
  }

  async ledgerRoute(what, q) {
    const text = (body) => new Response(body, {
      status: 200,
      headers: { "Content-Type": "text/plain; charset=utf-8", "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store" },
    });
    // The parameters and their refusals are the server's (server/ledger).
    const bad = (name, msg) => {
      throw json(400, `{"ok":false,"reason":"invalid_request","parameter":${JSON.stringify(name)},"error":${JSON.stringify(name + " " + msg)}}`);
    };
    const param = (name, def, required) => {
      const vs = q.getAll(name);
      if (vs.length === 0) {
        if (required) bad(name, "is required");
        return def;
      }
      if (vs.length > 1) bad(name, "is given more than once");
      if (!/^(0|[1-9][0-9]{0,15})$/.test(vs[0]) || !Number.isSafeInteger(Number(vs[0]))) {
        bad(name, `must be a whole number ≥ 0 without sign or leading zeros, not ${JSON.stringify(vs[0])}`);
      }
      return Number(vs[0]);
    };
    const hashList = (hs) => `"hashes":[${hs.map((h) => `"${btoa(String.fromCharCode(...h))}"`).join(",")}]`;
    const size = this.ledgerSize;
    try {
      switch (what) {
        case "key":
          return text(this.meta("ledger_verifier") + "\n");
        case "checkpoint":
          return text((await this.signed()).text);
        case "entries": {
          const start = param("start", 0, false);
          const count = param("count", 100, false);
          if (count < 1 || count > 1000) bad("count", "must be 1 to 1000");
          if (start > size) bad("start", `is past the ledger's end (it has ${size} entries)`);
          const parts = this.rowEntries(start, Math.min(start + count, size)).map(({ index, data }) =>
            `{"index":${index},"data":"${btoa(String.fromCharCode(...data))}","event":${dec.decode(data)}}`);
          return json(200, `{"entries":[${parts.join(",")}]}`);
        }
        case "proof": {
          const index = param("index", 0, true);
          const n = param("size", size, false);
          if (n > size) bad("size", `is larger than the ledger (${size} entries)`);
          if (index >= n) bad("index", `must be below size (${n})`);
          return json(200, `{"index":${index},"size":${n},${hashList(this.ledger.inclusion(n, index))}}`);
        }
        case "consistency": {
          const from = param("from", 0, true);
          const to = param("to", size, false);
          if (to > size) bad("to", `is larger than the ledger (${size} entries)`);
          if (from > to) bad("from", `must not be above to (${to})`);
          return json(200, `{"from":${from},"to":${to},${hashList(this.ledger.consistency(to, from))}}`);
        }
        case "receipt": {
          const vs = q.getAll("leaseId");
          if (vs.length !== 1 || vs[0] === "" || enc.encode(vs[0]).length > 256) bad("leaseId", "is required, once, 1-256 bytes");
          const id = vs[0];
          const g = this.sql.exec(`SELECT idx FROM ledger_grants WHERE lease_id = ?`, id).toArray()[0];
          const row = g && this.rowEntries(g.idx, g.idx + 1)[0];
          if (!row) return refusal(404, "not_found", `no grant of lease ${id} in this workspace's ledger`);
          const ck = await this.signed();
          return text(this.ledger.receipt(row.index, ck.size, enc.encode(ck.text), row.data));
        }
      }
    } catch (err) {
      if (err instanceof Response) return err;
      console.error("workspace: ledger route failed:", err && err.stack);
      return refusal(503, "unavailable", `the ledger cannot answer now (${err.message}); leases are not affected; retry`, { "Retry-After": "1" });
    }
    return refusal(404, "not_found", `no ledger route /api/v1/ledger/${what}; the routes are key, checkpoint, entries, proof, consistency and receipt`);
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
    this.catchUp();
    this.alarmAt = null;
    this.counters.alarms++;
    this.apply("tick", EMPTY);
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

  // advance moves the object's clock by ms (the test clock). A negative
  // move makes the clock stand still at the last time it recorded (it never
  // goes back) until real time catches up: no alarm fires meanwhile.
  advance(ms) {
    if (!Number.isSafeInteger(ms)) return refusal(400, "invalid_request", "advanceMs must be a whole number of ms");
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
      ledger: { entries: this.ledgerSize, rows: this.sql.exec(`SELECT count(*) AS n FROM ledger_rows`).one().n },
    });
  }
}
