// Browser tests of the signed ledger in the pages (make test-browser): the
// docs' "Verify a receipt" panel checks a pasted receipt and refuses a
// tampered one with no request leaving the page, and the playground seals
// its runs with a test key made in the browser, with receipts that
// `leaseplane verify` accepts.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { spawnSync } from "node:child_process";
import { describe, test } from "node:test";
import { root, shot, watchRequests } from "./harness.mjs";
import { useServe } from "./suite.mjs";

let tmp, bin, serve, browser;
useServe("ledger", {}, (e) => ({ tmp, bin, serve, browser } = e));

const receipt = fs.readFileSync(path.join(root, "kernel/ledger/testdata/receipt.txt"), "utf8");
const vkey = fs.readFileSync(path.join(root, "kernel/ledger/testdata/key.vkey"), "utf8").trim();
const otherKey = fs.readFileSync(path.join(root, "kernel/ledger/testdata/other.vkey"), "utf8").trim();

// openWatched opens route in a new page that records its script errors and
// its requests.
async function openWatched(route) {
  const page = await browser.ctx.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  const reqs = watchRequests(page);
  await page.goto(serve.url + route);
  return { page, errors, reqs };
}

describe("the signed ledger in the browser", () => {
  test("docs: a pasted receipt is verified, a tampered one refused, and no request leaves the page", async () => {
    const { page, errors, reqs } = await openWatched("/docs#verify");
    await page.waitForLoadState("networkidle");
    // Turning to the panel loads the verifier; from then on nothing is fetched.
    await page.focus("#verify-text");
    await page.waitForSelector("body[data-ledger-ready='true']", { timeout: 20000 });
    await page.waitForLoadState("networkidle");
    reqs.mark();
    await page.fill("#verify-text", receipt);
    await page.fill("#verify-key", vkey);
    await page.click("#verify-form button[type=submit]");
    await page.waitForSelector("body[data-verified='1']");
    assert.equal(await page.getAttribute("#verify-result", "data-verdict"), "holds");
    assert.match(await page.locator("#verify-result").textContent(),
      /^✓ receipt holds: entry 3 \(coordination\.lease lease_3\) is in the leaseplane\/acme tree of size 5 \(root [A-Za-z0-9+/=]{44}\), signature checked$/);
    await shot(page, "docs-verify-receipt");
    // One changed character of the first proof hash.
    const lines = receipt.split("\n");
    lines[3] = (lines[3][0] === "A" ? "B" : "A") + lines[3].slice(1);
    await page.fill("#verify-text", lines.join("\n"));
    await page.click("#verify-form button[type=submit]");
    await page.waitForSelector("body[data-verified='2']");
    assert.equal(await page.getAttribute("#verify-result", "data-verdict"), "refused");
    assert.match(await page.locator("#verify-result").textContent(), /^✗ refused: receipt: the inclusion proof of entry 3 does not lead to the root/);
    // The right receipt with another key.
    await page.fill("#verify-text", receipt);
    await page.fill("#verify-key", otherKey);
    await page.click("#verify-form button[type=submit]");
    await page.waitForSelector("body[data-verified='3']");
    assert.match(await page.locator("#verify-result").textContent(), /^✗ refused: checkpoint signature/);
    await shot(page, "docs-verify-refused");
    assert.deepEqual(reqs.after(), [], "requests left the page while verifying");
    assert.deepEqual(errors, []);
    await page.close();
  });

  test("playground: a run is sealed with a browser test key; every grant's receipt is verified there and by leaseplane verify", async () => {
    const { page, errors, reqs } = await openWatched("/playground");
    await page.waitForSelector("body[data-sealed='1']", { timeout: 20000 });
    await page.waitForLoadState("networkidle");
    reqs.mark();
    await page.selectOption("#example", "fences-rise-across-holders");
    await page.click("#run");
    await page.waitForSelector("body[data-sealed='2']");
    const key = (await page.locator("#ledger-key").textContent()).trim();
    assert.match(key, /^leaseplane\/playground-test-key\+[0-9a-f]{8}\+[A-Za-z0-9+/=]+$/);
    assert.match(await page.locator("#ledger-h").textContent(), /test key/);
    const transcript = JSON.parse(await page.locator("#transcript").textContent());
    const grants = transcript.steps.flatMap((s) => s.events || []).filter((e) => e.type === "coordination.lease");
    assert.ok(grants.length >= 2, "the example has grants");
    const receipts = await page.$$eval("#ledger-receipts .receipt-text", (ps) => ps.map((p) => p.textContent));
    assert.equal(receipts.length, grants.length, "a receipt for each grant");
    assert.equal(await page.locator("#verdicts .chip:has-text('✓ verified')").count(), grants.length);
    await shot(page, "playground-sealed");
    receipts.forEach((r, i) => {
      const f = path.join(tmp, `playground-receipt-${i}.txt`);
      fs.writeFileSync(f, r);
      const res = spawnSync(bin, ["verify", "--key", key, f], { encoding: "utf8" });
      assert.equal(res.status, 0, `leaseplane verify refused receipt ${i}: ${res.stderr}`);
      assert.match(res.stdout, new RegExp(`^receipt holds: entry \\d+ \\(coordination\\.lease ${grants[i].leaseId}\\) is in the leaseplane/playground-test-key tree`));
    });
    // The key is kept: another load signs with the same one.
    await page.reload();
    await page.waitForSelector("body[data-sealed='1']", { timeout: 20000 });
    assert.equal((await page.locator("#ledger-key").textContent()).trim(), key);
    assert.deepEqual(reqs.after().filter((u) => !u.startsWith(serve.url + "/playground") && !u.includes("/static/")), [],
      "the playground called something besides its own page and assets");
    assert.deepEqual(errors, []);
    await page.close();
  });
});
