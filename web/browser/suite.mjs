// suite.mjs holds the setup every browser test file shares: before its
// tests, a binary built from this tree, `leaseplane serve` on a free port,
// optionally `leaseplane site` behind a plain static server, and chromium;
// after them, all of it stopped and removed. A module of its own, so that
// the benchmark scripts can use harness.mjs without node:test.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { execFileSync } from "node:child_process";
import { after, before } from "node:test";
import { buildBinary, launch, startServe, staticServer } from "./harness.mjs";

// useServe registers the hooks for the calling test file. name names the
// temporary folder; site also serves `leaseplane site`; serveArgs go to
// `leaseplane serve`; browserOptions go to launch. ready receives
// {tmp, bin, serve, site, browser} once everything is up (the file keeps
// its own variables), and may finish the file's setup.
export function useServe(name, { site = false, serveArgs = [], browserOptions = {} } = {}, ready = () => {}) {
  const env = {};
  before(async () => {
    env.tmp = fs.mkdtempSync(path.join(os.tmpdir(), `lp-${name}-`));
    // --test-drills and --test-fault exist only in a test build.
    const testFaults = serveArgs.some((a) => a.startsWith("--test-"));
    env.bin = buildBinary(env.tmp, { testFaults });
    env.serve = await startServe(env.bin, env.tmp, serveArgs);
    if (site) {
      execFileSync(env.bin, ["site", path.join(env.tmp, "site")]);
      env.site = await staticServer(path.join(env.tmp, "site"));
    }
    env.browser = await launch(browserOptions);
    await ready(env);
  });
  after(async () => {
    await env.browser?.close();
    await env.serve?.stop();
    env.site?.stop();
    if (env.tmp) fs.rmSync(env.tmp, { recursive: true, force: true });
  });
  return env;
}
