// Browser tests of the playground and the docs (make test-browser).
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { execFile } from "node:child_process";
import http from "node:http";
import { after, before, describe, test } from "node:test";
import { replayAll, shot, watchRequests } from "./harness.mjs";
import { useServe } from "./suite.mjs";
import { Plane } from "../../server/client/js/index.js";

let tmp, bin, expected, serve, site, browser;
useServe("browser", { site: true }, (e) => {
  ({ tmp, bin, serve, site, browser } = e);
  expected = replayAll(bin);
});


async function openPlayground(url) {
  const page = await browser.ctx.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  const reqs = watchRequests(page);
  await page.goto(url);
  await page.waitForSelector("body[data-runs='1']", { timeout: 20000 });
  await page.waitForLoadState("networkidle");
  reqs.mark();
  return { page, reqs, errors };
}

async function runAndRead(page, how) {
  const before = Number(await page.getAttribute("body", "data-runs"));
  if (how === "click") await page.click("#run");
  else await page.keyboard.press("Control+Enter");
  await page.waitForSelector(`body[data-runs='${before + 1}']`);
  return page.locator("#transcript").textContent();
}

describe("served by leaseplane serve", () => {
  test("the wasm is gzipped by Accept-Encoding and cached by its hash", async () => {
    const html = await (await fetch(serve.url + "/playground")).text();
    const wasm = html.match(/data-wasm="([^"]+)"/)[1];
    assert.match(wasm, /^\/static\/leaseplane\.[0-9a-f]{12}\.wasm$/);
    for (const [ae, enc] of [["br, gzip", "gzip"], ["gzip", "gzip"], ["identity", null]]) {
      const res = await fetch(serve.url + wasm, { headers: { "Accept-Encoding": ae } });
      assert.equal(res.status, 200);
      assert.equal(res.headers.get("content-type"), "application/wasm");
      assert.equal(res.headers.get("content-encoding"), enc, `Accept-Encoding ${ae}`);
      assert.equal(res.headers.get("cache-control"), "public, max-age=31536000, immutable");
      await res.arrayBuffer();
    }
    const root = await fetch(serve.url + "/", { redirect: "manual" });
    assert.equal(root.status, 302);
    assert.equal(root.headers.get("location"), "/playground");
  });

  test("playground: before its first verdict is drawn a first visit fetches the page's own files and the kernel once, not the ledger's module nor the examples", async () => {
    const page = await browser.ctx.newPage();
    await page.goto(serve.url + "/playground");
    // The ledger's module is fetched after the first verdict, for its seal.
    await page.waitForSelector("body[data-ledger-ready='true']", { timeout: 20000 });
    const { marks, fetched } = await page.evaluate(() => ({
      marks: Object.fromEntries(performance.getEntriesByType("mark").map((e) => [e.name, e.startTime])),
      fetched: performance.getEntriesByType("resource").map((e) => ({ name: new URL(e.name).pathname.replace(/\.[0-9a-f]{12}\./, "."), at: e.startTime })),
    }));
    for (const m of ["lp:kernel-fetch", "lp:kernel-compiled", "lp:kernel-ready", "lp:first-verdict", "lp:first-verdict-painted"]) assert.ok(m in marks, `no mark ${m}`);
    assert.ok(marks["lp:first-verdict"] <= marks["lp:first-verdict-painted"]);
    const before = fetched.filter((r) => r.at < marks["lp:first-verdict-painted"]).map((r) => r.name).sort();
    assert.deepEqual(before, ["/static/app.css", "/static/kernel-boot.js", "/static/kernel.js", "/static/leaseplane.wasm", "/static/ledger.js", "/static/playground.js", "/static/timeline.js"]);
    const later = fetched.filter((r) => r.at >= marks["lp:first-verdict-painted"]).map((r) => r.name).sort();
    assert.deepEqual(later, ["/static/corpus.json", "/static/ledger.wasm"]);
    await page.close();
  });

  test("playground: every corpus scenario through the UI equals leaseplane replay (browser parity)", async () => {
    const { page, reqs, errors } = await openPlayground(serve.url + "/playground");
    await shot(page, "playground-first-load");
    assert.match(await page.locator("#kernel-version[data-ready]").textContent(), /^kernel \d+\.\d+\.\d+ · build [0-9a-f]{6,}$/);
    const names = await page.$$eval("#example option[value]:not([value=''])", (os) => os.map((o) => o.value));
    for (const name of expected.keys()) assert.ok(names.includes(name), `the examples menu lacks ${name} (run make generate)`);
    for (const [name, want] of expected) {
      await page.selectOption("#example", name);
      for (const how of ["click", "keyboard"]) {
        assert.equal(await runAndRead(page, how), want, `transcript of ${name} (run by ${how}) differs from leaseplane replay`);
        assert.equal(await page.getAttribute("body", "data-last-run"), how);
      }
      if (name === "thundering-herd") await shot(page, "playground-thundering-herd");
    }
    assert.deepEqual(reqs.after(), [], "requests left the page after load");
    assert.deepEqual(errors, []);
    await page.close();
  });

  test("playground: breaking a deadlock shows the refusal with waitingOn on the timeline, and links to the docs", async () => {
    const { page, reqs } = await openPlayground(serve.url + "/playground");
    await page.selectOption("#example", "breaking-a-deadlock");
    await page.keyboard.press("Control+Enter");
    await page.waitForSelector("body[data-runs='2']");
    const label = await page.locator("#timeline svg .mark.deadlock .dl-label").textContent();
    assert.match(label, /deadlock .*waitingOn db:billing\/customers/);
    const verdict = await page.locator("#verdicts tr[data-step='3']").textContent();
    assert.match(verdict, /refused\s*deadlock/);
    assert.match(verdict, /waitingOn\s*db:billing\/customers/);
    assert.equal(await page.locator("#timeline svg .lease").count(), 4);
    await page.hover("#verdicts tr[data-step='3']");
    assert.equal(await page.locator("#timeline svg .mark.deadlock.hl").count(), 1, "pointing at the refusal lights its mark");
    assert.equal(await page.locator("#timeline svg .cursor").count(), 1);
    await shot(page, "playground-breaking-a-deadlock");
    assert.deepEqual(reqs.after(), []);
    await page.click("text=How it works");
    await page.waitForURL(/\/docs$/);
    await page.waitForSelector("#recipes");
    await page.close();
  });

  test("playground: usable with the keyboard alone", async () => {
    const { page } = await openPlayground(serve.url + "/playground");
    let found = false;
    for (let i = 0; i < 40 && !found; i++) {
      await page.keyboard.press("Tab");
      found = await page.evaluate(() => document.activeElement?.id === "example");
    }
    assert.ok(found, "Tab never reaches the examples menu");
    await page.keyboard.press("ArrowDown"); // two release agents -> a crashed holder
    assert.equal(await page.inputValue("#example"), "crashed-holder");
    const got = await runAndRead(page, "keyboard");
    assert.equal(got, expected.get("crashed-holder"));
    // The steps' controls are reachable too: move step 2 up with Enter.
    await page.focus("#f-s1-up");
    await page.keyboard.press("Enter");
    const json = JSON.parse(await page.inputValue("#json"));
    assert.equal(json.steps[0].atMs, 2000, "step 2 did not move up");
    assert.equal(await page.inputValue("#example"), "", "an edited scenario is no longer the example");
    await page.close();
  });

  test("playground: the form and the JSON edit the same scenario; errors are shown, not thrown", async () => {
    const { page, errors } = await openPlayground(serve.url + "/playground");
    await page.selectOption("#f-s1-actorDid", "did:web:acme.example:agent:release");
    let json = JSON.parse(await page.inputValue("#json"));
    assert.equal(json.steps[1].actorDid, "did:web:acme.example:agent:release");
    await page.fill("#f-s1-atMs", "1234");
    json = JSON.parse(await page.inputValue("#json"));
    assert.equal(json.steps[1].atMs, 1234);
    const t = await runAndRead(page, "click");
    assert.match(t, /"atMs":1234,"op":"acquire","answer":\{"ok":true,"lease":\{"id":"[^"]+","resource":"lock:deploy\/production","holder":"did:web:acme.example:agent:release"/);
    json.steps[0].resource = "lock:renamed";
    await page.fill("#json", JSON.stringify(json, null, 2));
    await page.waitForFunction(() => document.getElementById("f-s0-resource")?.value === "lock:renamed");
    await page.fill("#json", '{"steps": [}');
    await page.waitForSelector("#json-error:not([hidden])");
    await page.fill("#json", '{"rules": {"readShared": 5}, "steps": []}');
    await runAndRead(page, "keyboard");
    assert.match(await page.locator("#run-error").textContent(), /kernel refused the scenario: scenario: /);
    assert.deepEqual(errors, []);
    await page.close();
  });

  test("playground: a share link carries the scenario in the fragment", async () => {
    const { page } = await openPlayground(serve.url + "/playground");
    await page.selectOption("#example", "four-agent-cycle");
    const want = await runAndRead(page, "click");
    await page.fill("#f-s0-atMs", "900");
    const edited = await runAndRead(page, "click");
    assert.notEqual(edited, want);
    const url = await page.evaluate(() => window.lpPlayground.shareLink());
    assert.match(url, /#z=[A-Za-z0-9_-]+$/);
    const { page: p2, reqs } = await openPlayground(url);
    assert.equal(await p2.locator("#transcript").textContent(), edited);
    assert.equal(await p2.inputValue("#example"), "", "a shared scenario is not one of the examples");
    assert.deepEqual(reqs.after(), []);
    await p2.close();
    await page.close();
  });

  test("docs: every live example runs (click and Ctrl+Enter) and matches the kernel's printed response", async () => {
    const page = await browser.ctx.newPage();
    const reqs = watchRequests(page);
    await page.goto(serve.url + "/docs");
    await page.waitForSelector("body[data-state='ready']", { timeout: 20000 });
    await page.waitForLoadState("networkidle");
    reqs.mark();
    await shot(page, "docs-top");
    const ids = await page.$$eval("[data-live]", (ss) => ss.map((s) => s.id));
    assert.equal(ids.length, 7);
    let runs = 0;
    for (const id of ids) {
      for (const how of ["click", "keyboard"]) {
        if (how === "click") await page.click(`#${id} [data-run]`);
        else { await page.focus(`#${id} [data-scenario]`); await page.keyboard.press("Control+Enter"); }
        await page.waitForSelector(`body[data-runs='${++runs}']`);
        assert.equal(await page.getAttribute(`#${id}`, "data-result"), "match", `${id} (run by ${how}) differs from its printed response`);
      }
    }
    assert.equal(await page.locator("#breaking-a-deadlock [data-live-out] svg .mark.deadlock").count(), 1, "the docs' run draws the deadlock");
    // The herd that waits without polling: fifty held asks drawn as waits.
    assert.equal(await page.locator("#herd-of-fifty-held [data-live-out] svg g.ask").count(), 50, "the held herd's waits");
    await page.locator("#breaking-a-deadlock").scrollIntoViewIfNeeded();
    await shot(page, "docs-breaking-a-deadlock");
    // An edited example shows every step of the edited run.
    const ta = "#two-release-agents [data-scenario]";
    await page.fill(ta, (await page.inputValue(ta)).replace('"atMs": 1200', '"atMs": 1201'));
    await page.click("#two-release-agents [data-run]");
    await page.waitForSelector("#two-release-agents[data-result='edited']");
    assert.match(await page.locator("#two-release-agents [data-live-out]").textContent(), /step 7 · wait/);
    // Code tabs: click and arrow keys.
    await page.click("#take-and-release-tab-js");
    assert.equal(await page.isVisible("#take-and-release-js"), true);
    assert.equal(await page.isVisible("#take-and-release-curl"), false);
    await page.keyboard.press("ArrowRight");
    assert.equal(await page.evaluate(() => document.activeElement.id), "take-and-release-tab-py");
    assert.equal(await page.isVisible("#take-and-release-py"), true);
    await page.locator("#recipes").scrollIntoViewIfNeeded();
    await shot(page, "docs-recipes");
    assert.deepEqual(reqs.after(), [], "requests left the docs page after load");
    // "Open in the playground" carries a recipe's scenario there.
    await page.click("#recipe-queue-for-the-slot a:has-text('Open in the playground')");
    await page.waitForURL(/\/playground#json=/);
    await page.waitForSelector("body[data-runs='1']");
    assert.match(await page.locator("#verdicts tr[data-step='4']").textContent(), /granted.*fence\s*2/s);
    assert.match(await page.locator("#verdicts tr[data-step='5']").textContent(), /released/);
    await page.close();
  });
});

describe("the docs' recipes, run as printed against leaseplane serve", () => {
  const unescape = (s) => s.replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&#34;/g, '"').replace(/&#39;/g, "'").replace(/&quot;/g, '"').replace(/&amp;/g, "&");
  // Each recipe's five tabs: plain HTTP (curl, fetch, requests), then the
  // Python client (/usr/bin/python3 with the package on PYTHONPATH) and the
  // TypeScript client (imported as "leaseplane" from a node_modules that
  // links server/client/js, as npm install ./server/client/js makes it).
  const clientDir = (p) => fileURLToPath(new URL(`../../server/client/${p}`, import.meta.url));
  const runners = {
    curl: ["bash", ".sh"], js: ["node", ".mjs"], py: ["python3", ".py"],
    pyclient: ["/usr/bin/python3", ".py", { PYTHONPATH: clientDir("python"), PYTHONDONTWRITEBYTECODE: "1" }],
    tsclient: ["node", ".mjs"],
  };
  const slot = "lock:deploy/production";
  const didRelease = "did:web:acme.example:agent:release", didCost = "did:web:acme.example:agent:cost";
  let html, plane;
  const code = (id) => {
    const m = html.match(new RegExp(`<div role="tabpanel" id="${id}"[^>]*><pre class="code"[^>]*>([\\s\\S]*?)</pre>`));
    assert.ok(m, `no code panel #${id}`);
    return unescape(m[1]);
  };
  const runCode = (lang, text) => new Promise((resolve) => {
    const [cmd, ext, env = {}] = runners[lang];
    const dir = path.join(tmp, `recipe-${lang}`);
    fs.mkdirSync(path.join(dir, "node_modules"), { recursive: true });
    if (lang === "tsclient" && !fs.existsSync(path.join(dir, "node_modules", "leaseplane"))) {
      fs.symlinkSync(clientDir("js"), path.join(dir, "node_modules", "leaseplane"), "dir");
    }
    const file = path.join(dir, `recipe${ext}`);
    fs.writeFileSync(file, text + "\n");
    const url = `http://127.0.0.1:${proxy.address().port}`;
    execFile(cmd, [file], { cwd: dir, env: { ...process.env, ...env, LEASEPLANE_URL: url, LEASEPLANE_KEY: serve.key }, timeout: 30000 },
      (err, stdout, stderr) => resolve({ code: err ? err.code ?? 1 : 0, stdout, stderr }));
  });
  // until polls cond (async) until it is truthy, for 20 s at the most.
  const until = async (what, cond) => {
    for (const end = Date.now() + 20000; Date.now() < end; await new Promise((r) => setTimeout(r, 50))) {
      const v = await cond();
      if (v) return v;
    }
    assert.fail(`gave up waiting for ${what}`);
  };
  // runWatched runs the recipe of lang while the slot's events stream is
  // open, and checks from the plane that every lease the recipe's agent
  // took there was released by its id and that the slot is free after.
  // during(run) may act while the recipe runs.
  const runWatched = async (lang, id, actorDid, during = async () => {}) => {
    const ctl = new AbortController();
    const events = [];
    let live;
    const ready = new Promise((r) => (live = r));
    const reading = (async () => {
      for await (const e of plane.events({ prefix: slot, signal: ctl.signal, onReady: live })) events.push(e);
    })();
    await ready;
    const running = runCode(lang, code(`${id}-${lang}`));
    await during();
    const r = await running;
    assert.equal(r.code, 0, r.stderr + r.stdout);
    const taken = events.filter((e) => e.type === "coordination.lease" && e.actorDid === actorDid);
    await until(`the release of each lease ${actorDid} took`, () =>
      taken.length > 0 && taken.every((t) => events.some((e) => e.type === "coordination.release" && e.leaseId === t.leaseId)));
    ctl.abort();
    await reading;
    assert.equal(taken.length, 1, `${actorDid} took one lease: ${JSON.stringify(events)}`);
    assert.deepEqual((await plane.wait({ prefix: slot })).queues, [], "the slot has no holder or waiter after the recipe");
    return { r, taken: taken[0] };
  };

  before(async () => {
    assert.ok(serve.key, "leaseplane serve printed no key on its first start");
    html = await (await fetch(serve.url + "/docs")).text();
    plane = new Plane({ url: serve.url, key: serve.key });
  });

  // The recipes reach the plane through proxy, which counts the acquire
  // requests they send (the plane's own metric counts commands, and a held
  // request is several of those).
  let proxy, acquired = 0;
  const acquires = () => acquired;
  before(async () => {
    proxy = http.createServer((req, res) => {
      if (req.method === "POST" && req.url.startsWith("/api/v1/acp/coordination/lease")) acquired++;
      const up = http.request(serve.url + req.url, { method: req.method, headers: req.headers }, (ur) => {
        res.writeHead(ur.statusCode, ur.headers);
        ur.pipe(res);
      });
      up.on("error", () => res.destroy());
      req.pipe(up);
    });
    await new Promise((r) => proxy.listen(0, "127.0.0.1", r));
  });
  after(() => { proxy.closeAllConnections(); proxy.close(); });

  test("every recipe has its five variants on the page, the client ones importing the client", () => {
    for (const id of ["take-and-release", "queue-for-the-slot"]) {
      for (const lang of Object.keys(runners)) assert.ok(code(`${id}-${lang}`).length > 0, `${id}-${lang}`);
      assert.match(code(`${id}-pyclient`), /^import leaseplane$/m);
      assert.match(code(`${id}-tsclient`), /^import \{[^}]*\bPlane\b[^}]*\} from "leaseplane";$/m);
    }
  });

  for (const lang of Object.keys(runners)) {
    const client = lang.endsWith("client");
    test(`take a lease and release it (${lang})`, async () => {
      const { r } = await runWatched(lang, "take-and-release", didRelease);
      assert.match(r.stdout, /"released":\s*true|released: true|released: True/);
    });
    test(`queue for the production deploy slot (${lang})`, async () => {
      const held = await plane.acquire({ resource: slot, actorDid: didRelease });
      const asked = acquires();
      const { r, taken } = await runWatched(lang, "queue-for-the-slot", didCost, async () => {
        // The holder lets go once the recipe is queued behind it.
        await until("the recipe queued behind the holder", async () =>
          (await plane.wait({ prefix: slot })).queues.some((q) => q.waiters?.some((w) => w.actorDid === didCost)));
        assert.equal(await plane.release({ resource: slot, actorDid: didRelease, leaseId: held.id }), true);
      });
      assert.equal(taken.fence, held.fence + 1);
      assert.match(r.stdout, new RegExp(`deploying with fence ${held.fence + 1}\\b`));
      if (client) {
        // The client waited in one held request: no polling, no renewal.
        assert.equal(acquires() - asked, 1, "acquire requests the client recipe sent");
      } else {
        assert.ok(acquires() - asked >= 2, "the plain-HTTP recipe was refused, backed off and asked again");
        assert.match(r.stdout, /"released":\s*true|released: true|released: True/);
      }
    });
  }
});

describe("leaseplane site output on a plain static host", () => {
  test("the playground and the docs run their examples", async () => {
    const { page, reqs, errors } = await openPlayground(site.url + "/playground/");
    assert.equal(await page.locator("#transcript").textContent(), expected.get("two-release-agents"));
    await page.selectOption("#example", "breaking-a-deadlock");
    assert.equal(await runAndRead(page, "keyboard"), expected.get("breaking-a-deadlock"));
    await shot(page, "site-playground");
    assert.deepEqual(reqs.after(), []);
    assert.deepEqual(errors, []);
    await page.click("nav >> text=Docs");
    await page.waitForURL(/\/docs\/$/);
    await page.waitForSelector("body[data-state='ready']");
    await page.click("#crashed-holder [data-run]");
    await page.waitForSelector("#crashed-holder[data-result]");
    assert.equal(await page.getAttribute("#crashed-holder", "data-result"), "match");
    await page.close();
  });
});
