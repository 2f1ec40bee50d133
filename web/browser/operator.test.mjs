// The operator's page in Debian's chromium (make test-browser): a
// workspace key is refused in its operator field with what it is; with an
// operator key it shows the workspace's queues, a live feed of lease
// events (one made after the page loaded appears in the list and on the
// timeline), the open cases (none) and the latest drill run, starts a run
// from its button and shows it passing, drill by drill. It fetches no
// kernel, is not all bold, and is readable at 1280 and 390 px. No
// violation of the page's Content-Security-Policy, no serious
// accessibility violation.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { execFileSync } from "node:child_process";
import { test } from "node:test";
import { launch, shot, watchRequests } from "./harness.mjs";
import { useServe } from "./suite.mjs";
import { measure } from "./measure.mjs";

const axeSource = fs.readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");
let tmp, serve, browser, operatorKey;
// two quick drills: the crashed holder's 30 s are covered by the Go tests
useServe("operator", { serveArgs: ["--test-drills", "two-agents-one-slot,stale-lease-id"] }, (e) => {
  ({ tmp, serve, browser } = e);
  const out = execFileSync(e.bin, ["keys", "create", "--data", path.join(tmp, "data"), "--workspace", "default", "--operator"], { encoding: "utf8" });
  operatorKey = out.trim().split(/\s+/).pop();
});

// lease asks the plane for resource as agent, with the workspace key.
async function lease(resource, agent) {
  const res = await fetch(serve.url + "/api/v1/acp/coordination/lease", {
    method: "POST",
    headers: { Authorization: "Bearer " + serve.key, "Content-Type": "application/json" },
    body: JSON.stringify({ resource, actorDid: "did:web:acme.example:agent:" + agent }),
  });
  return res.json();
}

async function openWith(page, key) {
  await page.fill("#op-key", key);
  await page.click("#op-key-form button[type=submit]");
}

test("the operator's page refuses a workspace key in its operator field, saying what the key is", async () => {
  const page = await browser.ctx.newPage();
  const seen = watchRequests(page);
  await page.goto(serve.url + "/operator");
  await openWith(page, serve.key);
  await page.waitForSelector("#op-status[data-refused]");
  assert.match(await page.textContent("#op-status"), /^This is a workspace key of workspace default, not an operator key: this page needs an operator key \(leaseplane keys create --operator\)\.$/);
  assert.equal(await page.getAttribute("#op-key", "aria-invalid"), "true");
  // nothing was asked with it but whoami, and the buttons stay off
  assert.deepEqual(seen.all().filter((u) => u.includes("/api/")).map((u) => new URL(u).pathname), ["/api/v1/whoami"]);
  assert.equal(await page.isDisabled("#op-run-drills"), true);
  // the page runs no kernel: it fetches none
  assert.deepEqual(seen.all().filter((u) => u.endsWith(".wasm") || /boot|kernel/.test(u)), []);
  // and is not all bold: its text is the page's normal weight
  const weights = await page.$$eval(".op-page .lede, #op-status", (els) => els.map((e) => getComputedStyle(e).fontWeight));
  assert.deepEqual(weights, ["400", "400"]);
  await page.close();
});

test("the operator's page shows a lease made after it loaded, in its feed, its timeline and its queues", async () => {
  const page = await browser.ctx.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(serve.url + "/operator");
  await openWith(page, operatorKey);
  await page.waitForSelector("body[data-feed='open']");
  assert.match(await page.textContent("#op-events tbody"), /^$/);
  const a = await lease("lock:deploy/production", "ci");
  assert.equal(a.ok, true, JSON.stringify(a));
  const row = `#op-events tr[data-lease='${a.lease.id}']`;
  await page.waitForSelector(row);
  assert.match(await page.textContent(row), /lease.*lock:deploy\/production.*ci/s);
  await page.waitForSelector(`#op-timeline svg [data-lease='${a.lease.id}']`);
  // a second agent waits: the queues show both, read again after the event
  const b = await lease("lock:deploy/production", "cost");
  assert.equal(b.reason, "lease_held");
  await page.waitForFunction(() => /cost/.test(document.querySelector("#op-queues tr[data-resource='lock:deploy/production']")?.textContent || ""));
  assert.match(await page.textContent("#op-queues tr[data-resource='lock:deploy/production']"), /ci · write · fence \d+ · \d+ s left.*cost · write · admitted/s);
  await shot(page, "operator-feed");
  assert.deepEqual(errors, []);
  await page.close();
});

test("the operator's page pages through the queues", async () => {
  for (let i = 0; i < 30; i++) await lease(`lock:page/${String(i).padStart(2, "0")}`, "pager");
  const page = await browser.ctx.newPage();
  await page.goto(serve.url + "/operator");
  await openWith(page, operatorKey);
  await page.waitForSelector("#op-queues tr[data-resource]");
  const first = await page.$$eval("#op-queues tr[data-resource]", (trs) => trs.map((t) => t.dataset.resource));
  assert.equal(first.length, 25);
  assert.equal(await page.isVisible("#op-queues-next"), true);
  await page.click("#op-queues-next");
  await page.waitForFunction((last) => document.querySelector("#op-queues tr[data-resource]")?.dataset.resource > last, first[24]);
  const second = await page.$$eval("#op-queues tr[data-resource]", (trs) => trs.map((t) => t.dataset.resource));
  assert.ok(second.length > 0 && second.every((r) => r > first[24]), JSON.stringify(second));
  await page.click("#op-queues-back");
  await page.waitForFunction((f) => document.querySelector("#op-queues tr[data-resource]")?.dataset.resource === f, first[0]);
  await page.close();
});

test("the operator's page runs the drills and shows the run and the open cases", async () => {
  const page = await browser.ctx.newPage();
  const csp = [];
  page.on("console", (m) => { if (/Content Security Policy/i.test(m.text())) csp.push(m.text()); });
  await page.goto(serve.url + "/operator");
  await openWith(page, operatorKey);
  await page.waitForSelector("#op-no-cases");
  await page.waitForFunction(() => !document.getElementById("op-run-drills").disabled);
  await page.click("#op-run-drills");
  await page.waitForSelector("#op-run-verdict[data-verdict='passed']", { timeout: 60000 });
  const rows = await page.$$eval("#op-run tr[data-drill]", (trs) => trs.map((tr) => tr.dataset.drill + " " + tr.children[1].textContent));
  assert.deepEqual(rows, ["two-agents-one-slot pass", "stale-lease-id pass"]);
  await page.click("#op-detect");
  // the detector's answer stays on its own line (a refresh of the page's
  // status must not erase it); a refusal would show there too
  await page.waitForFunction(() => /^lease-overlap (read|did not run)/.test(document.getElementById("op-detect-result").textContent));
  assert.match(await page.textContent("#op-detect-result"), /^lease-overlap read \d+ entries: 0 findings\.$/);
  await shot(page, "operator");
  assert.deepEqual(csp, []);
});

test("the operator's page is readable at 1280 and 390 px", async () => {
  await lease("db:billing/invoices-and-the-longest-name-of-all-of-them", "reporting");
  for (const width of [1280, 390]) {
    const page = await browser.ctx.newPage();
    await page.setViewportSize({ width, height: 900 });
    await page.goto(serve.url + "/operator");
    await openWith(page, operatorKey);
    await page.waitForSelector("body[data-feed='open']");
    await lease("lock:deploy/production-" + width, "ci");
    await page.waitForSelector("#op-events tbody tr");
    await page.waitForSelector("#op-run-verdict");
    assert.deepEqual(await measure(page, ".op-page"), [], `at ${width} px`);
    const over = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
    assert.ok(over <= 0, `the page scrolls sideways by ${over} px at ${width} px`);
    await shot(page, `operator-${width}`);
    await page.close();
  }
});

test("the operator's page has no serious accessibility violations", async () => {
  const ctx = await launch({ bypassCSP: true });
  try {
    const page = await ctx.ctx.newPage();
    await page.goto(serve.url + "/operator");
    await openWith(page, operatorKey);
    await page.waitForSelector("#op-run-verdict");
    await page.addScriptTag({ content: axeSource });
    const res = await page.evaluate(() => window.axe.run(document, { resultTypes: ["violations"] }));
    const bad = res.violations.filter((v) => v.impact === "serious" || v.impact === "critical").map((v) => v.id + ": " + v.help);
    assert.deepEqual(bad, []);
  } finally {
    await ctx.close();
  }
});
