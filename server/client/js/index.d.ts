// Types of the leaseplane client (index.js).

export declare const MAX_HOLD_MS: number;
export declare const RENEW_EVERY_MS: number;
export declare const LEASE_TTL_MS: number;

export type Mode = 'read' | 'write' | 'delete';

/** A granted lease; pass fence downstream as a fencing token. */
export interface Lease {
  id: string;
  resource: string;
  holder: string;
  mode: Mode;
  fence: number;
  grantedAtMs: number;
  expiresAtMs: number;
}

/** One event of the events stream: id is its ledger index, data the bytes of its ledger entry. */
export interface LeaseEvent {
  id: number;
  type: string;
  data: string;
  atMs: number;
  actorDid: string;
  resource?: string;
  class?: string;
  leaseId?: string;
  fence?: number;
  mode?: Mode;
  expiresAtMs?: number;
  trustDelta?: number;
}

export interface PlaneOptions {
  /** Default: LEASEPLANE_URL, else http://127.0.0.1:8080. */
  url?: string;
  /** Default: LEASEPLANE_KEY. */
  key?: string;
  fetch?: typeof fetch;
}

export interface AcquireRequest {
  resource: string;
  actorDid: string;
  /** Omitted: a new lease asks write, a renewal keeps its mode. */
  mode?: Mode;
  /** Wait this long without polling (held requests, several past 30 s); Infinity for no limit. */
  waitUpToMs?: number;
  signal?: AbortSignal;
}

export interface ReleaseRequest {
  resource: string;
  actorDid: string;
  leaseId?: string;
  signal?: AbortSignal;
}

export interface WaitRequest {
  prefix?: string;
  after?: string;
  limit?: number;
  signal?: AbortSignal;
}

export interface EventsRequest {
  actorDid?: string;
  prefix?: string;
  /** Resume after this event id. */
  after?: number;
  signal?: AbortSignal;
  /** Called once the stream is live, with the id the next new event will have. */
  onReady?: (next: number) => void;
}

export interface LeaseRequest {
  resource: string;
  actorDid: string;
  mode?: Mode;
  /** How long to wait for the lease; default without limit. */
  timeoutMs?: number;
  renewEveryMs?: number;
  signal?: AbortSignal;
}

export interface WaitAnswer {
  ok: true;
  nowMs: number;
  queues: Array<{
    resource: string;
    class: string;
    holders: Lease[];
    waiters: Array<{ actorDid: string; mode: Mode; admitted: boolean; sinceMs: number; lapsesAtMs: number; [k: string]: unknown }>;
  }>;
  deadlocks: Array<{ actorDid: string; resource: string; holder: string; waitingOn: string; atMs: number }>;
  next?: string;
}

export declare class Plane {
  constructor(options?: PlaneOptions);
  readonly url: string;
  acquire(req: AcquireRequest): Promise<Lease>;
  release(req: ReleaseRequest): Promise<boolean>;
  wait(req?: WaitRequest): Promise<WaitAnswer>;
  events(req?: EventsRequest): AsyncGenerator<LeaseEvent, void, undefined>;
  /** Holds a lease around fn; signal aborts within a second of a loss; throws LeaseLost after fn if lost. */
  withLease<T>(req: LeaseRequest, fn: (lease: Lease, signal: AbortSignal) => Promise<T> | T): Promise<T>;
}

export declare class LeaseplaneError extends Error {
  reason: string;
  status: number;
  answer: Record<string, unknown>;
  retryAfter: number | null;
}
export declare class LeaseHeld extends LeaseplaneError {
  holder: string | null;
  holders: string[];
  claimants: string[];
  waitMs: number;
  admitted: string[];
}
export declare class Deadlock extends LeaseplaneError {
  holder: string | null;
  waitingOn: string | null;
  cycle: string[];
}
export declare class LimitExceeded extends LeaseplaneError {
  limit: string | null;
  max: number | null;
}
/** The refusals that carry nothing beyond their reason: one class each at run time, alike in type. */
declare class PlainRefusal extends LeaseplaneError {}
export {
  PlainRefusal as Suspended, PlainRefusal as Cancelled, PlainRefusal as StaleLease, PlainRefusal as Unauthorized,
  PlainRefusal as ActorMismatch, PlainRefusal as Forbidden, PlainRefusal as InvalidRequest, PlainRefusal as Unavailable,
  PlainRefusal as NotFound, PlainRefusal as AgentBusy, PlainRefusal as Gone,
};
export declare class PlaneUnreachable extends LeaseplaneError {}
export declare class LeaseLost extends LeaseplaneError {}
export declare function errorOf(status: number, answer: Record<string, unknown>, retryAfter?: number | null): LeaseplaneError;
