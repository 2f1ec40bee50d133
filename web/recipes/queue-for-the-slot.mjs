const API = `${process.env.LEASEPLANE_URL ?? "http://127.0.0.1:8080"}/api/v1/acp/coordination`;
const headers = {
  Authorization: `Bearer ${process.env.LEASEPLANE_KEY}`,
  "Content-Type": "application/json",
};
const ask = { resource: "lock:deploy/production", actorDid: "did:web:acme.example:agent:cost" };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let lease = null;
for (let attempt = 0; attempt < 40 && !lease; attempt++) {
  const got = await (await fetch(`${API}/lease`, { method: "POST", headers, body: JSON.stringify(ask) })).json();
  if (got.ok) lease = got.lease;
  else if (got.reason === "lease_held") await sleep(got.stampede.waitMs);
  else throw new Error(`${got.reason}: ${got.error ?? ""}`); // deadlock: release what you hold first
}
if (!lease) throw new Error("gave up");
try {
  console.log(`deploying with fence ${lease.fence}`);
  // ... deploy ...
} finally {
  const res = await fetch(`${API}/release`, {
    method: "POST", headers,
    body: JSON.stringify({ ...ask, leaseId: lease.id }),
  });
  console.log("released:", (await res.json()).released);
}
