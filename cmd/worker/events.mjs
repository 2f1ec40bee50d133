// events.mjs serves a workspace's events stream (GET
// /api/v1/acp/coordination/events) from its Durable Object, as Server-Sent
// Events in the server's form: first `event: ready` with the index the
// next event will have, then each event as `id: <ledger index>`, `event:
// <type>`, `data: <the ledger entry's bytes>`. The stream reads the
// workspace's ledger (book.mjs): each stream keeps the index of the next
// entry it sends, and the object pumps every stream each time the ledger
// grows (push, after every catch-up), so the events are the ledger's
// entries, in its order, with its indexes, and a stream never holds more
// than a page of them in memory: a slow client waits on its stream's
// backpressure while the entries wait in storage. A resume (Last-Event-ID,
// the front's `after`) starts at the entry after it; 410 `gone` when
// retention dropped that entry's body. The front checked the key, its
// role, the filters and an agent key's actorDid (api.ParseEvents).
import { refusal, enc, dec } from "./respond.mjs";

const PING_MS = 15000; // a keep-alive comment, as the server sends
const PAGE = 256; // the entries a stream reads at a time

const bytes = (parts) => {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
};

export class Streams {
  constructor(ws) {
    this.ws = ws;
    this.subs = new Set();
  }

  // open answers the stream of one request: q has after (-1: from now),
  // actorDid and prefix, keyId the key's id (a revocation ends its
  // streams).
  open(q, keyId) {
    const ws = this.ws;
    ws.catchUp();
    const book = ws.book, next = book.size, after = Number(q.get("after") ?? "-1");
    if (!Number.isSafeInteger(after) || after < -1) return refusal(400, "invalid_request", "after must be a ledger index or -1");
    if (after >= next) {
      return refusal(400, "invalid_request", `Last-Event-ID ${after} is not an event of this workspace (its newest is ${next - 1})`);
    }
    if (after >= 0 && after + 1 < book.dropped()) return this.gone(after + 1);
    const { readable, writable } = new TransformStream();
    const sub = { keyId, actor: q.get("actorDid") ?? "", prefix: q.get("prefix") ?? "", next: after >= 0 ? after + 1 : next, writer: writable.getWriter() };
    this.subs.add(sub);
    this.send(sub, enc.encode(`retry: 1000\nevent: ready\ndata: {"ok":true,"next":${next}}\n\n`));
    sub.ping = setInterval(() => this.send(sub, enc.encode(": ping\n\n")), PING_MS);
    this.pump(sub);
    return new Response(readable, {
      status: 200,
      headers: { "Content-Type": "text/event-stream", "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff", "X-Accel-Buffering": "no" },
    });
  }

  gone(index) {
    return refusal(410, "gone", `entry ${index} was dropped after its retention period, once exported (entries from ${this.ws.book.dropped()} are kept)`);
  }

  // push sends every stream the entries the ledger has gained.
  push() {
    for (const sub of this.subs) this.pump(sub);
  }

  // revoke ends the streams of a revoked key, as the server's next check
  // of the key does.
  revoke(keyId) {
    for (const sub of this.subs) {
      if (sub.keyId === keyId) this.end(sub, `{"ok":false,"reason":"unauthorized","error":"unknown or revoked key"}`);
    }
  }

  // pump writes sub the entries from its next on, a page at a time, each
  // page once the one before was read; one pump runs per stream.
  async pump(sub) {
    if (sub.pumping || !this.subs.has(sub)) return;
    sub.pumping = true;
    try {
      while (this.subs.has(sub) && sub.next < this.ws.book.size) {
        const book = this.ws.book;
        if (sub.next < book.dropped()) {
          this.end(sub, await this.gone(sub.next).text());
          break;
        }
        const end = Math.min(sub.next + PAGE, book.size);
        const parts = [];
        for (const { index, data } of this.entries(book, sub.next, end)) {
          const ev = JSON.parse(dec.decode(data));
          if (sub.actor && ev.actorDid !== sub.actor) continue;
          if (sub.prefix && (typeof ev.resource !== "string" || !ev.resource.startsWith(sub.prefix))) continue;
          parts.push(enc.encode(`id: ${index}\nevent: ${ev.type}\ndata: `), data, enc.encode("\n\n"));
        }
        sub.next = end;
        if (parts.length) await sub.writer.write(bytes(parts));
      }
    } catch (err) {
      this.close(sub); // the client went away, or the stream failed
    } finally {
      sub.pumping = false;
    }
  }

  // entries are the ledger's entries [start, end) as [{index, data}]: from
  // the row in memory when it holds them, else from storage.
  entries(book, start, end) {
    const row = book.openRow;
    if (row && start >= row.first) return row.entries.slice(start - row.first, end - row.first).map((e, k) => ({ index: start + k, data: e.data }));
    return book.rowEntries(start, end);
  }

  send(sub, chunk) {
    sub.writer.write(chunk).catch(() => this.close(sub));
  }

  // end writes an end event (its data a refusal's JSON) and closes.
  end(sub, refusalJSON) {
    if (!this.subs.has(sub)) return;
    this.send(sub, enc.encode(`event: end\ndata: ${refusalJSON}\n\n`));
    this.close(sub);
  }

  close(sub) {
    if (!this.subs.delete(sub)) return;
    clearInterval(sub.ping);
    sub.writer.close().catch(() => {});
  }
}
