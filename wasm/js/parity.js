// parity.js runs scenarios through the GOOS=js kernel under Node, for the
// parity test in wasm/parity.
//
// Usage: node wasm/js/parity.js [DIR]   (DIR holds leaseplane.wasm and
// wasm_exec.js; default web/static)
//
// Protocol: each stdin line is a JSON string literal holding one scenario
// (so a scenario's own newlines survive); each stdout line, in the same
// order, is {"t": transcript} or {"e": error message} for a replay that
// threw. The process exits when stdin ends.
"use strict";
const fs = require("fs");
const path = require("path");
const readline = require("readline");

const dir = process.argv[2] || path.join(__dirname, "..", "..", "web", "static");
globalThis.fs ??= fs;
globalThis.crypto ??= require("crypto");
require(path.resolve(dir, "wasm_exec.js"));
require(path.resolve(dir, "glue.js"));

async function main() {
  const go = new Go();
  const { instance } = await WebAssembly.instantiate(fs.readFileSync(path.join(dir, "leaseplane.wasm")), go.importObject);
  go.run(instance);
  const lp = globalThis.leaseplane;
  if (!lp || typeof lp.replay !== "function") throw new Error("leaseplane.wasm did not install globalThis.leaseplane.replay");
  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of rl) {
    if (line === "") continue;
    let reply;
    try {
      reply = { t: lp.replay(JSON.parse(line)) };
    } catch (err) {
      reply = { e: String(err && err.message) };
    }
    process.stdout.write(JSON.stringify(reply) + "\n");
  }
  process.exit(0);
}

main().catch((err) => {
  console.error("parity.js:", err);
  process.exit(1);
});
