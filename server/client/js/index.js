// leaseplane: the JavaScript client of the leaseplane lease plane, on fetch
// (Node 20 and later, browsers, Workers). Types are in index.d.ts.

export const MAX_HOLD_MS = 30000; // the longest the plane holds one request
export const RENEW_EVERY_MS = 10000; // a third of a lease's lifetime
export const LEASE_TTL_MS = 30000;

const ENDS = new Set(['coordination.release', 'coordination.expire', 'coordination.revoke']);

/**
 * A refusal of the plane, or a failure to reach it. A subclass's static
 * fields(answer) gives the fields it reads from the answer.
 */
export class LeaseplaneError extends Error {
  constructor(message, { status = 0, answer = {}, retryAfter = null, reason } = {}) {
    super(message);
    this.name = new.target.name;
    this.status = status;
    this.answer = answer;
    this.retryAfter = retryAfter;
    this.reason = answer.reason ?? reason ?? new.target.reason ?? 'error';
    Object.assign(this, new.target.fields?.(answer));
  }
}
export class LeaseHeld extends LeaseplaneError {
  static reason = 'lease_held';
  static fields = (a) => ({
    holder: a.holder ?? null, holders: a.holders ?? [], claimants: a.claimants ?? [],
    waitMs: a.stampede?.waitMs ?? 0, admitted: a.stampede?.admitted ?? [],
  });
}
export class Deadlock extends LeaseplaneError {
  static reason = 'deadlock';
  static fields = (a) => ({ holder: a.holder ?? null, waitingOn: a.waitingOn ?? null, cycle: a.cycle ?? [] });
}
export class LimitExceeded extends LeaseplaneError {
  static reason = 'limit_exceeded';
  static fields = (a) => ({ limit: a.limit ?? null, max: a.max ?? null });
}
// The refusals that carry nothing beyond their reason, one class each.
const plain = Object.fromEntries(Object.entries({
  Suspended: 'suspended', Cancelled: 'cancelled', StaleLease: 'stale_lease', Unauthorized: 'unauthorized',
  ActorMismatch: 'actor_mismatch', Forbidden: 'forbidden', InvalidRequest: 'invalid_request',
  Unavailable: 'unavailable', NotFound: 'not_found', AgentBusy: 'agent_busy', Gone: 'gone',
}).map(([name, reason]) => [name, { [name]: class extends LeaseplaneError { static reason = reason; } }[name]]));
export const {
  Suspended, Cancelled, StaleLease, Unauthorized, ActorMismatch, Forbidden, InvalidRequest, Unavailable, NotFound, AgentBusy, Gone,
} = plain;
// Not the plane's answers: the client's own.
export class PlaneUnreachable extends LeaseplaneError { static reason = 'unreachable'; }
export class LeaseLost extends LeaseplaneError { static reason = 'lost'; }

const byReason = Object.fromEntries([LeaseHeld, Deadlock, LimitExceeded, ...Object.values(plain)].map((c) => [c.reason, c]));

/** errorOf is the error for a refusal answer. */
export function errorOf(status, answer, retryAfter = null) {
  const reason = String(answer?.reason ?? '');
  const Cls = byReason[reason] ?? LeaseplaneError;
  let msg = String(answer?.error || reason || `HTTP ${status}`);
  if (reason && !msg.includes(reason)) msg = `${reason}: ${msg}`;
  return new Cls(msg, { status, answer: answer ?? {}, retryAfter });
}

function leaseOf(l) {
  return {
    id: l.id, resource: l.resource, holder: l.holder, mode: l.mode, fence: l.fence,
    grantedAtMs: l.grantedAtMs, expiresAtMs: l.expiresAtMs,
  };
}

const sleep = (ms, signal) => new Promise((resolve) => {
  if (signal?.aborted) return resolve();
  const t = setTimeout(done, ms);
  function done() { clearTimeout(t); signal?.removeEventListener('abort', done); resolve(); }
  signal?.addEventListener('abort', done, { once: true });
});

/** Plane is a client of one lease plane with one key. */
export class Plane {
  constructor({ url, key, fetch: f } = {}) {
    const env = globalThis.process?.env ?? {};
    this.url = String(url ?? env.LEASEPLANE_URL ?? 'http://127.0.0.1:8080').replace(/\/+$/, '');
    this.key = key ?? env.LEASEPLANE_KEY ?? '';
    this.fetch = f ?? globalThis.fetch.bind(globalThis);
  }

  headers(extra = {}) {
    const h = { Accept: 'application/json', ...extra };
    if (this.key) h.Authorization = `Bearer ${this.key}`;
    return h;
  }

  async request(method, path, body, signal) {
    let resp;
    try {
      resp = await this.fetch(this.url + path, {
        method, signal,
        headers: this.headers(body === undefined ? {} : { 'Content-Type': 'application/json' }),
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (e) {
      if (signal?.aborted) throw e;
      throw new PlaneUnreachable(`could not reach the plane at ${this.url}: ${e.cause?.message ?? e.message}`);
    }
    const text = await resp.text();
    let answer;
    try { answer = JSON.parse(text); } catch { answer = null; }
    if (answer === null || typeof answer !== 'object') {
      throw new LeaseplaneError(`${method} ${path}: HTTP ${resp.status} answered no JSON object: ${text.slice(0, 200)}`, { status: resp.status });
    }
    const ra = resp.headers.get('Retry-After');
    if (resp.status !== 200 || answer.ok !== true) {
      throw errorOf(resp.status, answer, ra === null ? null : Number(ra));
    }
    return answer;
  }

  /**
   * acquire takes (or renews) a lease. With waitUpToMs the plane holds the
   * request until the lease is free for this agent (several held requests
   * when longer than 30 s); LeaseHeld is thrown only once the time is up.
   */
  async acquire({ resource, actorDid, mode, waitUpToMs = 0, signal } = {}) {
    const body = { resource, actorDid };
    if (mode != null) body.mode = mode;
    if (!(waitUpToMs >= 0)) throw new RangeError(`waitUpToMs ${waitUpToMs} is not 0 or more`);
    const deadline = Date.now() + waitUpToMs;
    for (;;) {
      const hold = waitUpToMs > 0 ? Math.max(0, Math.min(deadline - Date.now(), MAX_HOLD_MS)) : 0;
      const path = '/api/v1/acp/coordination/lease' + (hold > 0 ? `?waitUpToMs=${Math.floor(hold)}` : '');
      const sent = Date.now();
      try {
        return leaseOf((await this.request('POST', path, body, signal)).lease);
      } catch (e) {
        const left = deadline - Date.now();
        if (!(e instanceof LeaseHeld || e instanceof Unavailable) || waitUpToMs <= 0 || left <= 0 || signal?.aborted) throw e;
        let pause;
        if (e instanceof Unavailable) pause = (e.retryAfter || 1) * 1000;
        else if (Date.now() - sent >= hold) pause = 0; // held to its end: ask again
        else pause = e.waitMs || 50; // answered early: follow the back-off
        if (pause > 0) await sleep(Math.min(pause, left), signal);
      }
    }
  }

  /** release gives back the agent's lease (only leaseId, when given); true when one was released. */
  async release({ resource, actorDid, leaseId, signal } = {}) {
    const body = { resource, actorDid };
    if (leaseId != null) body.leaseId = leaseId;
    return Boolean((await this.request('POST', '/api/v1/acp/coordination/release', body, signal)).released);
  }

  /** wait answers the queues and the recent deadlocks. */
  async wait({ prefix, after, limit, signal } = {}) {
    const q = new URLSearchParams();
    if (prefix != null) q.set('prefix', prefix);
    if (after != null) q.set('after', after);
    if (limit != null) q.set('limit', String(limit));
    const qs = q.toString();
    return this.request('GET', '/api/v1/acp/coordination/wait' + (qs ? '?' + qs : ''), undefined, signal);
  }

  /**
   * events yields the workspace's events as they are committed (an agent
   * key: its own agent's), from now on or after event id `after`, until
   * signal aborts. onReady(next) is called once the stream is live.
   */
  async *events({ actorDid, prefix, after, signal, onReady } = {}) {
    const q = new URLSearchParams();
    if (actorDid != null) q.set('actorDid', actorDid);
    if (prefix != null) q.set('prefix', prefix);
    const qs = q.toString();
    const extra = { Accept: 'text/event-stream' };
    if (after != null) extra['Last-Event-ID'] = String(after);
    let resp;
    try {
      resp = await this.fetch(this.url + '/api/v1/acp/coordination/events' + (qs ? '?' + qs : ''), { headers: this.headers(extra), signal });
    } catch (e) {
      if (signal?.aborted) return;
      throw new PlaneUnreachable(`could not reach the plane at ${this.url}: ${e.cause?.message ?? e.message}`);
    }
    if (resp.status !== 200) {
      const text = await resp.text();
      let answer;
      try { answer = JSON.parse(text); } catch { answer = { error: text.slice(0, 200) }; }
      throw errorOf(resp.status, answer);
    }
    const reader = resp.body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    let id = null, type = '', data = null;
    try {
      for (;;) {
        let chunk;
        try {
          chunk = await reader.read();
        } catch (e) {
          if (signal?.aborted) return;
          throw new PlaneUnreachable(`the events stream of ${this.url} was cut: ${e.message}`);
        }
        if (chunk.done) {
          if (signal?.aborted) return;
          throw new PlaneUnreachable(`the events stream of ${this.url} ended`);
        }
        buf += dec.decode(chunk.value, { stream: true });
        let nl;
        while ((nl = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, nl).replace(/\r$/, '');
          buf = buf.slice(nl + 1);
          if (line === '') {
            if (data !== null) {
              const fields = JSON.parse(data);
              if (type === 'ready') onReady?.(fields.next);
              else if (type === 'end') throw errorOf(0, fields);
              else if (id !== null) yield { ...fields, id: Number(id), type, data };
            }
            id = null; type = ''; data = null;
            continue;
          }
          if (line.startsWith(':')) continue;
          const c = line.indexOf(':');
          const name = c < 0 ? line : line.slice(0, c);
          let value = c < 0 ? '' : line.slice(c + 1);
          if (value.startsWith(' ')) value = value.slice(1);
          if (name === 'id') id = value;
          else if (name === 'event') type = value;
          else if (name === 'data') data = data === null ? value : data + '\n' + value;
        }
      }
    } finally {
      reader.cancel().catch(() => {});
    }
  }

  /**
   * withLease holds a lease around fn(lease, signal): it waits for the
   * lease (timeoutMs, default without limit), renews it every
   * renewEveryMs, watches the events stream and aborts signal within a
   * second of a loss (revoked, expired, or the plane unreachable until the
   * lease lapsed), releases the lease by id when fn ends, and returns fn's
   * result; a lost lease throws LeaseLost once fn has returned.
   */
  async withLease({ resource, actorDid, mode, timeoutMs, renewEveryMs = RENEW_EVERY_MS, signal: outer } = {}, fn) {
    const stop = new AbortController();
    const lost = new AbortController();
    const onOuter = () => stop.abort();
    outer?.addEventListener('abort', onOuter, { once: true });
    let lease = null;
    let why = null;
    const ended = new Map();
    const lose = (reason) => {
      if (why !== null) return;
      why = reason;
      lost.abort(new LeaseLost(`lost the lease on ${resource}: ${reason}`));
      stop.abort();
    };
    const seen = (e) => {
      if (e.resource !== resource || !ENDS.has(e.type) || !e.leaseId) return;
      const reason = e.type === 'coordination.revoke' ? `the plane revoked it (an operator suspended ${e.actorDid})`
        : e.type === 'coordination.expire' ? 'it expired: no renewal reached the plane in time'
          : `it was released by another client of ${e.actorDid}`;
      if (lease && e.leaseId === lease.id) lose(reason);
      else if (ended.size < 64) ended.set(e.leaseId, reason);
    };
    let markReady;
    const ready = new Promise((r) => { markReady = r; });
    const watch = (async () => {
      let after;
      while (!stop.signal.aborted) {
        try {
          for await (const e of this.events({
            actorDid, prefix: resource, after, signal: stop.signal,
            onReady: (next) => { if (after === undefined && next > 0) after = next - 1; markReady(); },
          })) {
            after = e.id;
            seen(e);
          }
        } catch (e) {
          if (e instanceof LeaseplaneError && e.status === 410) after = undefined;
          else if (e instanceof LeaseplaneError && e.status !== 0 && e.status !== 503) { markReady(); return; }
        }
        markReady();
        await sleep(500, stop.signal);
      }
      markReady();
    })();
    await ready;
    try {
      lease = await this.acquire({ resource, actorDid, mode, waitUpToMs: timeoutMs ?? Infinity, signal: outer });
    } catch (e) {
      stop.abort();
      await watch;
      outer?.removeEventListener('abort', onOuter);
      await this.release({ resource, actorDid }).catch(() => {});
      throw e;
    }
    if (ended.has(lease.id)) lose(ended.get(lease.id));
    const renew = (async () => {
      const first = lease;
      let expires = Date.now() + LEASE_TTL_MS;
      let wait = renewEveryMs;
      for (;;) {
        await sleep(wait, stop.signal);
        if (stop.signal.aborted) return;
        const sent = Date.now();
        let got;
        try {
          got = await this.acquire({ resource, actorDid, mode, signal: stop.signal });
        } catch (e) {
          if (stop.signal.aborted) return;
          if (e instanceof PlaneUnreachable || e instanceof Unavailable) {
            const left = expires - Date.now();
            if (left <= 0) { lose(`could not reach the plane before the lease lapsed: ${e.message}`); return; }
            wait = Math.min(1000, left);
            continue;
          }
          lose(`renewal refused: ${e.message}`);
          return;
        }
        lease = got;
        if (got.id !== first.id || got.fence !== first.fence) {
          lose(`it lapsed and was granted again under fence ${got.fence} (was ${first.fence})`);
          return;
        }
        expires = sent + LEASE_TTL_MS;
        wait = renewEveryMs;
      }
    })();
    let result;
    try {
      result = await fn({ ...lease }, lost.signal);
    } finally {
      stop.abort();
      await Promise.all([watch, renew]);
      outer?.removeEventListener('abort', onOuter);
      await this.release({ resource, actorDid, leaseId: lease.id }).catch(() => {});
    }
    if (why !== null) throw lost.signal.reason;
    return result;
  }
}
