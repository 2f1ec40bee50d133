// bench-cpu.mjs measures the CPU time workerd spends per request, for
// docs/BENCHMARKS.md "Workers": the CPU time (user + system, from
// /proc/PID/stat) of the workerd process Miniflare starts, before and after
// N requests sent one at a time, divided by N. Three paths, in one run:
//
//   - front + object: POST lease through the Go front (key check, the call
//     to the object), every request a renewal that the object logs;
//   - object directly: the same renewal sent to the object's stub;
//   - front alone: GET /healthz, answered by the front without KV or object.
//
// The front's own share is the first minus the second. The clock ticks are
// 10 ms, so N should make each path take a second or more.
//
//   node cmd/worker/bench-cpu.mjs [ENTRY...]   # default bin/worker/index.mjs
//
// Each ENTRY (a built worker's index.mjs, such as a copy of an older build)
// is measured in turn, in the same run, so the figures compare.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { start, createWorkspace, root, record } from "./miniflare.mjs";

const N = Number(process.env.N || 500);
const ADMIN = "bench";
const TICK_MS = 1000 / 100; // USER_HZ

// workerdPids lists the workerd processes below this one.
function workerdPids() {
  const kids = new Map();
  for (const d of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const st = fs.readFileSync(`/proc/${d}/stat`, "utf8");
      const rest = st.slice(st.lastIndexOf(")") + 2).split(" ");
      const comm = st.slice(st.indexOf("(") + 1, st.lastIndexOf(")"));
      kids.set(Number(d), { ppid: Number(rest[1]), comm });
    } catch {}
  }
  const mine = new Set([process.pid]);
  let grew = true;
  while (grew) {
    grew = false;
    for (const [pid, k] of kids) if (!mine.has(pid) && mine.has(k.ppid)) mine.add(pid), (grew = true);
  }
  return [...mine].filter((p) => kids.get(p)?.comm === "workerd");
}

function cpuMs(pids) {
  let ticks = 0;
  for (const p of pids) {
    const st = fs.readFileSync(`/proc/${p}/stat`, "utf8");
    const f = st.slice(st.lastIndexOf(")") + 2).split(" ");
    ticks += Number(f[11]) + Number(f[12]); // utime, stime
  }
  return ticks * TICK_MS;
}

async function perRequest(pids, fn) {
  for (let i = 0; i < 20; i++) await fn(); // warm
  const c0 = cpuMs(pids);
  const t0 = performance.now();
  for (let i = 0; i < N; i++) await fn();
  return { cpu: (cpuMs(pids) - c0) / N, wall: (performance.now() - t0) / N };
}

async function measure(entry) {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "leaseplane-worker-cpu-"));
  const { mf, url } = await start({ dataDir, port: 0, adminSecret: ADMIN, main: entry });
  try {
    const key = await createWorkspace(url, ADMIN, "bench");
    const ns = await mf.getDurableObjectNamespace("WORKSPACES");
    const stub = ns.get(ns.idFromName("bench"));
    const body = JSON.stringify({ resource: "lock:bench", actorDid: "did:web:bench.example:agent:1" });
    const rec = () => record("acquire", { resource: "lock:bench", actorDid: "did:web:bench.example:agent:1" }); // to the object directly
    const pids = workerdPids();
    if (pids.length === 0) throw new Error("no workerd process found below this one");
    const check = (what, r) => {
      if (r.status !== 200) throw new Error(`${what}: ${r.status}`);
    };
    const out = {};
    out.front = await perRequest(pids, async () => {
      const r = await fetch(`${url}/api/v1/acp/coordination/lease`, { method: "POST", headers: { Authorization: `Bearer ${key}` }, body });
      await r.arrayBuffer();
      check("front", r);
    });
    out.direct = await perRequest(pids, async () => {
      const r = await stub.fetch("https://workspace/op/acquire", { method: "POST", body: rec(), headers: directHeaders(key) });
      await r.arrayBuffer();
      check("object", r);
    });
    out.health = await perRequest(pids, async () => {
      const r = await fetch(`${url}/healthz`);
      await r.arrayBuffer();
      check("healthz", r);
    });
    return out;
  } finally {
    await mf.dispose();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}

// directHeaders is what the front adds for the object (the key's id, once
// the object checks keys); an older object ignores it.
function directHeaders(key) {
  return { "X-Leaseplane-Key-Id": key.split("_")[1] };
}

const entries = process.argv.slice(2);
if (entries.length === 0) entries.push(path.join(root, "bin/worker/index.mjs"));
const load = os.loadavg()[0].toFixed(1);
console.log(`node ${process.version}, ${os.cpus().length} cores, load ${load}, ${N} requests one at a time per path; CPU of workerd per request`);
console.log("");
console.log("| build | front + object ms CPU | object directly ms CPU | front's share ms CPU | front alone (/healthz) ms CPU | front + object ms wall |");
console.log("| --- | ---: | ---: | ---: | ---: | ---: |");
for (const e of entries) {
  const r = await measure(e);
  const f = (x) => x.toFixed(2);
  console.log(`| ${path.relative(root, e)} | ${f(r.front.cpu)} | ${f(r.direct.cpu)} | ${f(r.front.cpu - r.direct.cpu)} | ${f(r.health.cpu)} | ${f(r.front.wall)} |`);
}
