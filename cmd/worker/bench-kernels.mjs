// bench-kernels.mjs compares the two kernel builds a Durable Object could
// host, in Node's V8 (workerd runs V8 too): the wasip1 reactor the object
// hosts (wasm/wasip1, through kernel.mjs's WASI shim) and the GOOS=js build
// (wasm/js, through Go's wasm_exec.js and its glue.js). For each: start-up (instantiate and
// the Go runtime's start) and the cost of one scenario step, over 2,000
// steps that renew one lease after 2,000 to warm up. `make bench-worker` runs it after bench.mjs.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { Kernel } from "./kernel.mjs";
import { root } from "./miniflare.mjs";

const STEPS = 2000;
const WARM = 2000;
const steps = Array.from({ length: WARM + STEPS }, (_, i) =>
  JSON.stringify({ atMs: 1000 + i * 10, op: "acquire", resource: "lock:bench", actorDid: "did:web:bench.example:agent:1" }),
);
const enc = new TextEncoder();
const median = (xs) => xs.slice().sort((a, b) => a - b)[Math.floor(xs.length / 2)];

// wasip1
const wasipMod = new WebAssembly.Module(fs.readFileSync(path.join(root, "bin/worker/kernel.wasm")));
const wasipBoot = [];
let k;
for (let i = 0; i < 5; i++) {
  const t = performance.now();
  k = new Kernel(wasipMod);
  k.new(new Uint8Array(0));
  wasipBoot.push(performance.now() - t);
}
for (const s of steps.slice(0, WARM)) k.stepScenario(enc.encode(s));
let t = performance.now();
for (const s of steps.slice(WARM)) k.stepScenario(enc.encode(s));
const wasipStep = ((performance.now() - t) * 1000) / STEPS;

// GOOS=js
globalThis.require ??= createRequire(import.meta.url);
globalThis.fs ??= fs;
await import(path.join(root, "web/static/wasm_exec.js"));
await import(path.join(root, "web/static/glue.js"));
const jsMod = new WebAssembly.Module(fs.readFileSync(path.join(root, "web/static/leaseplane.wasm")));
const jsBoot = [];
let m;
for (let i = 0; i < 5; i++) {
  const t0 = performance.now();
  const go = new Go();
  const inst = new WebAssembly.Instance(jsMod, go.importObject);
  go.run(inst);
  m = globalThis.leaseplane.newMachine(null);
  jsBoot.push(performance.now() - t0);
}
for (const s of steps.slice(0, WARM)) m.step(s);
t = performance.now();
for (const s of steps.slice(WARM)) m.step(s);
const jsStep = ((performance.now() - t) * 1000) / STEPS;

const size = (f) => fs.statSync(path.join(root, f)).size;
console.log(`| build | size B | start-up ms (median of 5) | one step µs (mean of ${STEPS}, after ${WARM}) |`);
console.log("| --- | ---: | ---: | ---: |");
console.log(`| wasip1 reactor (hosted) | ${size("bin/worker/kernel.wasm")} | ${median(wasipBoot).toFixed(1)} | ${wasipStep.toFixed(1)} |`);
console.log(`| GOOS=js | ${size("web/static/leaseplane.wasm")} | ${median(jsBoot).toFixed(1)} | ${jsStep.toFixed(1)} |`);
process.exit(0);
