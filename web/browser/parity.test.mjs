// Parity in Chromium: the corpus and at least 1,000 seeded random
// scenarios (held asks among them), replayed by the kernel inside the
// playground page (leaseplane.replay of the GOOS=js build), must give the
// native kernel's transcript byte for byte, or the same error. The native
// side is cmd/worker/paritygen -replay; the run's seed is printed, and
// LEASEPLANE_PARITY_SEED=N replays it.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { execFileSync } from "node:child_process";
import { test } from "node:test";
import { root } from "./harness.mjs";
import { useServe } from "./suite.mjs";

const env = useServe("parity");

test("the corpus and 1,000 random scenarios give native's transcripts in Chromium", async () => {
  const file = path.join(env.tmp, "parity.jsonl");
  const args = ["run", "./cmd/worker/paritygen", "-replay", "-n", "1000", "-o", file];
  if (process.env.LEASEPLANE_PARITY_SEED) args.push("-seed", process.env.LEASEPLANE_PARITY_SEED);
  execFileSync("go", args, { cwd: root, stdio: ["ignore", "inherit", "inherit"] });
  const lines = fs.readFileSync(file, "utf8").split("\n").filter((l) => l !== "").map((l) => JSON.parse(l));

  const page = await env.browser.ctx.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(env.serve.url + "/playground");
  await page.waitForSelector("body[data-runs='1']", { timeout: 20000 });

  let corpus = 0, random = 0, held = 0;
  const failures = [];
  for (let i = 0; i < lines.length; i += 50) {
    const batch = lines.slice(i, i + 50);
    const got = await page.evaluate((ins) => ins.map((s) => {
      try {
        return { t: globalThis.leaseplane.replay(s) };
      } catch (err) {
        return { e: String(err && err.message) };
      }
    }), batch.map((l) => l.in));
    batch.forEach((l, j) => {
      if (l.name.startsWith("random seed ")) random++;
      else corpus++;
      if (l.t && l.t.includes('"held"')) held++;
      const g = got[j];
      if (g.t !== l.t || g.e !== l.e) {
        failures.push(`${l.name}:\n  chromium: ${g.t ?? "error " + g.e}\n  native:   ${l.t ?? "error " + l.e}`.slice(0, 2000));
      }
    });
  }
  await page.close();
  assert.ok(corpus > 0, "no corpus scenarios");
  assert.ok(random >= 1000, `only ${random} random scenarios; the run needs at least 1000`);
  assert.ok(held > 0, "no transcript held an ask: parity of held asks needs some");
  assert.deepEqual(errors, []);
  assert.equal(failures.length, 0, `${failures.length} of ${lines.length} scenarios differ:\n${failures.slice(0, 3).join("\n")}`);
  console.log(`parity: ${corpus} corpus and ${random} random scenarios (${held} with held asks) gave native's transcripts in Chromium`);
});
