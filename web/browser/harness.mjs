// harness.mjs starts what the browser tests need: the leaseplane binary
// (built from this tree, with the kernel `make wasm` embedded), a running
// `leaseplane serve`, the `leaseplane site` output behind a plain static
// file server, and Debian's chromium driven by playwright-core.
import { execFileSync, spawn } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

export const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
export const artifacts = path.join(root, "test-artifacts");
export const corpusDir = path.join(root, "kernel/testdata/scenarios");

export function buildBinary(tmp, { testFaults = false } = {}) {
  if (!fs.existsSync(path.join(root, "web/static/leaseplane.wasm"))) {
    throw new Error("web/static/leaseplane.wasm is missing: run make wasm first (make test-browser does)");
  }
  const bin = path.join(tmp, "leaseplane");
  const tags = testFaults ? ["-tags", "leaseplane_testfaults"] : [];
  execFileSync("go", ["build", ...tags, "-o", bin, "./cmd/leaseplane"], { cwd: root, stdio: "inherit" });
  return bin;
}

// replayAll runs `leaseplane replay` on every corpus scenario.
export function replayAll(bin) {
  const out = new Map();
  for (const f of fs.readdirSync(corpusDir).filter((f) => f.endsWith(".json")).sort()) {
    out.set(f.replace(/\.json$/, ""), execFileSync(bin, ["replay", path.join(corpusDir, f)], { encoding: "utf8" }));
  }
  return out;
}

// startServe runs `leaseplane serve` on a free port and resolves its URL.
export function startServe(bin, tmp, extra = []) {
  const proc = spawn(bin, ["serve", "--addr", "127.0.0.1:0", "--data", path.join(tmp, "data"), "--log-level", "warn", ...extra], { stdio: ["ignore", "pipe", "pipe"] });
  return new Promise((resolve, reject) => {
    let out = "", err = "";
    const timer = setTimeout(() => reject(new Error("leaseplane serve did not start in 20 s: " + err)), 20000);
    proc.stderr.on("data", (d) => { err += d; });
    proc.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/export LEASEPLANE_URL=(\S+)/);
      const key = out.match(/export LEASEPLANE_KEY=(\S+)/);
      if (m) { clearTimeout(timer); resolve({ url: m[1], key: key && key[1], stop: () => stopProc(proc) }); }
    });
    proc.on("exit", (code) => { clearTimeout(timer); reject(new Error(`leaseplane serve exited ${code}: ${err}`)); });
  });
}

// staticServer serves dir as a plain static host would: files by path,
// directory index.html, no compression, and .wasm as
// application/octet-stream (as some hosts do), so the page's fallback from
// streaming compilation is exercised too.
export function staticServer(dir) {
  const types = { ".html": "text/html; charset=utf-8", ".js": "text/javascript", ".css": "text/css" };
  const srv = http.createServer((req, res) => {
    let p = decodeURIComponent(new URL(req.url, "http://x").pathname);
    let file = path.join(dir, p);
    if (!file.startsWith(dir)) { res.writeHead(403).end(); return; }
    if (p.endsWith("/")) file = path.join(file, "index.html");
    fs.readFile(file, (e, b) => {
      if (e) { res.writeHead(404).end("not found"); return; }
      res.writeHead(200, { "Content-Type": types[path.extname(file)] || "application/octet-stream" }).end(b);
    });
  });
  return new Promise((resolve) => srv.listen(0, "127.0.0.1", () => resolve({ url: `http://127.0.0.1:${srv.address().port}`, stop: () => srv.close() })));
}

// launch starts chromium; extra options go to the browser context (the
// accessibility test passes bypassCSP to inject axe-core as a script).
export async function launch(extra = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "lp-chromium-"));
  const ctx = await chromium.launchPersistentContext(dir, {
    ...extra,
    executablePath: "/usr/bin/chromium",
    headless: true,
    viewport: { width: 1440, height: 1000 },
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  return { ctx, close: async () => { await ctx.close(); fs.rmSync(dir, { recursive: true, force: true }); } };
}

// loadTimes loads url in page until the playground's first verdict and
// gives the page's performance marks by name (ms from navigation start),
// with parsed, the navigation's domInteractive. It waits inside the page
// with a PerformanceObserver rather than a selector: Playwright's selector
// engine is a large script of its own, which would run in the page while
// it still loads and compiles the kernel, where a visitor's page has none.
export async function loadTimes(page, url) {
  await page.goto(url);
  return page.evaluate(() => new Promise((resolve, reject) => {
    const marks = () => Object.fromEntries(performance.getEntriesByType("mark").map((e) => [e.name, e.startTime]));
    const done = () => {
      if (!performance.getEntriesByName("lp:first-verdict").length) return false;
      resolve({ ...marks(), parsed: performance.getEntriesByType("navigation")[0].domInteractive });
      return true;
    };
    if (done()) return;
    const watch = new PerformanceObserver(() => { if (done()) watch.disconnect(); });
    watch.observe({ type: "mark" });
    setTimeout(() => reject(new Error("no lp:first-verdict mark in 20 s")), 20000);
  }));
}

// watchRequests records every request a page makes; after() lists those
// made after mark() was called.
export function watchRequests(page) {
  const seen = [];
  let cut = Infinity;
  page.on("request", (r) => seen.push(r.url()));
  return { mark: () => { cut = seen.length; }, after: () => seen.slice(cut), all: () => seen.slice() };
}

export async function shot(page, name) {
  fs.mkdirSync(artifacts, { recursive: true });
  await page.screenshot({ path: path.join(artifacts, name + ".png") });
}

// stopProc sends SIGTERM and resolves once the process has exited, so that
// its data folder can be removed without racing its last writes.
function stopProc(proc) {
  return new Promise((resolve) => {
    if (proc.exitCode !== null || proc.signalCode !== null) return resolve();
    proc.once("exit", () => resolve());
    proc.kill("SIGTERM");
  });
}
