// The local workerd a test file runs against: started in a new temporary
// data folder with the test clock, and stopped with the folder removed.
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { start } from "../miniflare.mjs";

// startIn starts workerd on a free port in a new folder named after name.
export async function startIn(name, adminSecret) {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), `leaseplane-worker-${name}-`));
  const { mf, url } = await start({ dataDir, port: 0, adminSecret, testClock: true });
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
