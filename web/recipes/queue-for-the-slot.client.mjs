import { Deadlock, LeaseHeld, Plane } from "leaseplane";

const plane = new Plane(); // reads LEASEPLANE_URL and LEASEPLANE_KEY
const ask = { resource: "lock:deploy/production", actorDid: "did:web:acme.example:agent:cost", timeoutMs: 300_000 };
try {
  // Waits in the queue without polling (held requests), renews the lease
  // every 10 s while the function runs, and releases it by its id at the end.
  await plane.withLease(ask, async (lease, signal) => {
    console.log(`deploying with fence ${lease.fence}`);
    // ... deploy, passing lease.fence downstream; stop when signal aborts ...
  });
} catch (e) {
  if (e instanceof LeaseHeld) throw new Error(`gave up after 300 s: still held by ${e.holder}`);
  if (e instanceof Deadlock) throw new Error(`deadlock: release what you hold first (${e.holder} waits on ${e.waitingOn})`);
  throw e;
}
