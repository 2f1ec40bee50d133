import { Plane } from "leaseplane";

const plane = new Plane(); // reads LEASEPLANE_URL and LEASEPLANE_KEY
const lease = await plane.acquire({ resource: "lock:deploy/production", actorDid: "did:web:acme.example:agent:release" });
try {
  console.log(`holding ${lease.id}, fence ${lease.fence}`);
  // ... deploy, passing lease.fence downstream ...
} finally {
  console.log("released:", await plane.release({ resource: lease.resource, actorDid: lease.holder, leaseId: lease.id }));
}
