// bench.mjs measures the Workers tier in a local workerd (Miniflare,
// offline), for docs/BENCHMARKS.md: `make bench-worker`.
//
//   - latency of one request at a time (p50, p90, p99) and throughput with
//     CLIENTS requests in flight, for: the front worker + object (HTTP to
//     workerd, Go boot, KV key look-up, object call), the object called
//     directly (a Durable Object stub from Node, no front), and the front
//     alone (GET /healthz: the Go instance's boot and nothing else);
//   - the first command to a workspace whose object is not running yet
//     (the kernel's instance starting in the object).
//
// Every command is a renewal of one lease, so each one changes the machine
// and is logged before its answer leaves.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { start, createWorkspace, root, record } from "./miniflare.mjs";

const N = Number(process.env.N || 300);
const CLIENTS = Number(process.env.CLIENTS || 8);
const SECONDS = Number(process.env.SECONDS || 5);
const ADMIN = "bench";

const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "leaseplane-worker-bench-"));
const { mf, url } = await start({ dataDir, port: 0, adminSecret: ADMIN });
const key = await createWorkspace(url, ADMIN, "bench");
const ns = await mf.getDurableObjectNamespace("WORKSPACES");
const body = JSON.stringify({ resource: "lock:bench", actorDid: "did:web:bench.example:agent:1" });
const rec = () => record("acquire", { resource: "lock:bench", actorDid: "did:web:bench.example:agent:1" }); // to the object directly

const pct = (xs, p) => xs[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))];

async function latency(fn) {
  for (let i = 0; i < 10; i++) await fn(); // warm
  const xs = [];
  for (let i = 0; i < N; i++) {
    const t = performance.now();
    await fn();
    xs.push(performance.now() - t);
  }
  xs.sort((a, b) => a - b);
  return xs;
}

async function throughput(fn) {
  let done = 0;
  const end = performance.now() + SECONDS * 1000;
  await Promise.all(
    Array.from({ length: CLIENTS }, async () => {
      while (performance.now() < end) {
        await fn();
        done++;
      }
    }),
  );
  return done / SECONDS;
}

const cold = [];
for (let i = 0; i < 5; i++) {
  const s = ns.get(ns.idFromName(`cold-${i}`));
  await (await s.fetch("https://workspace/create?name=cold", { method: "POST", body: "" })).arrayBuffer();
  await (await s.fetch("https://workspace/keys/add?id=000000000000&role=workspace", { method: "POST" })).arrayBuffer();
}
await mf.dispose(); // every object stops; their storage stays
const again = await start({ dataDir, port: 0, adminSecret: ADMIN });
const ns2 = await again.mf.getDurableObjectNamespace("WORKSPACES");
for (let i = 0; i < 5; i++) {
  const s = ns2.get(ns2.idFromName(`cold-${i}`));
  const t = performance.now();
  const r = await s.fetch("https://workspace/op/acquire", { method: "POST", body: rec(), headers: { "X-Leaseplane-Key-Id": "000000000000" } });
  await r.arrayBuffer();
  cold.push(performance.now() - t);
}
await again.mf.dispose();

const { mf: mf3, url: url3 } = await start({ dataDir, port: 0, adminSecret: ADMIN });
const ns3 = await mf3.getDurableObjectNamespace("WORKSPACES");
const stub3 = ns3.get(ns3.idFromName("bench"));
const front3 = async () => {
  const r = await fetch(`${url3}/api/v1/acp/coordination/lease`, { method: "POST", headers: { Authorization: `Bearer ${key}` }, body });
  await r.arrayBuffer();
  if (r.status !== 200) throw new Error(`front: ${r.status}`);
};
const direct3 = async () => {
  const r = await stub3.fetch("https://workspace/op/acquire", { method: "POST", body: rec(), headers: { "X-Leaseplane-Key-Id": key.split("_")[1] } });
  await r.arrayBuffer();
  if (r.status !== 200) throw new Error(`object: ${r.status}`);
};
const health3 = async () => {
  const r = await fetch(`${url3}/healthz`);
  await r.arrayBuffer();
};

const rows = [];
for (const [name, fn] of [["front worker + object", front3], ["object directly", direct3], ["front alone (GET /healthz)", health3]]) {
  const xs = await latency(fn);
  const rps = await throughput(fn);
  rows.push(`| ${name} | ${pct(xs, 50).toFixed(1)} | ${pct(xs, 90).toFixed(1)} | ${pct(xs, 99).toFixed(1)} | ${rps.toFixed(0)} |`);
}
await mf3.dispose();
fs.rmSync(dataDir, { recursive: true, force: true });

const size = (f) => fs.statSync(path.join(root, "bin/worker", f)).size;
console.log(`node ${process.version}, ${os.cpus().length} cores, ${N} sequential requests, then ${CLIENTS} clients for ${SECONDS} s`);
console.log("");
console.log("| path | p50 ms | p90 ms | p99 ms | requests/s |");
console.log("| --- | ---: | ---: | ---: | ---: |");
for (const r of rows) console.log(r);
console.log("");
cold.sort((a, b) => a - b);
console.log(`first command to an object that is not running (restore + kernel instance start), 5 objects: ${cold.map((x) => x.toFixed(0)).join(", ")} ms`);
console.log(`front worker app.wasm: ${size("app.wasm")} B; kernel.wasm (wasip1): ${size("kernel.wasm")} B`);
