// miniflare.mjs starts the worker (bin/worker, built by make worker) in a
// local workerd through Miniflare, with the bindings that wrangler.jsonc
// declares: offline (no Cloudflare account, cf: false), storage persisted
// under a folder of the caller's choice.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Miniflare, kCurrentWorker } from "miniflare";

const here = path.dirname(fileURLToPath(import.meta.url));
export const root = path.resolve(here, "..", "..");

// readConfig reads wrangler.jsonc: JSON with // comments on their own lines.
export function readConfig() {
  const text = fs.readFileSync(path.join(here, "wrangler.jsonc"), "utf8");
  const json = text
    .split("\n")
    .filter((l) => !l.trim().startsWith("//"))
    .join("\n");
  return JSON.parse(json);
}

// start runs the worker. opts: dataDir (persisted storage; required),
// port (0 or absent: dispatch only, no socket), adminSecret, ledgerSecret
// (seals each workspace's signing key), testClock, testDrills (the drills
// a run runs, with testClock only; every drill when absent), retentionMs
// (the ledger's retention of exported bodies), main (another built entry
// module than wrangler.jsonc's, such as an older build's, for a
// benchmark).
export async function start({ dataDir, port, adminSecret = "", ledgerSecret = "local ledger secret", testClock = false, testDrills, retentionMs, main: entry }) {
  const cfg = readConfig();
  const main = entry ? path.resolve(entry) : path.resolve(here, cfg.main);
  if (!fs.existsSync(main)) throw new Error(`${main} is missing: run make worker`);
  const durableObjects = {};
  for (const b of cfg.durable_objects.bindings) {
    const sqlite = cfg.migrations.some((m) => (m.new_sqlite_classes || []).includes(b.class_name));
    durableObjects[b.name] = { className: b.class_name, useSQLite: sqlite };
  }
  const bindings = {};
  if (adminSecret) bindings.LEASEPLANE_ADMIN_SECRET = adminSecret;
  if (ledgerSecret) bindings.LEASEPLANE_LEDGER_SECRET = ledgerSecret;
  if (testClock) bindings.LEASEPLANE_TEST_CLOCK = "1";
  if (testDrills) bindings.LEASEPLANE_TEST_DRILLS = testDrills.join(",");
  if (retentionMs !== undefined) bindings.LEASEPLANE_LEDGER_RETENTION_MS = String(retentionMs);
  const opts = {
    modules: true,
    scriptPath: main,
    modulesRoot: path.dirname(main),
    modulesRules: [
      { type: "CompiledWasm", include: ["**/*.wasm"] },
      { type: "ESModule", include: ["**/*.mjs", "**/*.js"] },
    ],
    compatibilityDate: cfg.compatibility_date,
    compatibilityFlags: cfg.compatibility_flags ?? [],
    durableObjects,
    kvNamespaces: cfg.kv_namespaces.map((k) => k.binding),
    // A binding to the worker itself is this worker (unnamed here, so that
    // the objects' storage keeps the place earlier builds gave it).
    serviceBindings: Object.fromEntries((cfg.services ?? []).map((s) => [s.binding, s.service === cfg.name ? kCurrentWorker : s.service])),
    bindings,
    cf: false,
    durableObjectsPersist: path.join(dataDir, "do"),
    kvPersist: path.join(dataDir, "kv"),
  };
  if (port !== undefined && port !== null) {
    opts.host = "127.0.0.1";
    opts.port = port;
  }
  const mf = new Miniflare(opts);
  const url = await mf.ready;
  return { mf, url: String(url).replace(/\/$/, "") };
}

// Connection: close on the tests' requests to workerd. workerd closes an
// idle keep-alive connection after 5 s; a test that blocks Node's event
// loop that long (spawnSync of bin/leaseplane, a loaded machine) would
// otherwise send its next request on a socket workerd has just closed, and
// fetch fails ("fetch failed", the socket's other side closed).
export const fresh = { Connection: "close" };

// createWorkspace makes a workspace through the admin route and returns its
// workspace key.
export async function createWorkspace(base, adminSecret, name, rules) {
  const res = await fetch(`${base}/admin/v1/workspaces?name=${encodeURIComponent(name)}`, {
    method: "POST",
    headers: { ...fresh, Authorization: `Bearer ${adminSecret}` },
    body: rules === undefined ? "" : JSON.stringify(rules),
  });
  const body = await res.json();
  if (res.status !== 200) throw new Error(`creating workspace ${name}: ${res.status} ${JSON.stringify(body)}`);
  return body.key;
}

// createKey makes another key of a workspace.
export async function createKey(base, adminSecret, workspace, role, agentDid) {
  const q = new URLSearchParams({ workspace, role });
  if (agentDid) q.set("agentDid", agentDid);
  const res = await fetch(`${base}/admin/v1/keys?${q}`, {
    method: "POST",
    headers: { ...fresh, Authorization: `Bearer ${adminSecret}` },
  });
  const body = await res.json();
  if (res.status !== 200) throw new Error(`creating a ${role} key: ${res.status} ${JSON.stringify(body)}`);
  return body;
}

// record is a command as the front sends it to a workspace's object: the
// kernel's command record (kernel/record.go), for the tests and benchmarks
// that call an object directly. fields: resource, actorDid, mode, leaseId,
// askId (strings), waitUpToMs (a number).
export function record(op, fields = {}) {
  const ops = ["acquire", "release", "wait", "tick", "suspend", "resume", "forget", "cancel"];
  const strs = ["resource", "actorDid", "mode", "leaseId", "prefix", "after", "askId", "invalid"].map((f) => new TextEncoder().encode(fields[f] ?? ""));
  const out = new Uint8Array(56 + strs.reduce((n, s) => n + s.length, 0));
  const v = new DataView(out.buffer);
  out[0] = ops.indexOf(op) + 1;
  out[1] = ("leaseId" in fields ? 1 : 0) | ("askId" in fields ? 2 : 0) | ("waitUpToMs" in fields ? 4 : 0);
  v.setBigInt64(16, BigInt(fields.waitUpToMs ?? 0), true);
  let at = 56;
  strs.forEach((s, i) => {
    v.setUint32(24 + 4 * i, s.length, true);
    out.set(s, at);
    at += s.length;
  });
  return out;
}
