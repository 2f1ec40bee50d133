// Layout of the playground and the docs (make test-browser): what a person
// must be able to read is not cut, results come into view after Run, stale
// results go when the JSON stops parsing, the herd's trust table is not a
// wall of 51 rows, and nothing overflows a 390 px phone screen.
import assert from "node:assert/strict";
import { test } from "node:test";
import { shot } from "./harness.mjs";
import { useServe } from "./suite.mjs";

let serve, browser;
useServe("layout", {}, (e) => ({ serve, browser } = e));


async function open(url, viewport) {
  const page = await browser.ctx.newPage();
  if (viewport) await page.setViewportSize(viewport);
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(url);
  if (url.includes("/playground")) await page.waitForSelector("body[data-runs='1']", { timeout: 20000 });
  return { page, errors };
}

async function runAndWait(page, how) {
  const n = Number(await page.getAttribute("body", "data-runs"));
  if (how === "click") await page.click("#run");
  else await page.keyboard.press("Control+Enter");
  await page.waitForSelector(`body[data-runs='${n + 1}']`);
}

// clipped lists the step inputs whose text is wider than their box.
function clippedInputs(page) {
  return page.evaluate(() => {
    const ctx = document.createElement("canvas").getContext("2d");
    const out = [];
    for (const i of document.querySelectorAll("table.steps input.res, table.steps input.at")) {
      if (!i.value) continue;
      const cs = getComputedStyle(i);
      ctx.font = cs.font;
      const need = ctx.measureText(i.value).width;
      const room = i.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
      if (need > room + 0.5) out.push(`${i.id}=${i.value} needs ${need.toFixed(0)}px, has ${room.toFixed(0)}px`);
    }
    return out;
  });
}

test("playground: names and times in the steps are fully visible; verdict chips are not clipped", async () => {
  for (const width of [1440, 1024, 390]) {
    const { page, errors } = await open(serve.url + "/playground#example=breaking-a-deadlock", { width, height: 900 });
    await page.fill("#f-s0-atMs", "31000");
    await page.fill("#f-s0-resource", "lock:deploy/production/eu-west-1/blue");
    assert.deepEqual(await clippedInputs(page), [], `at ${width} px`);
    await runAndWait(page, "click");
    // On a phone the verdicts table may scroll sideways in its own box (the
    // page does not: see the 390 px test); from 1024 px it fits.
    const cut = await page.evaluate((wide) => {
      const out = [];
      for (const cell of document.querySelectorAll("#verdicts td.verdict")) {
        const box = cell.getBoundingClientRect();
        for (const c of cell.querySelectorAll(".chip")) {
          const r = c.getBoundingClientRect();
          if (r.right > box.right + 0.5 || c.scrollWidth > c.clientWidth + 1) out.push(c.textContent);
        }
      }
      const wrap = document.querySelector("#verdicts").closest(".table-wrap");
      if (wide && wrap.scrollWidth > wrap.clientWidth + 1) out.push(`the verdicts scroll sideways (${wrap.scrollWidth} > ${wrap.clientWidth})`);
      return out;
    }, width >= 1024);
    assert.deepEqual(cut, [], `chips cut at ${width} px`);
    assert.deepEqual(errors, []);
    if (width === 390) await shot(page, "playground-390");
    await page.close();
  }
});

test("playground: after Run, the results are scrolled into view", async () => {
  const { page } = await open(serve.url + "/playground", { width: 390, height: 800 });
  await page.focus("#json");
  await page.evaluate(() => window.scrollTo(0, 0));
  await runAndWait(page, "keyboard");
  const inView = () => page.evaluate(() => {
    const r = document.getElementById("results-h").getBoundingClientRect();
    return r.top >= 0 && r.top < window.innerHeight;
  });
  assert.ok(await inView(), "Ctrl+Enter in the JSON: the result heading is on screen");
  await page.evaluate(() => window.scrollTo(0, 0));
  await runAndWait(page, "click");
  assert.ok(await inView(), "Run button: the result heading is on screen");
  await page.close();
});

test("playground: invalid JSON clears the previous results", async () => {
  const { page } = await open(serve.url + "/playground");
  assert.ok(await page.locator("#verdicts tbody tr").count() > 0);
  await page.fill("#json", '{"steps": [');
  await page.waitForSelector("#json-error:not([hidden])");
  await page.waitForFunction(() => document.querySelectorAll("#verdicts tbody tr").length === 0);
  assert.equal(await page.locator("#trust tbody tr").count(), 0);
  assert.equal(await page.locator("#transcript").textContent(), "");
  // Running it anyway shows the refusal, and still no old verdicts.
  await runAndWait(page, "click");
  assert.equal(await page.locator("#run-error").isVisible(), true);
  assert.equal(await page.locator("#verdicts tbody tr").count(), 0);
  await page.close();
});

test("playground: the herd's trust table shows a few agents and expands on request", async () => {
  const { page } = await open(serve.url + "/playground#example=thundering-herd");
  await page.waitForFunction(() => document.querySelectorAll("#trust tbody tr").length > 0);
  const agents = await page.evaluate(() => Object.keys(JSON.parse(document.getElementById("transcript").textContent).trust).length);
  assert.ok(agents > 40, `the herd has ${agents} agents`);
  const rows = await page.locator("#trust tbody tr:visible").count();
  assert.ok(rows <= 12, `${rows} trust rows shown`);
  await page.click("#trust-more");
  assert.equal(await page.locator("#trust tbody tr[data-agent]:visible").count(), agents);
  await page.close();
});

test("no horizontal overflow at 390 px: playground and docs", async () => {
  for (const p of ["/playground", "/playground#example=thundering-herd", "/docs"]) {
    const { page, errors } = await open(serve.url + p, { width: 390, height: 844 });
    if (p === "/docs") await page.waitForLoadState("networkidle");
    const over = await page.evaluate(() => {
      const w = document.documentElement.clientWidth;
      const out = [];
      if (document.documentElement.scrollWidth > w) out.push(`page ${document.documentElement.scrollWidth} > ${w}`);
      for (const el of document.querySelectorAll("body *")) {
        const r = el.getBoundingClientRect();
        if (r.width === 0 || r.right <= w + 0.5) continue;
        // Inside a box that scrolls sideways is fine: the page does not.
        let s = el.parentElement, scrolls = false;
        for (; s && s !== document.body; s = s.parentElement) {
          const ox = getComputedStyle(s).overflowX;
          if ((ox === "auto" || ox === "scroll" || ox === "hidden") && s.getBoundingClientRect().right <= w + 0.5) { scrolls = true; break; }
        }
        if (!scrolls) out.push(`${el.tagName.toLowerCase()}${el.id ? "#" + el.id : ""}.${el.className} right ${Math.round(r.right)}`);
      }
      return out.slice(0, 10);
    });
    assert.deepEqual(over, [], `${p} at 390 px`);
    assert.deepEqual(errors, []);
    await shot(page, "overflow-390-" + p.replace(/[^a-z]+/g, "-"));
    await page.close();
  }
});
