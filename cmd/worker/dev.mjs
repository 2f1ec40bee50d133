// dev.mjs runs the Workers tier in a local workerd (Miniflare, offline) on
// a port, keeping its storage in a folder, as `make worker-dev` does:
//
//   node cmd/worker/dev.mjs [--port 8787] [--data ./data/worker]
//
// On the first start it makes the workspace "default" and prints its key
// as `export LEASEPLANE_KEY=...`, as make run does; the admin secret of the
// local run is kept in DATA/admin-secret (mode 0600) and printed, for
// making more keys (docs/WORKERS.md); the secret that seals the ledgers'
// signing keys in DATA/ledger-secret.
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { start, createWorkspace } from "./miniflare.mjs";

function flag(name, def) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : def;
}

const port = Number(flag("port", process.env.PORT || "8787"));
const data = path.resolve(flag("data", "./data/worker"));
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  console.error(`worker-dev: --port ${flag("port")}: not a port number`);
  process.exit(2);
}
fs.mkdirSync(data, { recursive: true, mode: 0o700 });
// localSecret reads a secret of the local run from DATA/NAME, or makes it.
function localSecret(name) {
  const file = path.join(data, name);
  try {
    return [fs.readFileSync(file, "utf8").trim(), file];
  } catch {
    const s = crypto.randomBytes(24).toString("base64url");
    fs.writeFileSync(file, s + "\n", { mode: 0o600 });
    return [s, file];
  }
}
const [secret, secretFile] = localSecret("admin-secret");
const [ledgerSecret] = localSecret("ledger-secret");

let mf, url;
try {
  ({ mf, url } = await start({ dataDir: data, port, adminSecret: secret, ledgerSecret }));
} catch (err) {
  // Miniflare's error for a port taken since make checked it, or a
  // missing build, without its stack.
  console.error(`worker-dev: starting workerd on 127.0.0.1:${port} failed: ${err && err.message}`);
  console.error(`worker-dev: if the port is in use, choose another: make worker-dev PORT=${port + 1}`);
  process.exit(1);
}
const made = await fetch(`${url}/admin/v1/workspaces?name=default`, {
  method: "POST",
  headers: { Authorization: `Bearer ${secret}` },
});
const body = await made.json();
if (made.status === 200) {
  console.log(`leaseplane worker: first start on an empty data folder (${data}): created workspace "default" and a workspace key.`);
  console.log(`export LEASEPLANE_KEY=${body.key}`);
} else if (body.reason !== "workspace_exists") {
  console.error(`worker-dev: creating workspace default: ${made.status} ${JSON.stringify(body)}`);
  await mf.dispose();
  process.exit(1);
} else {
  console.log(`leaseplane worker: workspace "default" exists in ${data} (its first key was printed on the first start); make another key with:`);
  console.log(`  curl -s -X POST -H "Authorization: Bearer $(cat ${secretFile})" '${url}/admin/v1/keys?workspace=default&role=workspace'`);
  console.log(`and export the "key" of its answer as LEASEPLANE_KEY.`);
}
console.log(`leaseplane worker: serving in workerd on ${url} (admin secret in ${secretFile})`);
console.log(`export LEASEPLANE_URL=${url}`);

const stop = async () => {
  await mf.dispose();
  process.exit(0);
};
process.on("SIGINT", stop);
process.on("SIGTERM", stop);
