// coldstart.js measures the GOOS=js kernel's cold start under Node:
// compiling and instantiating web/static/leaseplane.wasm, running Go's
// main until globalThis.leaseplane exists, and the first replay of a
// corpus scenario. Each run is a fresh process (node caches nothing
// between processes); it prints one JSON line of milliseconds.
// Usage: node wasm/js/coldstart.js [SCENARIO]
"use strict";
const t0 = performance.now();
const fs = require("fs");
const path = require("path");
const staticDir = path.join(__dirname, "..", "..", "web", "static");
globalThis.fs ??= fs;
globalThis.crypto ??= require("crypto");
require(path.join(staticDir, "wasm_exec.js"));
require(path.join(staticDir, "glue.js"));
const scenario = fs.readFileSync(process.argv[2] || path.join(__dirname, "..", "..", "kernel", "testdata", "scenarios", "thundering-herd.json"), "utf8");

(async () => {
  const bytes = fs.readFileSync(path.join(staticDir, "leaseplane.wasm"));
  const t1 = performance.now();
  const go = new Go();
  const { instance } = await WebAssembly.instantiate(bytes, go.importObject);
  const t2 = performance.now();
  go.run(instance);
  const t3 = performance.now();
  globalThis.leaseplane.replay(scenario);
  const t4 = performance.now();
  globalThis.leaseplane.replay(scenario);
  const t5 = performance.now();
  const r = (x) => Math.round(x * 10) / 10;
  console.log(JSON.stringify({
    load: r(t1 - t0), instantiate: r(t2 - t1), goMain: r(t3 - t2),
    firstReplay: r(t4 - t3), secondReplay: r(t5 - t4), total: r(t4 - t0),
  }));
  process.exit(0);
})();
