// Accessibility checks of the playground and the docs with axe-core, after
// a run, so that the rendered results are checked too.
import assert from "node:assert/strict";
import fs from "node:fs";
import { createRequire } from "node:module";
import { test } from "node:test";
import { useServe } from "./suite.mjs";

const axeSource = fs.readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");
let serve, browser;
// axe-core goes in as an inline script, which the pages' policy refuses.
useServe("a11y", { browserOptions: { bypassCSP: true } }, (e) => ({ serve, browser } = e));


async function violations(page) {
  await page.addScriptTag({ content: axeSource });
  const res = await page.evaluate(() => window.axe.run(document, { resultTypes: ["violations"] }));
  return res.violations
    .filter((v) => v.impact === "serious" || v.impact === "critical")
    .map((v) => `${v.id} (${v.impact}): ${v.help} — ${v.nodes.slice(0, 3).map((n) => n.target.join(" ")).join(", ")}`);
}

test("the playground, after running breaking a deadlock, has no serious accessibility violations", async () => {
  const page = await browser.ctx.newPage();
  await page.goto(serve.url + "/playground#example=breaking-a-deadlock");
  await page.waitForSelector("body[data-runs='1']", { timeout: 20000 });
  assert.deepEqual(await violations(page), []);
  await page.close();
});

test("the docs, after running an example, have no serious accessibility violations", async () => {
  const page = await browser.ctx.newPage();
  await page.goto(serve.url + "/docs");
  await page.waitForSelector("body[data-state='ready']", { timeout: 20000 });
  await page.click("#breaking-a-deadlock [data-run]");
  await page.waitForSelector("#breaking-a-deadlock[data-result]");
  assert.deepEqual(await violations(page), []);
  await page.close();
});
