const API = `${process.env.LEASEPLANE_URL ?? "http://127.0.0.1:8080"}/api/v1/acp/coordination`;
const headers = {
  Authorization: `Bearer ${process.env.LEASEPLANE_KEY}`,
  "Content-Type": "application/json",
};
const who = { resource: "lock:deploy/production", actorDid: "did:web:acme.example:agent:release" };

const got = await (await fetch(`${API}/lease`, { method: "POST", headers, body: JSON.stringify(who) })).json();
if (!got.ok) throw new Error(`refused: ${got.reason}`);
try {
  console.log(`holding ${got.lease.id}, fence ${got.lease.fence}`);
  // ... deploy ...
} finally {
  const res = await fetch(`${API}/release`, {
    method: "POST", headers,
    body: JSON.stringify({ ...who, leaseId: got.lease.id }),
  });
  console.log("released:", (await res.json()).released);
}
