// Parity of the Workers tier: every scenario that cmd/worker/paritygen
// wrote (the whole corpus and seeded random scenarios, each with the native
// kernel's status, Retry-After, answer and events at every step and the
// trust at the end) replayed through the Durable Object in workerd must
// give the same bytes. workerd is the fifth host of the parity run, next
// to native, wazero, Node and Chromium.
//
// LEASEPLANE_WORKER_PARITY names the file (make test-worker writes it).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { start } from "../miniflare.mjs";

const file = process.env.LEASEPLANE_WORKER_PARITY;
let dataDir, mf, stub;

before(async () => {
  dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "leaseplane-worker-parity-"));
  ({ mf } = await start({ dataDir }));
  const ns = await mf.getDurableObjectNamespace("WORKSPACES");
  stub = ns.get(ns.idFromName("parity"));
});

after(async () => {
  await mf?.dispose();
  fs.rmSync(dataDir, { recursive: true, force: true });
});

const show = (b64) => Buffer.from(b64, "base64").toString("utf8");

test("the corpus and the random scenarios give native's bytes in the Durable Object", async () => {
  assert.ok(file, "LEASEPLANE_WORKER_PARITY must name the file that go run ./cmd/worker/paritygen wrote (make test-worker does)");
  const lines = fs.readFileSync(file, "utf8").split("\n").filter((l) => l !== "");
  let corpus = 0, random = 0, refused = 0, steps = 0, held = 0, answered = 0;
  const failures = [];
  for (const line of lines) {
    const sc = JSON.parse(line);
    if (sc.refused) {
      refused++; // refused by the scenario parser before any kernel
      continue;
    }
    if (sc.name.startsWith("random seed ")) random++;
    else corpus++;
    const res = await stub.fetch("https://workspace/replay", {
      method: "POST",
      body: JSON.stringify({ rules: sc.rules ?? null, steps: sc.steps }),
    });
    assert.equal(res.status, 200);
    const got = await res.json();
    if (got.e) {
      failures.push(`${sc.name}: the object failed: ${got.e}`);
      continue;
    }
    steps += got.steps.length;
    const want = sc.expect;
    let diff = null;
    if (got.steps.length !== want.steps.length) diff = `${got.steps.length} steps, want ${want.steps.length}`;
    for (let i = 0; !diff && i < want.steps.length; i++) {
      const g = got.steps[i], w = want.steps[i];
      if (g.s !== w.s || g.r !== w.r || g.a !== w.a || g.v !== w.v || g.h !== w.h || JSON.stringify(g.w) !== JSON.stringify(w.w)) {
        diff = `step ${i} (${show(sc.steps[i])}):\n  object: ${g.s} retry ${g.r} ${show(g.a)} ${show(g.v)} held ${g.h} answers ${JSON.stringify(g.w)}` +
          `\n  native: ${w.s} retry ${w.r} ${show(w.a)} ${show(w.v)} held ${w.h} answers ${JSON.stringify(w.w)}`;
      }
      if (w.h) held++;
      answered += w.w.length;
    }
    if (!diff && got.trust !== want.trust) diff = `trust: object ${show(got.trust)}, native ${show(want.trust)}`;
    if (diff) failures.push(`${sc.name}: ${diff}`);
  }
  assert.ok(corpus > 0, "no corpus scenarios in the file");
  assert.ok(random >= 1000, `only ${random} random scenarios; the run needs at least 1000`);
  assert.ok(held > 0 && answered > 0, `the scenarios made ${held} held asks and answered ${answered}: parity of held asks needs both`);
  assert.equal(failures.length, 0, `${failures.length} scenarios differ:\n${failures.slice(0, 3).join("\n")}`);
  console.log(`parity: ${corpus} corpus and ${random} random scenarios (${steps} steps, ${held} held asks, ${answered} answered) gave native's bytes in the Durable Object; ${refused} refused by the parser on every host`);
});
