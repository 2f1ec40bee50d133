// The playground shows waiting (make test-browser): an acquire step that
// carries "wait up to" is held, its row says so and names the step that
// answered it, that step shows the answer, and the timeline draws the wait.
import assert from "node:assert/strict";
import { test } from "node:test";
import { shot } from "./harness.mjs";
import { useServe } from "./suite.mjs";

let serve, browser;
useServe("held", {}, (e) => ({ serve, browser } = e));

test("playground: a held step, its answer and the wait on the timeline", async () => {
  const page = await browser.ctx.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(serve.url + "/playground#example=held-ask-answered-at-until");
  await page.waitForSelector("body[data-runs='1']", { timeout: 20000 });
  assert.equal(await page.inputValue("#f-s1-waitUpToMs"), "2000");
  assert.match(await page.textContent("#verdicts tr[data-step='1']"), /held\s*ask_1.*waits up to\s*2000 ms.*answered\s*at step 3/s);
  assert.match(await page.textContent("#verdicts tr[data-step='2']"), /answers ask_1 \(step 2\)\s*refused lease_held/);
  assert.equal(await page.locator("#timeline svg g.ask[data-step='1'] line.ask-line").count(), 1);
  // Made a plain acquire in the form, the step is refused at once instead.
  const n = Number(await page.getAttribute("body", "data-runs"));
  await page.fill("#f-s1-waitUpToMs", "");
  await page.click("#run");
  await page.waitForSelector(`body[data-runs='${n + 1}']`);
  assert.match(await page.textContent("#verdicts tr[data-step='1']"), /refused\s*lease_held/);
  assert.equal(await page.locator("#timeline svg g.ask").count(), 0);
  await shot(page, "playground-held");
  assert.deepEqual(errors, []);
  await page.close();
});
