// The operator's page in Debian's chromium (make test-browser): with an
// operator key it shows the open cases (none) and the latest drill run,
// starts a run from its button and shows it passing, drill by drill; a
// workspace key is refused with the plane's reason. No violation of the
// page's Content-Security-Policy, no serious accessibility violation.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { execFileSync } from "node:child_process";
import { test } from "node:test";
import { launch, shot } from "./harness.mjs";
import { useServe } from "./suite.mjs";

const axeSource = fs.readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");
let tmp, serve, browser, operatorKey;
// two quick drills: the crashed holder's 30 s are covered by the Go tests
useServe("operator", { serveArgs: ["--test-drills", "two-agents-one-slot,stale-lease-id"] }, (e) => {
  ({ tmp, serve, browser } = e);
  const out = execFileSync(e.bin, ["keys", "create", "--data", path.join(tmp, "data"), "--workspace", "default", "--operator"], { encoding: "utf8" });
  operatorKey = out.trim().split(/\s+/).pop();
});


test("the operator's page runs the drills and shows the run and the open cases", async () => {
  const page = await browser.ctx.newPage();
  const csp = [];
  page.on("console", (m) => { if (/Content Security Policy/i.test(m.text())) csp.push(m.text()); });
  await page.goto(serve.url + "/operator");
  await page.fill("#op-key", serve.key); // a workspace key: not enough to run, enough to read
  await page.click("#op-key-form button[type=submit]");
  await page.waitForSelector("#op-no-cases");
  assert.match(await page.textContent("#op-run"), /No drill run yet/);
  await page.click("#op-run-drills");
  await page.waitForFunction(() => /refused: forbidden/.test(document.getElementById("op-status").textContent));

  await page.fill("#op-key", operatorKey);
  await page.click("#op-key-form button[type=submit]");
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

test("the operator's page has no serious accessibility violations", async () => {
  const ctx = await launch({ bypassCSP: true });
  try {
    const page = await ctx.ctx.newPage();
    await page.goto(serve.url + "/operator");
    await page.fill("#op-key", operatorKey);
    await page.click("#op-key-form button[type=submit]");
    await page.waitForSelector("#op-run-verdict");
    await page.addScriptTag({ content: axeSource });
    const res = await page.evaluate(() => window.axe.run(document, { resultTypes: ["violations"] }));
    const bad = res.violations.filter((v) => v.impact === "serious" || v.impact === "critical").map((v) => v.id + ": " + v.help);
    assert.deepEqual(bad, []);
  } finally {
    await ctx.close();
  }
});
