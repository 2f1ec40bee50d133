// The local workerd a test file runs against: started in a new temporary
// data folder with the test clock, and stopped with the folder removed.
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { spawn, execFileSync } from "node:child_process";
import { start, root } from "../miniflare.mjs";

// startIn starts workerd on a free port in a new folder named after name.
// opts are start's (miniflare.mjs), such as retentionMs.
export async function startIn(name, adminSecret, opts = {}) {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), `leaseplane-worker-${name}-`));
  const { mf, url } = await start({ dataDir, port: 0, adminSecret, testClock: true, ...opts });
  return { dataDir, mf, base: url };
}

// stop disposes of mf and removes dataDir.
export async function stop(mf, dataDir) {
  await mf?.dispose();
  if (dataDir) fs.rmSync(dataDir, { recursive: true, force: true });
}

// objectJSON sends route straight to workspace's Durable Object in mf and
// gives back its JSON answer, which must be a 200.
export async function objectJSON(mf, workspace, route, init) {
  const ns = await mf.getDurableObjectNamespace("WORKSPACES");
  const res = await ns.get(ns.idFromName(workspace)).fetch(`https://workspace${route}`, init);
  const body = await res.json();
  assert.equal(res.status, 200, `${route}: ${JSON.stringify(body)}`);
  return body;
}

// serve starts `leaseplane serve` (bin/leaseplane, built by make build) on
// a free port over the data folder dir, whose keys the caller made; it
// resolves to the server's URL and a stop function.
export async function serve(dir) {
  const bin = path.join(root, "bin", "leaseplane");
  assert.ok(fs.existsSync(bin), `${bin} is missing: run make build`);
  const proc = spawn(bin, ["serve", "--addr", "127.0.0.1:0", "--data", dir, "--log-level", "warn"], { stdio: ["ignore", "pipe", "inherit"] });
  const url = await new Promise((resolve, reject) => {
    let seen = "";
    proc.stdout.setEncoding("utf8");
    proc.stdout.on("data", (chunk) => {
      const m = (seen += chunk).match(/^export LEASEPLANE_URL=(\S+)$/m);
      if (m) resolve(m[1]);
    });
    proc.on("exit", (code) => reject(new Error(`leaseplane serve exited ${code} before listening:\n${seen}`)));
  });
  const stop = async () => {
    if (proc.exitCode !== null) return;
    const exited = new Promise((resolve) => proc.on("exit", resolve));
    proc.kill("SIGTERM");
    await exited;
  };
  return { url, stop };
}

// serverKey makes a key of workspace in the server's data folder dir
// (before serve): flags are keys create's (--init, --operator, --agent DID).
export function serverKey(dir, workspace, ...flags) {
  const bin = path.join(root, "bin", "leaseplane");
  const out = execFileSync(bin, ["keys", "create", "--data", dir, "--workspace", workspace, ...flags], { encoding: "utf8" });
  return out.trim().split(/\s+/).pop();
}
