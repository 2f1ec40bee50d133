// The pages work under their strict Content-Security-Policy (make
// test-browser): served by leaseplane serve with the policy as a header,
// and as a static site with the policy in a meta element, the playground
// runs its first scenario and the docs their live examples, and chromium
// reports no violation of the policy.
import assert from "node:assert/strict";
import crypto from "node:crypto";
import { test } from "node:test";
import { useServe } from "./suite.mjs";

let serve, site, browser;
useServe("csp", { site: true }, (e) => ({ serve, site, browser } = e));


test("every page and file is served with the security headers", async () => {
  for (const p of ["/playground", "/docs", "/", "/api/v1/acp/coordination/wait", "/no-such-page"]) {
    const res = await fetch(serve.url + p, { redirect: "manual" });
    const csp = res.headers.get("content-security-policy") || "";
    assert.match(csp, /frame-ancestors 'none'/, p);
    assert.doesNotMatch(csp, /'unsafe-eval'|'unsafe-inline'/, p);
    assert.equal(res.headers.get("x-frame-options"), "DENY", p);
    assert.equal(res.headers.get("referrer-policy"), "no-referrer", p);
    assert.equal(res.headers.get("x-content-type-options"), "nosniff", p);
    await res.arrayBuffer();
  }
  const res = await fetch(serve.url + "/playground");
  const policy = res.headers.get("content-security-policy");
  const html = await res.text();
  // Every script element has a src, but the kernel's start in the head,
  // which the policy allows by its hash (and nothing else inline).
  let inline = 0;
  for (const [, tag, body] of html.matchAll(/(<script[^>]*>)([\s\S]*?)<\/script>/g)) {
    if (/\ssrc=/.test(tag)) continue;
    inline++;
    const hash = "'sha256-" + crypto.createHash("sha256").update(body).digest("base64") + "'";
    assert.ok(policy.includes(hash), `an inline script the policy does not name by its hash: ${tag}`);
  }
  assert.equal(inline, 1, "inline scripts in the playground");
  assert.doesNotMatch(policy, /'unsafe-inline'|'strict-dynamic'/);
  assert.doesNotMatch(html, /\sstyle="/, "a style attribute in the playground");
});

async function open(url, ready) {
  const page = await browser.ctx.newPage();
  const violations = [];
  page.on("console", (m) => {
    if (/Content Security Policy|Refused to/.test(m.text())) violations.push(m.text());
  });
  page.on("pageerror", (e) => violations.push("page error: " + e.message));
  await page.goto(url);
  await page.waitForSelector(ready, { timeout: 20000 });
  return { page, violations };
}

for (const [where, base] of [["served", () => serve.url], ["static site", () => site.url]]) {
  test(`${where}: the playground runs under the policy`, async () => {
    const p = base().replace(/\/$/, "");
    const { page, violations } = await open(p + (where === "served" ? "/playground" : "/playground/"), "body[data-runs='1']");
    assert.match(await page.locator("#transcript").textContent(), /"steps"/);
    // The trust bars get their widths through the CSSOM.
    const widths = await page.$$eval("#trust .tbar", (bs) => bs.map((b) => b.style.width));
    assert.ok(widths.length > 0 && widths.every((w) => /^\d+px$/.test(w)), `trust bar widths ${widths}`);
    assert.deepEqual(violations, []);
    await page.close();
  });

  test(`${where}: the docs' live examples run under the policy`, async () => {
    const p = base().replace(/\/$/, "");
    const { page, violations } = await open(p + (where === "served" ? "/docs" : "/docs/"), "body[data-state='ready']");
    const first = await page.$eval("[data-live]", (s) => s.id);
    await page.click(`#${first} [data-run]`);
    await page.waitForSelector("body[data-runs='1']");
    assert.notEqual((await page.locator(`#${first} [data-live-out]`).textContent()).trim(), "");
    assert.deepEqual(violations, []);
    await page.close();
  });
}

test("the kernel throws Errors under the policy (glue.js, no Function constructor)", async () => {
  const { page, violations } = await open(serve.url + "/playground", "body[data-runs='1']");
  const msg = await page.evaluate(async () => {
    const k = await window.lpKernel;
    try { k.replay("{"); return "no throw"; } catch (e) { return e instanceof Error ? e.message : "not an Error"; }
  });
  assert.match(msg, /malformed JSON/);
  assert.deepEqual(violations, []);
  await page.close();
});
