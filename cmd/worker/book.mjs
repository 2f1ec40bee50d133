// book.mjs keeps a workspace's ledger in its Durable Object's SQLite
// storage: every event the kernel emitted, as an entry with its bytes
// exactly as emitted, packed 32 to a row as the server packs them
// (kernel/ledger/rows, through the ledger module; the last row grows until
// full), derived from the command log (each log row keeps its command's
// events); the stored tree hashes (tlog's layout); the grant entry of each
// lease; and, in meta, the origin, the verifier key, the signing key sealed
// with the LEASEPLANE_LEDGER_SECRET binding, and the latest signed
// checkpoint. Hashes, proofs and signatures come from kernel/ledger built
// as a wasm module (cmd/worker/ledger). It answers the ledger's routes.
import ledgerModule from "./ledger.wasm";
import { Ledger, seal, unseal } from "./ledger.mjs";
import { json, text, refusal, blob, enc, dec } from "./respond.mjs";

const ROW = 32; // the entries of a full ledger row (kernel/ledger/rows.Size)

export class Book {
  // meta(k) reads and setMeta(k, v) writes the object's meta table.
  constructor(ctx, env, meta, setMeta) {
    Object.assign(this, { ctx, env, sql: ctx.storage.sql, meta, setMeta });
    this.sql.exec(`CREATE TABLE IF NOT EXISTS ledger_rows (first INTEGER PRIMARY KEY, count INTEGER NOT NULL, data BLOB NOT NULL)`);
    this.sql.exec(`CREATE TABLE IF NOT EXISTS ledger_hashes (idx INTEGER PRIMARY KEY, hash BLOB NOT NULL)`);
    this.sql.exec(`CREATE TABLE IF NOT EXISTS ledger_grants (lease_id TEXT PRIMARY KEY, idx INTEGER NOT NULL)`);
    this.open();
    this.semantics = this.ledger.semantics();
    this.packOldEntries();
  }

  // open (again, after a failed write) reads the ledger's position.
  open() {
    this.ledger = new Ledger(ledgerModule, (indexes) => this.readHashes(indexes));
    this.size = Math.max(this.sql.exec(`SELECT coalesce(max(first + count), 0) AS n FROM ledger_rows`).one().n, this.dropped());
    this.openRow = null;
    this.hashCount = this.sql.exec(`SELECT count(*) AS n FROM ledger_hashes`).one().n;
    this.seq = Number(this.meta("ledger_seq") ?? 0);
  }

  // create makes the ledger's origin and signing key for workspace name.
  async create(name, secret) {
    const host = this.env.LEASEPLANE_PUBLIC_HOST;
    const origin = host ? `${host}/leaseplane/${name}` : `leaseplane/${name}`;
    const { signer, verifier } = this.ledger.keygen(origin);
    this.setMeta("ledger_origin", origin);
    this.setMeta("ledger_verifier", verifier);
    this.setMeta("ledger_signer", await seal(secret, origin, signer));
    return verifier;
  }

  // catchUp writes to the ledger the events of every logged command it does
  // not hold yet (normally the one just logged), each command's entries in
  // one storage transaction with the ledger's position. It is best effort:
  // a failure never fails the command; the next command, alarm or ledger
  // request tries again from the log, so no event is missing or twice.
  catchUp(upTo) {
    if (this.seq >= upTo) return true;
    const rows = this.sql.exec(`SELECT seq, now_ms, events FROM log WHERE seq > ? ORDER BY seq`, this.seq).toArray();
    try {
      for (const row of rows) {
        this.ctx.storage.transactionSync(() => {
          if (this.fault) throw new Error("injected ledger fault (test)");
          if (row.events !== null) this.append(new Uint8Array(row.events), row.seq, row.now_ms);
          this.seq = row.seq;
          this.setMeta("ledger_seq", row.seq);
        });
      }
      return true;
    } catch (err) {
      console.error("workspace: the ledger is behind the log:", err && err.message);
      this.open();
      return false;
    }
  }

  // append adds each event of a command (seq, applied at nowMs) to the
  // ledger: its stored hashes, and the entry to the last row, packed again
  // once per command (a full row is never written again).
  append(events, seq, nowMs) {
    if (events.length <= 2) return; // "[]"
    let row = this.openRow ?? this.lastRow();
    const put = (r) => this.sql.exec(`INSERT OR REPLACE INTO ledger_rows (first, count, data) VALUES (?, ?, ?)`,
      r.first, r.entries.length, blob(this.ledger.pack(r.entries)));
    for (const entry of this.ledger.events(events)) {
      const i = this.size;
      for (const h of this.ledger.append(i, entry)) this.sql.exec(`INSERT INTO ledger_hashes (idx, hash) VALUES (?, ?)`, this.hashCount++, blob(h));
      if (row.entries.length === ROW) {
        put(row);
        row = { first: i, entries: [] };
      }
      row.entries.push({ seq, time: nowMs, data: entry });
      this.size++;
      const ev = JSON.parse(dec.decode(entry));
      if (ev.type === "coordination.lease" && typeof ev.leaseId === "string") {
        this.sql.exec(`INSERT OR REPLACE INTO ledger_grants (lease_id, idx) VALUES (?, ?)`, ev.leaseId, i);
      }
    }
    put(row);
    this.openRow = row;
  }

  // lastRow is the row the next entry goes in: the last one, unpacked,
  // while it is not full.
  lastRow() {
    const r = this.sql.exec(`SELECT first, count, data FROM ledger_rows ORDER BY first DESC LIMIT 1`).toArray()[0];
    if (!r) return { first: this.size, entries: [] }; // none yet, or retention dropped every row
    if (r.count === ROW) return { first: r.first + ROW, entries: [] };
    return { first: r.first, entries: this.ledger.unpack(new Uint8Array(r.data)) };
  }

  // rowEntries are the entries of the rows holding indexes [start, end),
  // as [{index, data}].
  rowEntries(start, end) {
    const out = [];
    const rows = this.sql.exec(`SELECT first, data FROM ledger_rows WHERE first >= ? AND first < ? ORDER BY first`,
      start - (start % ROW), end).toArray();
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
      for (let first = 0; first < all.length; first += ROW) {
        const part = all.slice(first, first + ROW);
        part.forEach((r, k) => {
          if (r.idx !== first + k) throw new Error(`the ledger's old entry ${r.idx} is out of place`);
        });
        const entries = part.map((r) => ({ seq: 0, time: 0, data: new Uint8Array(r.data) }));
        this.sql.exec(`INSERT INTO ledger_rows (first, count, data) VALUES (?, ?, ?)`, first, entries.length, blob(this.ledger.pack(entries)));
      }
      this.sql.exec(`DROP TABLE ledger_entries`);
    });
    this.open();
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
    if (size === this.size) return { size, text: this.meta("ledger_ckpt") };
    const origin = this.meta("ledger_origin");
    this.signer ??= await unseal(this.env.LEASEPLANE_LEDGER_SECRET, origin, this.meta("ledger_signer"));
    const n = this.size;
    const ck = dec.decode(this.ledger.checkpoint(n, origin, this.signer));
    this.setMeta("ledger_ckpt_size", n);
    this.setMeta("ledger_ckpt", ck);
    return { size: n, text: ck };
  }

  // retain drops the bodies of whole rows of entries that an export
  // covered (POST exported) once their last entry is older than the
  // binding LEASEPLANE_LEDGER_RETENTION_MS (unset or 0: kept forever); their
  // tree hashes, the grants' look-up and the checkpoints stay. now is the
  // object's clock.
  retain(now) {
    const ms = Number(this.env.LEASEPLANE_LEDGER_RETENTION_MS ?? 0);
    const exported = Number(this.meta("ledger_exported") ?? 0);
    let dropped = this.dropped();
    if (!(ms > 0) || exported < dropped + ROW) return;
    const rows = this.sql.exec(`SELECT first, data FROM ledger_rows WHERE count = ? AND first >= ? AND first + ? <= ? ORDER BY first`,
      ROW, dropped, ROW, exported).toArray();
    for (const r of rows) {
      if (this.ledger.unpack(new Uint8Array(r.data)).at(-1).time > now - ms) break;
      this.sql.exec(`DELETE FROM ledger_rows WHERE first = ?`, r.first);
      dropped = r.first + ROW;
    }
    this.setMeta("ledger_dropped", dropped);
  }

  // dropped is the first entry whose body retention keeps.
  dropped() {
    return Number(this.meta("ledger_dropped") ?? 0);
  }

  // route answers /api/v1/ledger/<what> (POST for exported, GET for the
  // others: the front checked the method and the key's role); the
  // parameters and their refusals are the server's (server/ledger).
  async route(what, q, now) {
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
    const size = this.size;
    const gone = (i) => refusal(410, "gone", `entry ${i} was dropped after its retention period, once exported (entries from ${this.dropped()} are kept)` +
      "; its tree hash is kept, so proofs and checkpoints still check");
    try {
      switch (what) {
        case "exported": {
          const n = param("size", 0, true);
          const root = q.getAll("root");
          if (root.length !== 1) bad("root", "is required, once: the base64 root hash of the tree of that size");
          if (!/^[A-Za-z0-9+/]{43}=$/.test(root[0])) bad("root", "is not a base64 hash of 32 bytes");
          if (n > size || n === 0) bad("size", `must be 1 to the ledger's size (${size} entries)`);
          if (!this.ledger.rootIs(n, root[0])) bad("root", `is not the root of this ledger's tree of size ${n}`);
          this.setMeta("ledger_exported", Math.max(n, Number(this.meta("ledger_exported") ?? 0)));
          this.retain(now);
          const ms = Number(this.env.LEASEPLANE_LEDGER_RETENTION_MS ?? 0);
          return json(200, `{"ok":true,"exported":${this.meta("ledger_exported")},"dropped":${this.dropped()},"retentionMs":${ms > 0 ? ms : 0}}`);
        }
        case "key":
          return text(this.meta("ledger_verifier") + "\n");
        case "checkpoint":
          return text((await this.signed()).text);
        case "entries": {
          const start = param("start", 0, false);
          const count = param("count", 100, false);
          if (count < 1 || count > 1000) bad("count", "must be 1 to 1000");
          if (start > size) bad("start", `is past the ledger's end (it has ${size} entries)`);
          if (start < this.dropped()) return gone(start);
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
          const g = this.sql.exec(`SELECT idx FROM ledger_grants WHERE lease_id = ?`, vs[0]).toArray()[0];
          if (g && g.idx < this.dropped()) return gone(g.idx);
          const row = g && this.rowEntries(g.idx, g.idx + 1)[0];
          if (!row) return refusal(404, "not_found", `no grant of lease ${vs[0]} in this workspace's ledger`);
          const ck = await this.signed();
          return text(this.ledger.receipt(row.index, ck.size, enc.encode(ck.text), row.data));
        }
      }
    } catch (err) {
      if (err instanceof Response) return err;
      console.error("workspace: ledger route failed:", err && err.stack);
      return refusal(503, "unavailable", `the ledger cannot answer now (${err.message}); leases are not affected; retry`, { "Retry-After": "1" });
    }
    return refusal(404, "not_found", `no ledger route /api/v1/ledger/${what}; the routes are key, checkpoint, entries, proof, consistency, receipt and exported`);
  }
}
