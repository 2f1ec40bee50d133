// Readability at 1280 and 390 px (make test-browser) of the playground,
// measured for every example of the corpus, and of the docs' live
// examples once run: no table cell whose content is wider than the cell,
// no input or menu in the steps whose text is cut (the op and mode menus
// read whole), the playground's verdicts all in view or in a box that
// says it scrolls, and the timeline's caption and tick labels apart.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { test } from "node:test";
import { corpusDir, shot } from "./harness.mjs";
import { useServe } from "./suite.mjs";
import { measure } from "./measure.mjs";

let serve, browser;
useServe("readable", {}, (e) => ({ serve, browser } = e));

const WIDTHS = [1280, 390];
const examples = fs.readdirSync(corpusDir).filter((f) => f.endsWith(".json")).map((f) => f.replace(/\.json$/, "")).sort();

// verdictsInView says how the verdicts are shown: "all" when every row is
// inside the box, "scrolls" when the box scrolls and says so; otherwise it
// names what is wrong.
function verdictsInView(page) {
  return page.evaluate(() => {
    const wrap = document.querySelector("#verdicts").closest(".table-wrap");
    const box = wrap.getBoundingClientRect();
    const rows = [...document.querySelectorAll("#verdicts tbody tr")];
    const cut = rows.filter((r) => { const b = r.getBoundingClientRect(); return b.bottom > box.bottom + 1 || b.top < box.top - 1; });
    if (cut.length === 0) return "all";
    const hint = document.getElementById("verdicts-scrolls");
    const scrolls = wrap.scrollHeight > wrap.clientHeight && ["auto", "scroll"].includes(getComputedStyle(wrap).overflowY);
    if (scrolls && hint && !hint.hidden && hint.offsetParent && /scrolls/.test(hint.textContent)) return "scrolls";
    return `${cut.length} of ${rows.length} rows cut (first: step ${Number(cut[0].dataset.step) + 1}) and the box does not say it scrolls`;
  });
}

// openAt opens path of the plane in a page width px wide and waits for
// ready (a selector); errors collects the page's uncaught errors.
async function openAt(width, path, ready) {
  const page = await browser.ctx.newPage();
  await page.setViewportSize({ width, height: 900 });
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(serve.url + path);
  await page.waitForSelector(ready, { timeout: 20000 });
  return { page, errors };
}

for (const width of WIDTHS) {
  test(`playground at ${width} px: every example readable`, async () => {
    const { page, errors } = await openAt(width, "/playground", "body[data-runs='1']");
    const seen = { all: 0, scrolls: 0 };
    for (const ex of examples) {
      const n = Number(await page.getAttribute("body", "data-runs"));
      await page.evaluate((ex) => { location.hash = "example=" + ex; }, ex);
      await page.waitForSelector(`body[data-runs='${n + 1}']`, { timeout: 20000 });
      assert.deepEqual(await measure(page, ".pg"), [], `${ex} at ${width} px`);
      const v = await verdictsInView(page);
      assert.ok(v === "all" || v === "scrolls", `${ex} at ${width} px: ${v}`);
      seen[v]++;
      if (ex === "breaking-a-deadlock") {
        // its deadlock verdict (step 4) is on the page, not cut off in a box
        assert.equal(v, "all", `breaking-a-deadlock at ${width} px`);
        await shot(page, `readable-${width}-breaking-a-deadlock`);
      }
    }
    // Both kinds occur: the long runs (the herd) scroll, the short ones do not.
    assert.ok(seen.all > 0 && seen.scrolls > 0, `at ${width} px: ${JSON.stringify(seen)}`);
    assert.deepEqual(errors, []);
    await page.close();
  });
}

for (const width of WIDTHS) {
  test(`docs at ${width} px: every live example's run readable`, async () => {
    const { page, errors } = await openAt(width, "/docs", "body[data-state='ready']");
    const ids = await page.$$eval("[data-live]", (ss) => ss.map((s) => s.id));
    assert.ok(ids.length >= 7, `${ids.length} live examples`);
    let runs = 0;
    for (const id of ids) {
      await page.click(`#${id} [data-run]`);
      await page.waitForSelector(`body[data-runs='${++runs}']`, { timeout: 20000 });
    }
    assert.equal(await page.locator(".docs svg.tl").count() >= ids.length, true, "each run draws its timeline");
    assert.deepEqual(await measure(page, ".docs"), [], `the docs at ${width} px`);
    await shot(page, `readable-${width}-docs`);
    assert.deepEqual(errors, []);
    await page.close();
  });
}
