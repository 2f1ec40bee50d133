// leaseplane.test.js checks the GOOS=js kernel's JavaScript API under
// Node's test runner: `make test-node` (node --test wasm/js/). It loads
// web/static/leaseplane.wasm with web/static/wasm_exec.js exactly as a
// page does; `make wasm` builds both.
"use strict";
const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("fs");
const path = require("path");

const root = path.join(__dirname, "..", "..");
const staticDir = path.join(root, "web", "static");
const corpusDir = path.join(root, "kernel", "testdata", "scenarios");
globalThis.fs ??= fs;
globalThis.crypto ??= require("crypto");
require(path.join(staticDir, "wasm_exec.js"));
require(path.join(staticDir, "glue.js"));

let lp;
test.before(async () => {
  const go = new Go();
  const { instance } = await WebAssembly.instantiate(fs.readFileSync(path.join(staticDir, "leaseplane.wasm")), go.importObject);
  go.run(instance);
  lp = globalThis.leaseplane;
});

const corpus = fs.readdirSync(corpusDir).filter((f) => f.endsWith(".json")).sort();

test("the corpus is there", () => {
  assert.ok(corpus.length > 0, "no scenarios under kernel/testdata/scenarios");
});

test("replay prints each corpus scenario's golden transcript", () => {
  for (const f of corpus) {
    const golden = path.join(corpusDir, f.replace(/\.json$/, ".golden"));
    if (!fs.existsSync(golden)) continue;
    const got = lp.replay(fs.readFileSync(path.join(corpusDir, f), "utf8"));
    assert.equal(got, fs.readFileSync(golden, "utf8"), f);
  }
});

test("replay throws an Error naming the problem", () => {
  const cases = [
    ["{", /malformed JSON/],
    ['{"rules":null}', /steps is required/],
    ['{"steps":[],"extra":1}', /unknown field "extra"/],
    ['{"steps":[]} {}', /trailing data/],
    ['{"rules":{"bogus":1},"steps":[]}', /bogus/],
  ];
  for (const [input, message] of cases) {
    assert.throws(() => lp.replay(input), (err) => err instanceof Error && message.test(err.message), input);
  }
  assert.throws(() => lp.replay(42), /must be a string/);
  assert.throws(() => lp.replay(), /must be a string/);
});

test("version names the kernel and the build", () => {
  const v = lp.version();
  assert.match(v.kernel, /^\d+\.\d+\.\d+$/);
  assert.match(v.build, /^[0-9a-f]{12}$/);
});

test("a machine steps like the transcript, line by line", () => {
  for (const f of corpus.filter((f) => !f.startsWith("invalid-"))) {
    const s = JSON.parse(fs.readFileSync(path.join(corpusDir, f), "utf8"));
    if (s.semantics !== undefined) continue; // a machine decides by the newest semantics
    const lines = lp.replay(fs.readFileSync(path.join(corpusDir, f), "utf8")).split("\n");
    const m = lp.newMachine(s.rules === undefined ? null : JSON.stringify(s.rules));
    s.steps.forEach((step, i) => {
      const out = m.step(JSON.stringify(step));
      const line = lines[i + 1].replace(/,$/, "");
      assert.ok(line.endsWith("," + out.slice(1)), `${f} step ${i}: ${out} is not the end of ${line}`);
      const o = JSON.parse(out);
      const keys = ["answer", ...("held" in o ? ["held"] : []), "events", ...("answers" in o ? ["answers"] : [])];
      assert.deepEqual(Object.keys(o), keys);
    });
    assert.equal(`],"trust":${m.trust()}}`, lines[lines.length - 2], f);
    m.close();
  }
});

test("nextAlarm and snapshot", () => {
  const m = lp.newMachine('{"readShared":["file:"]}');
  const twin = lp.newMachine('{"readShared":["file:"]}');
  assert.equal(m.nextAlarm(), null);
  const first = '{"atMs":1000,"op":"acquire","resource":"lock:a","actorDid":"did:web:acme.example:agent:a"}';
  const out = JSON.parse(m.step(first));
  assert.equal(out.answer.ok, true);
  assert.equal(m.nextAlarm(), out.answer.lease.expiresAtMs);
  twin.step(first);
  const snap = JSON.parse(m.snapshot());
  assert.equal(snap.nowMs, 1000);
  assert.equal(snap.resources[0].name, "lock:a");
  assert.equal(m.snapshot(), twin.snapshot());
  const second = '{"atMs":2000,"op":"acquire","resource":"lock:a","actorDid":"did:web:acme.example:agent:b"}';
  const a = m.step(second);
  assert.equal(a, twin.step(second));
  assert.match(a, /"reason":"lease_held"/);
  m.close();
  twin.close();
});

test("bad rules and closed machines throw", () => {
  assert.throws(() => lp.newMachine('{"bogus":1}'), /newMachine: .*bogus/);
  assert.throws(() => lp.newMachine(7), /must be a string/);
  const m = lp.newMachine();
  assert.equal(m.trust(), "{}");
  m.close();
  for (const method of ["step", "trust", "snapshot", "nextAlarm", "close"]) {
    assert.throws(() => m[method]("{}"), /machine is closed/, method);
  }
  assert.throws(() => lp.newMachine().step(1), /must be a string/);
});

test("an invalid step is an answer, not a throw", () => {
  const m = lp.newMachine(null);
  const out = JSON.parse(m.step("not json"));
  assert.equal(out.answer.reason, "invalid_request");
  assert.deepEqual(out.events, []);
  m.close();
});
