// The kernel's start in a page (web/static/boot.js): a Web Worker fetches
// and compiles the kernel and gives the playground its first verdict; the
// page's own window.leaseplane comes from the module the worker compiled,
// so the kernel is fetched once; a link's scenario is the first run, not
// the default example; without its worker the page starts the kernel itself.
import assert from "node:assert/strict";
import { test } from "node:test";
import { replayAll } from "./harness.mjs";
import { useServe } from "./suite.mjs";

let expected;
const env = useServe("boot", {}, (e) => { expected = replayAll(e.bin); });

async function open(url, route) {
  const page = await env.browser.ctx.newPage();
  const errors = [], wasm = [], workers = [];
  page.on("pageerror", (e) => errors.push(e.message));
  page.on("worker", (w) => workers.push(w.url()));
  // Requests from the page and from its worker.
  env.browser.ctx.on("request", (r) => { if (/\/leaseplane\.[0-9a-f]+\.wasm$/.test(r.url())) wasm.push(r.url()); });
  if (route) await route(page);
  await page.goto(url);
  await page.waitForSelector("body[data-runs='1']", { timeout: 20000 });
  return { page, errors, wasm, workers };
}

const marks = (page) => page.evaluate(() => performance.getEntriesByType("mark").map((m) => m.name));

test("the playground's first verdict is its worker's, and window.leaseplane is the page's, from one fetch of the kernel", async () => {
  const { page, errors, wasm, workers } = await open(env.serve.url + "/playground");
  assert.equal(await page.locator("#transcript").textContent(), expected.get("two-release-agents"));
  assert.equal(workers.length, 1, `workers: ${workers}`);
  assert.match(workers[0], /\/static\/kernel-worker\.[0-9a-f]{12}\.js#wasm=.*&first=/);
  const m = await marks(page);
  for (const k of ["lp:kernel-fetch", "lp:kernel-compiled", "lp:kernel-ready", "lp:first-verdict", "lp:kernel-main"]) assert.ok(m.includes(k), `no mark ${k}: ${m}`);
  // The page's own instance answers synchronously, byte for byte.
  const again = await page.evaluate(() => globalThis.leaseplane.replay(document.getElementById("json").value));
  assert.equal(again, expected.get("two-release-agents"));
  assert.equal(wasm.length, 1, `the kernel was fetched ${wasm.length} times: ${wasm}`);
  // A second run is the page's.
  await page.click("#run");
  await page.waitForSelector("body[data-runs='2']");
  assert.equal(await page.locator("#transcript").textContent(), expected.get("two-release-agents"));
  assert.deepEqual(errors, []);
  await page.close();
});

test("a link's scenario is the first run, and the worker is not asked for the default example", async () => {
  const { page, errors, workers } = await open(env.serve.url + "/playground#example=crashed-holder");
  assert.equal(await page.locator("#transcript").textContent(), expected.get("crashed-holder"));
  assert.equal(workers.length, 1);
  assert.doesNotMatch(workers[0], /&first=/);
  assert.deepEqual(errors, []);
  await page.close();
});

test("without its worker (the script refused) the page compiles and starts the kernel itself", async () => {
  const { page, errors, wasm } = await open(env.serve.url + "/playground",
    (p) => p.route(/\/kernel-worker\.[0-9a-f]+\.js/, (r) => r.fulfill({ status: 404, body: "no" })));
  assert.equal(await page.locator("#transcript").textContent(), expected.get("two-release-agents"));
  const m = await marks(page);
  assert.ok(m.includes("lp:kernel-ready") && !m.includes("lp:kernel-main"), `marks: ${m}`);
  assert.equal(await page.evaluate(() => typeof globalThis.leaseplane.replay), "function");
  assert.ok(wasm.length >= 1);
  assert.deepEqual(errors, []);
  await page.close();
});

test("the docs start the page's kernel through the worker and run a live example", async () => {
  const page = await env.browser.ctx.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(env.serve.url + "/docs");
  await page.waitForSelector("body[data-state='ready']", { timeout: 20000 });
  const first = await page.$eval("[data-live]", (s) => s.id);
  await page.click(`#${first} [data-run]`);
  await page.waitForSelector("body[data-runs='1']");
  assert.notEqual((await page.locator(`#${first} [data-live-out]`).textContent()).trim(), "");
  const m = await marks(page);
  assert.ok(m.includes("lp:kernel-main"), `marks: ${m}`);
  assert.deepEqual(errors, []);
  await page.close();
});
